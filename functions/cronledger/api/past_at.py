"""A one-time `at` already in the past is refused when it is saved, unless asked for.

Such a channel is valid, but it never runs: the instant is behind the cursor before the first
pass, so saving it silently would leave an operator waiting for a run that cannot come. The
check is against the database's clock, like every other instant. Only an `at` being set is
judged: a channel that fired keeps its past `at`, and editing its payload must still work.
`allow_past_at` saves it anyway and answers a warning that says it will never run (a record
of a run that happened elsewhere, a channel kept as a template).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from cronledger.cron import compile_schedule
from cronledger.errors import FieldError, ValidationFailed

_PLACEHOLDER_ID = "channel-being-validated"


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
    if at is None or _same_instant(transport_config, before):
        return []
    schedule = compile_schedule(transport_config, _PLACEHOLDER_ID, now=now)
    if schedule.next_after(now) is not None:
        return []
    zone = schedule.timezone
    if not allowed:
        raise ValidationFailed(
            [
                FieldError(
                    "transport_config.at",
                    "invalid",
                    f"{at} in {zone} is in the past, so this one-time channel would never run; "
                    "give a later date-time, or pass allow_past_at=true (--allow-past) to save "
                    "it anyway",
                )
            ]
        )
    return [f"transport_config.at: {at} in {zone} is in the past; this channel will never run"]


def _same_instant(config: Mapping[str, Any], before: Mapping[str, Any] | None) -> bool:
    if before is None:
        return False
    keys = ("at", "timezone")
    return all(config.get(k) == before.get(k) for k in keys)
