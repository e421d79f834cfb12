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
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import quote, urlencode

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver

from cronledger.api import PREFIX, handle_event

CREATED: Final = "created"
UPDATED: Final = "updated"
UNCHANGED: Final = "unchanged"


class DeployRefused(Exception):
    """The declaration cannot be applied; the message says why, every problem with its path."""


class ApiRefusal(Exception):
    def __init__(self, status: int, error: Mapping[str, Any]) -> None:
        self.status = status
        self.details: list[Mapping[str, Any]] = list(error.get("details") or [])
        message = str(error.get("message", "refused"))
        listed = "; ".join(f"{d.get('path')}: {d.get('message')}" for d in self.details)
        self.message = message.removesuffix(f": {listed}")
        super().__init__(f"{self.message}: {listed}" if listed else self.message)


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
        raw_query = urlencode(query or {})
        event = {
            "version": "2.0",
            "routeKey": "$default",
            "rawPath": PREFIX + path,
            "rawQueryString": raw_query,
            "queryStringParameters": dict(query) if query else None,
            "headers": {"content-type": "application/json"} if body is not None else {},
            "body": None if body is None else json.dumps(body),
            "isBase64Encoded": False,
            "requestContext": {
                "http": {"method": method, "path": PREFIX + path, "sourceIp": "127.0.0.1"},
                "requestId": "deploy",
                "routeKey": "$default",
                "stage": "$default",
            },
        }
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
    found = _refused_as_deploy(name, lambda: api.call("GET", "/channels", {"name": name}))["data"]
    if not found:
        body = {**document, "status": "active"}
        channel = _refused_as_deploy(name, lambda: api.call("POST", "/channels", body=body))["data"]
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
    channel = _refused_as_deploy(name, lambda: api.call("PUT", path, body=definition))["data"]
    done = []
    if channel["version"] != current["version"]:
        done.append(f"version {current['version']} → {channel['version']}")
    if current["status"] != "active":
        done.append(f"{current['status']} → active")
    if not done:
        summary = f"{name} unchanged at version {channel['version']}, {channel['status']}"
        return Applied(channel["channel_id"], channel["version"], UNCHANGED, summary)
    said = f"{name}: {', '.join(done)}"
    if changed is not None:
        said += f"; overwrote what was {changed}"
    reason = f"applied by the deploy of {deployer}" + (
        f": it overwrote what was {changed}" if changed else ""
    )
    body = {"status": "active", "reason": reason}
    status = f"{path}/status"
    channel = _refused_as_deploy(name, lambda: api.call("PATCH", status, body=body))["data"]
    return Applied(channel["channel_id"], channel["version"], UPDATED, said)


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


def _refused_as_deploy(name: str, request: Callable[[], Any]) -> Any:
    """The API's answer; its refusal as `DeployRefused`, with every problem and its path."""
    try:
        return request()
    except ApiRefusal as exc:
        raise DeployRefused(f"channel {name}: {exc}") from None
