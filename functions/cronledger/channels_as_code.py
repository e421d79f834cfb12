"""Channels declared in code, applied at deploy through the API resolver in this process, so a
deploy validates, compares and writes exactly as `channels apply` does.

The declaration wins: a channel changed through the API since the last deploy (or made by
another) is overwritten, and that is said in the result and the channel's status reason. An
archived channel is final, so declaring its name is refused. Removing a declaration archives
(or purges) the channel; one already gone is no error.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal
from urllib.request import Request

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver

from cronledger.api import handle_event
from cronledger.api_client import PREFIX, ApiClient, ApiError, segment
from cronledger.local_gateway import http_answer, v2_event


class DeployRefused(Exception):
    """The declaration cannot be applied; the message says why, every problem with its path."""


class InProcessApi(ApiClient):
    """Requests to the API resolver in this process, as API Gateway would deliver them; a
    path is the admin API's (`/channels`)."""

    def __init__(self, app: APIGatewayHttpResolver) -> None:
        def send(request: Request, timeout: float) -> tuple[int, dict[str, str], bytes]:
            body = request.data if isinstance(request.data, bytes) else b""  # ApiClient's JSON
            headers = dict(request.header_items())
            event = v2_event(request.get_method(), request.selector, headers, body)
            return http_answer(handle_event(app, event))

        super().__init__(f"http://in-process{PREFIX}", send=send)


def _said(exc: ApiError) -> str:
    """The API's message with each problem's path, on one line."""
    return f"{exc.message}: {exc.listed}" if exc.listed else exc.message


@dataclass(frozen=True)
class Applied:
    channel_id: str
    version: int
    outcome: Literal["created", "updated", "unchanged"]
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
            return Applied(channel["channel_id"], channel["version"], "created", summary)
        current = found[0]
        if current["status"] == "archived":
            raise DeployRefused(
                f"channel {name} is archived, which is final: declare the channel under another "
                f"name, or delete the archived one first (`cronledger channels delete {name}`)"
            )
        path = f"/channels/{segment(current['channel_id'])}"
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
            return Applied(channel["channel_id"], channel["version"], "unchanged", summary)
        overwrote = f"overwrote what was {changed}"
        said = f"{name}: {', '.join(done)}" + (f"; {overwrote}" if changed else "")
        reason = f"applied by the deploy of {deployer}" + (f": it {overwrote}" if changed else "")
        body = {"status": "active", "reason": reason}
        channel = api.call("PATCH", f"{path}/status", body=body)["data"]
        return Applied(channel["channel_id"], channel["version"], "updated", said)
    except ApiError as exc:
        raise DeployRefused(f"channel {name}: {_said(exc)}") from None


def remove_declared(api: InProcessApi, channel_id: str, purge: bool, deployer: str) -> str:
    """Archive (or purge) the channel a declaration made; what was done, as a sentence."""
    path = f"/channels/{segment(channel_id)}"
    try:
        if purge:
            api.call("DELETE", path)
            return f"purged channel {channel_id}"
        reason = f"removed from the deploy of {deployer}"
        api.call("PATCH", f"{path}/status", body={"status": "archived", "reason": reason})
        return f"archived channel {channel_id}"
    except ApiError as exc:
        if exc.status == 404:
            return f"channel {channel_id} was already gone"
        raise DeployRefused(f"channel {channel_id}: {_said(exc)}") from None


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
    except ApiError:
        return None
    if would["version"] != current["version"]:
        return f"written through the API since the last deploy (version {current['version']})"
    return None
