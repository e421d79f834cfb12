"""Channels declared in code, applied at deploy through the API resolver in this process, so a
deploy validates, compares and writes exactly as `channels apply` does: every problem before
anything is written, and no new version for an unchanged declaration.

The declaration wins: a channel changed through the API since the last deploy (or made by
another) is overwritten, and that is said in the result and the channel's status reason. An
archived channel is final, so declaring its name is refused. Removing a declaration archives
(or purges) the channel; one already gone is no error.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import quote, urlencode

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver

from cronledger.api import PREFIX, handle_event
from cronledger.local_gateway import v2_event

CREATED: Final = "created"
UPDATED: Final = "updated"
UNCHANGED: Final = "unchanged"


class DeployRefused(Exception):
    """The declaration cannot be applied; the message says why, every problem with its path."""


class ApiRefusal(Exception):
    """An error the API answered: its status, and its message naming each problem's path."""

    def __init__(self, status: int, error: Mapping[str, Any]) -> None:
        details = error.get("details") or []
        listed = "; ".join(f"{d.get('path')}: {d.get('message')}" for d in details)
        message = str(error.get("message", "refused")).removesuffix(f": {listed}")
        super().__init__(f"{message}: {listed}" if listed else message)
        self.status = status


@dataclass(frozen=True)
class InProcessApi:
    """Requests to the API resolver in this process, as API Gateway would deliver them."""

    app: APIGatewayHttpResolver

    def call(
        self,
        method: str,
        path: str,
        query: Mapping[str, str] | None = None,
        body: Mapping[str, Any] | None = None,
    ) -> Any:
        """The answer's JSON (None for 204), or `ApiRefusal` for an error."""
        target = PREFIX + path + (f"?{urlencode(query)}" if query else "")
        headers = {} if body is None else {"content-type": "application/json"}
        event = v2_event(
            method, target, headers, b"" if body is None else json.dumps(body).encode()
        )
        answer = handle_event(self.app, event)
        text = answer.get("body") or ""
        decoded = json.loads(text) if text else None
        status = int(answer["statusCode"])
        if status >= 400:
            error = decoded.get("error") if isinstance(decoded, dict) else None
            raise ApiRefusal(status, error if isinstance(error, dict) else {"message": text})
        return decoded


@dataclass(frozen=True)
class Applied:
    channel_id: str
    version: int
    outcome: str
    summary: str


def apply_declared(
    api: InProcessApi,
    document: Mapping[str, Any],
    previous: Mapping[str, Any] | None,
    deployer: str,
) -> Applied:
    """Make the channel what `document` declares, active. `previous` is what the last deploy
    declared (None for a first one); `deployer` names the deploy in what is said."""
    name = document.get("name")
    if not isinstance(name, str):
        raise DeployRefused("a declared channel needs a name (a string)")
    try:
        found = api.call("GET", "/channels", {"name": name})["data"]
        if not found:
            channel = api.call("POST", "/channels", body={**document, "status": "active"})["data"]
            summary = f"created {name} at version {channel['version']}, active"
            return Applied(channel["channel_id"], channel["version"], CREATED, summary)
        current = found[0]
        if current["status"] == "archived":
            raise DeployRefused(
                f"channel {name} is archived, which is final: declare the channel under another "
                f"name, or delete the archived one first (`cronledger channels delete {name}`)"
            )
        path = f"/channels/{quote(current['channel_id'], safe='')}"
        changed = _changed_outside(api, path, current, previous)
        definition = {k: v for k, v in document.items() if k != "status"}
        channel = api.call("PUT", path, body=definition)["data"]
        done = []
        if channel["version"] != current["version"]:
            done.append(f"version {current['version']} → {channel['version']}")
        if current["status"] != "active":
            done.append(f"{current['status']} → active")
        if not done:
            summary = f"{name} unchanged at version {channel['version']}, {channel['status']}"
            return Applied(channel["channel_id"], channel["version"], UNCHANGED, summary)
        overwrote = "" if changed is None else f"overwrote what was {changed}"
        said = f"{name}: {', '.join(done)}" + (f"; {overwrote}" if changed else "")
        reason = f"applied by the deploy of {deployer}" + (f": it {overwrote}" if changed else "")
        body = {"status": "active", "reason": reason}
        channel = api.call("PATCH", f"{path}/status", body=body)["data"]
        return Applied(channel["channel_id"], channel["version"], UPDATED, said)
    except ApiRefusal as exc:
        raise DeployRefused(f"channel {name}: {exc}") from None


def remove_declared(api: InProcessApi, channel_id: str, purge: bool, deployer: str) -> str:
    """Archive (or purge) the channel a declaration made; what was done, as a sentence."""
    path = f"/channels/{quote(channel_id, safe='')}"
    try:
        if purge:
            api.call("DELETE", path)
            return f"purged channel {channel_id}"
        reason = f"removed from the deploy of {deployer}"
        api.call("PATCH", f"{path}/status", body={"status": "archived", "reason": reason})
        return f"archived channel {channel_id}"
    except ApiRefusal as exc:
        if exc.status == 404:
            return f"channel {channel_id} was already gone"
        raise DeployRefused(f"channel {channel_id}: {exc}") from None


def _changed_outside(
    api: InProcessApi,
    path: str,
    current: Mapping[str, Any],
    previous: Mapping[str, Any] | None,
) -> str | None:
    """How the channel differs from what the last deploy left, or None if it does not (or
    cannot be told: no previous declaration, or one the API would now refuse)."""
    if previous is None:
        return f"made outside this deploy (version {current['version']}, {current['status']})"
    if current["status"] != "active":
        return f"{current['status']} through the API"
    definition = {k: v for k, v in previous.items() if k != "status"}
    try:
        would = api.call("PUT", path, {"dry_run": "true"}, body=definition)["data"]
    except ApiRefusal:
        return None
    if would["version"] != current["version"]:
        return f"written through the API since the last deploy (version {current['version']})"
    return None
