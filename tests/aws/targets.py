"""Python-target callables for the handler tests: each records the envelope it received."""

from __future__ import annotations

from typing import Any

received: list[dict[str, Any]] = []


def record(event: dict[str, Any]) -> dict[str, Any]:
    received.append(event)
    return {"filed": event["trigger"]["occurrence_id"]}


def fail(event: dict[str, Any]) -> None:
    received.append(event)
    raise RuntimeError("the ledger printer is jammed")
