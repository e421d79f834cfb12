"""Ledger values in, response models out: the only place the API formats what it serves.

Every instant leaves as RFC 3339 UTC with a `Z`. A listing carries summaries (no result
excerpt, the error cut short) so a page of a thousand stays small; the full record, lease and
fencing detail included, is served one occurrence at a time.

A channel's definition is served as stored, except an object or array nested deeper than a
body may be (`request_rules.MAX_DEPTH`, counting the channel document as the first level),
which only a channel written before bodies were limited can hold: it is served as its JSON
text. The serializer behind every answer refuses to go much deeper, and one such channel
would otherwise make every page that lists it fail.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, Final
from zoneinfo import ZoneInfo

from cronledger.api.models import (
    AttemptRecord,
    ChannelVersion,
    ChannelView,
    CompiledView,
    EventView,
    OccurrenceRecord,
    OccurrenceSummary,
    PreviewInstant,
)
from cronledger.api.request_rules import MAX_DEPTH, too_deep
from cronledger.cron import Schedule
from cronledger.errors import ValidationFailed
from cronledger.instants import to_rfc3339
from cronledger.ledger import Attempt, Channel, Event, Occurrence, ScheduleState
from cronledger.schedule_cache import SHARED_SCHEDULES
from cronledger.targets import target_ref

SUMMARY_ERROR_CHARS: Final = 300
#: The level of `transport_config` and `target` in a channel document.
_DEFINITION_DEPTH: Final = 2
#: What stands for a part of a definition too deep even to write as text.
TOO_DEEP_TO_SHOW: Final = "(nested too deeply to show)"


def timestamp(value: datetime | None) -> str | None:
    return None if value is None else to_rfc3339(value)


def compiled(channel: Channel) -> Schedule | None:
    """The channel's schedule, or None when its stored definition no longer compiles (e.g. a
    zone dropped from the tz database): shown as such rather than failing the whole read."""
    try:
        return SHARED_SCHEDULES.get(channel)
    except ValidationFailed:
        return None


def channel_view(channel: Channel, state: ScheduleState | None) -> ChannelView:
    schedule = compiled(channel)
    return ChannelView(
        channel_id=channel.channel_id,
        name=channel.name,
        status=channel.status,
        version=channel.version,
        labels=channel.labels,
        transport_config=servable(channel.transport_config),
        target=servable(channel.target),
        target_ref=safe_target_ref(channel),
        timeout_ms=channel.timeout_ms,
        created_at=to_rfc3339(channel.created_at),
        updated_at=to_rfc3339(channel.updated_at),
        compiled=None if schedule is None else _compiled_view(schedule, state),
        status_reason=channel.status_reason,
    )


def channel_version(channel: Channel, current: int) -> ChannelVersion:
    """`channel` at one of its versions (`updated_at` is when that version was written)."""
    return ChannelVersion(
        channel_id=channel.channel_id,
        name=channel.name,
        version=channel.version,
        current=channel.version == current,
        labels=channel.labels,
        transport_config=servable(channel.transport_config),
        target=servable(channel.target),
        timeout_ms=channel.timeout_ms,
        created_at=to_rfc3339(channel.updated_at),
    )


def servable(definition: dict[str, Any]) -> dict[str, Any]:
    """A channel's `transport_config` or `target` as served (see the module header): itself,
    unless it nests deeper than a body may."""
    if too_deep(definition, MAX_DEPTH - _DEFINITION_DEPTH + 1) is None:
        return definition
    served: dict[str, Any] = _cut(definition, _DEFINITION_DEPTH)
    return served


def _cut(value: Any, depth: int) -> Any:
    if not isinstance(value, dict | list):
        return value
    if depth > MAX_DEPTH:
        try:
            return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
        except RecursionError:
            return TOO_DEEP_TO_SHOW
    if isinstance(value, dict):
        return {key: _cut(item, depth + 1) for key, item in value.items()}
    return [_cut(item, depth + 1) for item in value]


def cursors_by_channel(states: Iterable[ScheduleState]) -> dict[str, ScheduleState]:
    return {state.channel_id: state for state in states}


def has_ended(schedule: Schedule, state: ScheduleState | None) -> bool:
    """The channel has no instant left: reconcile parked its cursor for this very schedule
    (an edit that changes the scheduling hash, such as a later `ends_at`, is not ended: the
    next pass re-initialises the cursor from it)."""
    return (
        state is not None
        and state.paused_at is None
        and state.next_fire_at is None
        and state.config_hash == schedule.config_hash
    )


def cursor_times(state: ScheduleState | None) -> tuple[str | None, str | None]:
    """(next_fire_at, paused_at) of a cursor as shown. A paused cursor is re-initialised on
    resume, so its stale value is no "next" anything, even while its channel is active
    again and the next pass has not yet re-initialised it."""
    if state is None:
        return None, None
    if state.paused_at is not None:
        return None, timestamp(state.paused_at)
    return timestamp(state.next_fire_at), None


def _compiled_view(schedule: Schedule, state: ScheduleState | None) -> CompiledView:
    next_fire_at, paused_at = cursor_times(state)
    return CompiledView(
        schedule=schedule.expression,
        at=schedule.at,
        timezone=schedule.timezone,
        starts_at=timestamp(schedule.starts_at),
        ends_at=timestamp(schedule.ends_at),
        jitter_secs=schedule.jitter_secs,
        misfire_policy=schedule.misfire_policy,
        max_catch_up=schedule.max_catch_up,
        concurrency_policy=schedule.concurrency_policy,
        concurrency_key=schedule.concurrency_key,
        slots=schedule.slots,
        next_fire_at=next_fire_at,
        paused_at=paused_at,
        ended=has_ended(schedule, state),
    )


def safe_target_ref(channel: Channel) -> str | None:
    try:
        return target_ref(channel.target)
    except (KeyError, TypeError, ValueError):
        return None


def occurrence_summary(occurrence: Occurrence) -> OccurrenceSummary:
    error = occurrence.error_message
    if error is not None and len(error) > SUMMARY_ERROR_CHARS:
        error = error[: SUMMARY_ERROR_CHARS - 1] + "…"
    return OccurrenceSummary(
        id=occurrence.id,
        channel_id=occurrence.channel_id,
        channel_name=occurrence.channel_name,
        trigger=occurrence.trigger,
        scheduled_for=to_rfc3339(occurrence.scheduled_for),
        due_at=to_rfc3339(occurrence.due_at),
        status=occurrence.status,
        attempt=occurrence.attempt,
        max_attempts=occurrence.allowed_attempts,
        started_at=timestamp(occurrence.started_at),
        completed_at=timestamp(occurrence.completed_at),
        lag_ms=_millis(occurrence.due_at, occurrence.started_at),
        late_by_ms=_millis(occurrence.scheduled_for, occurrence.started_at),
        duration_ms=_millis(occurrence.started_at, occurrence.completed_at),
        error_message=error,
    )


def occurrence_record(occurrence: Occurrence, attempts: Sequence[Attempt] = ()) -> OccurrenceRecord:
    """The occurrence with `attempts`, its log (only the single-occurrence read fetches it)."""
    return OccurrenceRecord(
        attempts=[attempt_record(a) for a in attempts],
        id=occurrence.id,
        channel_id=occurrence.channel_id,
        channel_name=occurrence.channel_name,
        channel_version=occurrence.channel_version,
        executing_version=occurrence.executing_version,
        target_ref=occurrence.target_ref,
        trigger=occurrence.trigger,
        scheduled_for=to_rfc3339(occurrence.scheduled_for),
        due_at=to_rfc3339(occurrence.due_at),
        status=occurrence.status,
        attempt=occurrence.attempt,
        max_attempts=occurrence.allowed_attempts,
        claimed_by=occurrence.claimed_by,
        claimed_until=timestamp(occurrence.claimed_until),
        singleton_key=occurrence.singleton_key,
        singleton_slot=occurrence.singleton_slot,
        fencing_token=occurrence.fencing_token,
        trace_id=occurrence.trace_id,
        error_message=occurrence.error_message,
        result=occurrence.result,
        started_at=timestamp(occurrence.started_at),
        completed_at=timestamp(occurrence.completed_at),
        created_at=to_rfc3339(occurrence.created_at),
        updated_at=to_rfc3339(occurrence.updated_at),
        lag_ms=_millis(occurrence.due_at, occurrence.started_at),
        late_by_ms=_millis(occurrence.scheduled_for, occurrence.started_at),
        duration_ms=_millis(occurrence.started_at, occurrence.completed_at),
    )


def attempt_record(attempt: Attempt) -> AttemptRecord:
    return AttemptRecord(
        number=attempt.number,
        claimant=attempt.claimant,
        started_at=to_rfc3339(attempt.started_at),
        ended_at=timestamp(attempt.ended_at),
        outcome=attempt.outcome,
        error_message=attempt.error_message,
        error_detail=attempt.error_detail,
        duration_ms=attempt.duration_ms,
        fencing_token=attempt.fencing_token,
    )


def preview_instant(
    at: datetime, schedule: Schedule, before: datetime | None = None
) -> PreviewInstant:
    """The instant in UTC and as the wall clock in the schedule's zone shows it, offset
    included (on a fall-back day two instants share a wall time and differ only in the
    offset), its local weekday, when its row is due, and, when the zone's offset differs
    from the one at `before` (the instant shown before it), that change."""
    zone = ZoneInfo(schedule.timezone)
    local = at.astimezone(zone)
    dst = None
    if before is not None:
        was = before.astimezone(zone).isoformat()[-6:]
        if was != local.isoformat()[-6:]:
            dst = f"{was} → {local.isoformat()[-6:]}"
    return PreviewInstant(
        utc=to_rfc3339(at),
        local=local.isoformat(),
        due_at=to_rfc3339(schedule.due_at(at)),
        weekday=local.strftime("%a"),
        dst=dst,
    )


def _millis(start: datetime | None, end: datetime | None) -> int | None:
    if start is None or end is None:
        return None
    return round((end - start).total_seconds() * 1000)


def event_view(event: Event) -> EventView:
    """The event's document as delivered, and where its delivery stands: a receiver and an
    operator read the same words."""
    return EventView.model_validate(
        {
            **event.document,
            "deliver": event.deliver,
            "delivered_at": timestamp(event.delivered_at),
            "send_attempts": event.send_attempts,
            "last_error": event.last_error,
        }
    )
