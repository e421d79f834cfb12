"""A channel's alert rules (`transport_config.alerts`) and what each event does to its alert
state: pure, no database, no clock.

Silence is opted into: without `alerts`, failures, abandoned and overdue instants, a stalled
cursor and the recovery after them are delivered. Every event is recorded; the rules decide
which are delivered, each taking the channel's next `sequence`, so a receiver sees a gap.
`alerts` is not in the scheduling hash: who is told never moves when a channel fires.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Final

from pydantic import BeforeValidator, Field, ValidationError, WithJsonSchema

from cronledger.validation import Document, refused, whole, without_null

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
_KNOWN: Final = ", ".join(KINDS)


def _kinds(value: Any) -> Any:
    if value is not None and not isinstance(value, list):
        raise refused("type_mismatch", f"must be a list of event kinds ({_KNOWN}); [] for none")
    return value


def _kind(value: Any) -> str:
    """An event kind by its short or full name, as its full name."""
    if isinstance(value, str) and (value in KINDS or value in KINDS.values()):
        return KINDS.get(value, value)
    raise refused("invalid", f"{value!r} is not an event kind; use one of {_KNOWN}")


Kind = Annotated[
    str,
    BeforeValidator(_kind),
    WithJsonSchema({"type": "string", "enum": [*KINDS, *KINDS.values()]}),
]


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
    """The state after an event of `kind`, and the events to record, `(kind, deliver)` in
    order. A completion after a delivered alert records `channel.recovered` first; the
    completion itself only if delivered (its row says it already). Failed and abandoned
    count as failures in a row; `occurrence.failed` waits for `after_consecutive_failures`."""
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
    return AlertState(state.sequence + delivered, failures, open_alert), recorded


class Alerts(Document):
    """Which of the channel's events are delivered (every event is listed whatever these say).
    JSON `null` on a key means "not given"."""

    example: ClassVar[str] = '{"on": ["failed", "overdue"], "overdue_after_secs": 3600}'
    null_means_absent: ClassVar[bool] = True

    on: Annotated[list[Kind] | None, BeforeValidator(_kinds)] = Field(
        None,
        description="the kinds to deliver, short or full name; [] delivers none; default: "
        "failed, abandoned, overdue, stalled and recovered",
        json_schema_extra=without_null({"uniqueItems": True}),
    )
    overdue_after_secs: whole(1, MAX_OVERDUE_SECS) | None = Field(  # type: ignore[valid-type]
        None,
        description="an instant not completed this long after its due time is overdue (once), "
        "and a cursor this far behind its schedule is stalled; unset: neither is reported",
        json_schema_extra=without_null(),
    )
    after_consecutive_failures: whole(1, MAX_CONSECUTIVE) | None = Field(  # type: ignore[valid-type]
        None,
        description="deliver `failed` only once this many occurrences failed in a row",
        json_schema_extra=without_null(),
    )

    def rules(self) -> AlertRules:
        return AlertRules(
            on=DEFAULT_ON if self.on is None else frozenset(self.on),
            overdue_after_secs=self.overdue_after_secs,
            after_consecutive_failures=self.after_consecutive_failures or 1,
        )


def rules_of(transport_config: Mapping[str, Any] | None) -> AlertRules:
    """The rules of a stored document; the defaults where it has none or no longer reads as
    valid, so an event is never lost to an odd document."""
    value = (transport_config or {}).get("alerts")
    if value is None:
        return AlertRules()
    try:
        return Alerts.model_validate(value).rules()
    except ValidationError:
        return AlertRules()
