"""A module that declares its channels beside the functions they run."""

from __future__ import annotations

from typing import Any

import cronledger


@cronledger.schedule(
    "0 15 2 * * *", timezone="Europe/London", name="nightly-report", labels={"team": "bi"}
)
def report(envelope: Any) -> str:
    return "reported"


@cronledger.schedule("0 */15 * * * *", retry={"max_attempts": 2})
def refresh(envelope: Any) -> None:
    return None
