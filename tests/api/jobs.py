"""Callables for channels' `python` targets in the API tests (`tests.api.jobs:ok`, …)."""

from __future__ import annotations

from typing import Any


def ok(envelope: dict[str, Any]) -> dict[str, Any]:
    return {"ran": envelope["trigger"]["occurrence_id"], "attempt": envelope["trigger"]["attempt"]}


def fail(envelope: dict[str, Any]) -> None:
    raise RuntimeError(f"report for {envelope['trigger']['scheduled_for']} failed")
