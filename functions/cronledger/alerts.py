"""A channel's alert rules (`transport_config.alerts`) and what each event does to its alert
state: pure, no database, no clock.

Silence is opted into, never the default: without `alerts`, a channel's failures, abandoned
and overdue instants, a stalled cursor and the recovery after them are delivered. Every event
is recorded whatever the rules say; the rules decide only which are delivered, and a
delivered event takes the channel's next `sequence` number, so a receiver sees a gap when
one is missing. `alerts` is not in the scheduling hash: who is told never moves when a
channel fires.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Final

from cronledger.errors import FieldError, refuse_unknown_keys

FAILED: Final = "occurrence.failed"
ATTEMPT_FAILED: Final = "occurrence.attempt_failed"
ABANDONED: Final = "occurrence.abandoned"
SKIPPED: Final = "occurrence.skipped"
CANCELLED: Final = "occurrence.cancelled"
OVERDUE: Final = "occurrence.overdue"
COMPLETED: Final = "occurrence.completed"
RECOVERED: Final = "channel.recovered"
STALLED: Final = "channel.stalled"
PAUSED: Final = "channel.paused"
RESUMED: Final = "channel.resumed"

#: Every kind, by its short name (the one `alerts.on` is written with).
KINDS: Final = {
    kind.split(".", 1)[1]: kind
    for kind in (
        FAILED,
        ATTEMPT_FAILED,
        ABANDONED,
        SKIPPED,
        CANCELLED,
        OVERDUE,
        COMPLETED,
        RECOVERED,
        STALLED,
        PAUSED,
        RESUMED,
    )
}
DEFAULT_ON: Final = frozenset((FAILED, ABANDONED, OVERDUE, STALLED, RECOVERED))
#: Kinds whose delivery opens an alert that the next completed occurrence answers.
ALERTING: Final = frozenset((FAILED, ABANDONED, OVERDUE, STALLED))
MAX_OVERDUE_SECS: Final = 7 * 86_400
MAX_CONSECUTIVE: Final = 100
_KEYS: Final = ("on", "overdue_after_secs", "after_consecutive_failures")
_PATH: Final = "transport_config.alerts"


@dataclass(frozen=True, slots=True)
class AlertRules:
    on: frozenset[str] = DEFAULT_ON
    overdue_after_secs: int | None = None
    after_consecutive_failures: int = 1


@dataclass(frozen=True, slots=True)
class AlertState:
    """A channel's row of `cron_channel_alerts`."""

    sequence: int = 0
    consecutive_failures: int = 0
    open_alert: str | None = None


def advance(
    state: AlertState, rules: AlertRules, kind: str
) -> tuple[AlertState, list[tuple[str, bool]]]:
    """The state after an event of `kind`, and the events to record: `(kind, deliver)` in
    order. A completed occurrence after a delivered alert also records `channel.recovered`
    (first); `occurrence.completed` is recorded only when it is to be delivered, since the
    occurrence's row already says it completed. Failed and abandoned occurrences count as
    failures in a row; `after_consecutive_failures` holds back `occurrence.failed` until the
    run is that long."""
    recorded: list[tuple[str, bool]] = []
    failures, open_alert = state.consecutive_failures, state.open_alert
    if kind == COMPLETED:
        if open_alert is not None:
            recorded.append((RECOVERED, RECOVERED in rules.on))
        if COMPLETED in rules.on:
            recorded.append((COMPLETED, True))
        failures, open_alert = 0, None
    else:
        if kind in (FAILED, ABANDONED):
            failures += 1
        deliver = kind in rules.on
        if kind == FAILED:
            deliver = deliver and failures >= rules.after_consecutive_failures
        recorded.append((kind, deliver))
        if deliver and kind in ALERTING:
            open_alert = kind
    delivered = sum(1 for _, deliver in recorded if deliver)
    after = replace(
        state,
        sequence=state.sequence + delivered,
        consecutive_failures=failures,
        open_alert=open_alert,
    )
    return after, recorded


def alert_rules(value: Any, errors: list[FieldError]) -> AlertRules | None:
    """Validate `transport_config.alerts`, appending every problem with its path."""
    if value is None:
        return AlertRules()
    if not isinstance(value, Mapping):
        errors.append(
            FieldError(
                _PATH,
                "type_mismatch",
                'must be an object, e.g. {"on": ["failed", "overdue"], "overdue_after_secs": 3600}',
            )
        )
        return None
    found = len(errors)
    refuse_unknown_keys(value, _KEYS, _PATH, errors)
    on = _kinds(value.get("on"), errors)
    overdue = _count(
        value.get("overdue_after_secs"), "overdue_after_secs", MAX_OVERDUE_SECS, errors
    )
    after = _count(
        value.get("after_consecutive_failures"),
        "after_consecutive_failures",
        MAX_CONSECUTIVE,
        errors,
    )
    if len(errors) > found:
        return None
    return AlertRules(
        on=DEFAULT_ON if on is None else on,
        overdue_after_secs=overdue,
        after_consecutive_failures=after or 1,
    )


def rules_of(transport_config: Mapping[str, Any] | None) -> AlertRules:
    """The rules of a stored (validated) document; the defaults where it has none or
    where it no longer reads as valid, so an event is never lost to an odd document."""
    value = (transport_config or {}).get("alerts")
    errors: list[FieldError] = []
    rules = alert_rules(value, errors)
    return rules if rules is not None else AlertRules()


def _kinds(value: Any, errors: list[FieldError]) -> frozenset[str] | None:
    path = f"{_PATH}.on"
    known = ", ".join(KINDS)
    if value is None:
        return None
    if not isinstance(value, list):
        errors.append(
            FieldError(
                path, "type_mismatch", f"must be a list of event kinds ({known}); [] for none"
            )
        )
        return None
    kinds: set[str] = set()
    for i, item in enumerate(value):
        kind = KINDS.get(item) if isinstance(item, str) else None
        if kind is None and isinstance(item, str) and item in KINDS.values():
            kind = item
        if kind is None:
            errors.append(
                FieldError(
                    f"{path}[{i}]", "invalid", f"{item!r} is not an event kind; use one of {known}"
                )
            )
            continue
        kinds.add(kind)
    return frozenset(kinds)


def _count(value: Any, key: str, high: int, errors: list[FieldError]) -> int | None:
    path = f"{_PATH}.{key}"
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        errors.append(FieldError(path, "type_mismatch", f"must be an integer 1..{high}"))
        return None
    if not 1 <= value <= high:
        errors.append(FieldError(path, "invalid", f"must be 1..{high}, got {value}"))
        return None
    return value
