"""The demo channel's target (`cronledger dev --demo`): a Python callable that answers with
what it was given, so the console and the ledger show a real envelope going through."""

from __future__ import annotations

from typing import Any


def hello(event: dict[str, Any]) -> dict[str, Any]:
    trigger = event["trigger"]
    return {
        "greeting": event["payload"].get("greeting", "hello"),
        "occurrence_id": trigger["occurrence_id"],
        "scheduled_for": trigger["scheduled_for"],
        "attempt": trigger["attempt"],
    }
