"""A one-time `at` already past when it is saved is refused unless `allow_past_at`: such a
channel never runs, so saving it silently would leave an operator waiting. Judged on the
database's clock, and only where the `at` is being set (a fired channel keeps its past `at`).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from cronledger.api.models import invalid
from cronledger.cron import compile_schedule

_PLACEHOLDER_ID = "channel-being-validated"
#: What places the `at` in time: an edit keeping both is not judged again.
_INSTANT = ("at", "timezone")


def past_at_warnings(
    transport_config: Mapping[str, Any],
    now: datetime,
    *,
    allowed: bool,
    before: Mapping[str, Any] | None = None,
) -> list[str]:
    """The warnings to answer for a saved `at` that is past (`allowed`); ValidationFailed at
    `transport_config.at` when it is past and not allowed. `before`: the current version's
    `transport_config`, whose `at` (in the same zone) is not judged again."""
    at = transport_config.get("at")
    kept = before is not None and all(transport_config.get(k) == before.get(k) for k in _INSTANT)
    if at is None or kept:
        return []
    schedule = compile_schedule(transport_config, _PLACEHOLDER_ID, now=now)
    if schedule.next_after(now) is not None:
        return []
    zone = schedule.timezone
    if not allowed:
        raise invalid(
            "transport_config.at",
            f"{at} in {zone} is in the past, so this one-time channel would never run; give a "
            "later date-time, or pass allow_past_at=true (--allow-past) to save it anyway",
        )
    return [f"transport_config.at: {at} in {zone} is in the past; this channel will never run"]
