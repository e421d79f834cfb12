"""Callables for channels' `python` targets in the API tests (`tests.api.jobs:ok`, …)."""

from __future__ import annotations

from typing import Any


def ok(envelope: dict[str, Any]) -> dict[str, Any]:
    return {"ran": envelope["trigger"]["occurrence_id"], "attempt": envelope["trigger"]["attempt"]}


def fail(envelope: dict[str, Any]) -> None:
    raise RuntimeError(f"report for {envelope['trigger']['scheduled_for']} failed")


def fail_first(envelope: dict[str, Any]) -> dict[str, Any]:
    """Fails its first attempt and succeeds on a retry."""
    if envelope["trigger"]["attempt"] == 1:
        raise RuntimeError("first attempt fails; a retry succeeds")
    return ok(envelope)


def sometimes(envelope: dict[str, Any]) -> dict[str, Any]:
    """Fails one instant in five (by its minute), as a flaky job does."""
    if int(envelope["trigger"]["scheduled_for"][14:16]) % 5 == 0:
        raise RuntimeError("upstream answered 503 Service Unavailable")
    return ok(envelope)
