"""Ledger values in, response models out: the only place the API formats what it serves.

A listing carries summaries (no result, the error cut short); the full record is read one
occurrence at a time. A stored definition nested deeper than a body may be is served as JSON
text below that depth, so the serializer never fails a whole page on it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import fields
from datetime import datetime
from typing import Any, Final
from zoneinfo import ZoneInfo

from cronledger.api.models import (
    ChannelVersion,
    ChannelView,
    EventView,
    OccurrenceRecord,
    OccurrenceSummary,
    PreviewInstant,
)
from cronledger.api.request_rules import MAX_DEPTH
from cronledger.cron import Schedule
from cronledger.errors import ValidationFailed
from cronledger.ledger import Attempt, Channel, Event, Ledger, Occurrence, ScheduleState
from cronledger.schedule_cache import SHARED_SCHEDULES
from cronledger.targets import target_ref

SUMMARY_ERROR_CHARS: Final = 300
#: The level of `transport_config` and `target` in a channel document.
_DEFINITION_DEPTH: Final = 2
#: What stands for a part of a definition too deep even to write as text.
TOO_DEEP_TO_SHOW: Final = "(nested too deeply to show)"


def compiled(channel: Channel) -> Schedule | None:
    """The channel's schedule, or None when its stored definition no longer compiles (e.g. a
    zone dropped from the tz database): shown as such rather than failing the whole read."""
    try:
        return SHARED_SCHEDULES.get(channel)
    except ValidationFailed:
        return None


def channel_view(channel: Channel, state: ScheduleState | None) -> ChannelView:
    schedule = compiled(channel)
    shown = None
    if schedule is not None:
        shown = {**fields_of(schedule), "schedule": schedule.expression, **cursor(schedule, state)}
    return ChannelView.model_validate(
        {**_definition(channel), "target_ref": safe_target_ref(channel), "compiled": shown}
    )


def channel_version(channel: Channel, current: int) -> ChannelVersion:
    """`channel` at one of its versions (`updated_at` is when that version was written)."""
    return ChannelVersion.model_validate(
        {
            **_definition(channel),
            "current": channel.version == current,
            "created_at": channel.updated_at,
        }
    )


def _definition(channel: Channel) -> dict[str, Any]:
    return {
        **fields_of(channel),
        "transport_config": servable(channel.transport_config),
        "target": servable(channel.target),
    }


def servable(value: Any, depth: int = _DEFINITION_DEPTH) -> Any:
    """A channel's `transport_config` or `target` (at `depth`) as served: see the header."""
    if not isinstance(value, dict | list):
        return value
    if depth > MAX_DEPTH:
        try:
            return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
        except RecursionError:
            return TOO_DEEP_TO_SHOW
    if isinstance(value, dict):
        return {key: servable(item, depth + 1) for key, item in value.items()}
    return [servable(item, depth + 1) for item in value]


def cursors_of(ledger: Ledger, channel_ids: list[str]) -> dict[str, ScheduleState]:
    """The cursors of `channel_ids` by channel (a channel never activated has none)."""
    return {state.channel_id: state for state in ledger.cursors.schedule_states(channel_ids)}


def cursor(schedule: Schedule | None, state: ScheduleState | None) -> dict[str, Any]:
    """`next_fire_at`, `paused_at` and `ended` of a cursor as shown. A paused cursor's value is
    stale (resuming re-initialises it), so it is no "next". Ended: reconcile parked the cursor
    for this very schedule (an edit of the scheduling hash re-initialises it instead)."""
    paused = state is not None and state.paused_at is not None
    return {
        "next_fire_at": None if state is None or paused else state.next_fire_at,
        "paused_at": state.paused_at if state is not None else None,
        "ended": schedule is not None
        and state is not None
        and not paused
        and state.next_fire_at is None
        and state.config_hash == schedule.config_hash,
    }


def safe_target_ref(channel: Channel) -> str | None:
    try:
        return target_ref(channel.target)
    except (KeyError, TypeError, ValueError):
        return None


def occurrence_summary(occurrence: Occurrence) -> OccurrenceSummary:
    row = _occurrence(occurrence)
    error = occurrence.error_message
    if error is not None and len(error) > SUMMARY_ERROR_CHARS:
        row["error_message"] = error[: SUMMARY_ERROR_CHARS - 1] + "…"
    return OccurrenceSummary.model_validate(row)


def occurrence_record(occurrence: Occurrence, attempts: Sequence[Attempt] = ()) -> OccurrenceRecord:
    """The occurrence with `attempts`, its log (only the single-occurrence read fetches it)."""
    attempt_records = [{**fields_of(a), "duration_ms": a.duration_ms} for a in attempts]
    return OccurrenceRecord.model_validate({**_occurrence(occurrence), "attempts": attempt_records})


def _occurrence(o: Occurrence) -> dict[str, Any]:
    """The row's columns with what both occurrence shapes derive from them."""
    return {
        **fields_of(o),
        "max_attempts": o.allowed_attempts,
        "lag_ms": _millis(o.due_at, o.started_at),
        "late_by_ms": _millis(o.scheduled_for, o.started_at),
        "duration_ms": _millis(o.started_at, o.completed_at),
    }


def fields_of(row: Any) -> dict[str, Any]:
    """A ledger dataclass's fields by name, values as they are (no copy)."""
    return {f.name: getattr(row, f.name) for f in fields(row)}


def preview_instant(at: datetime, schedule: Schedule, before: datetime | None) -> PreviewInstant:
    """The instant in UTC and on the zone's wall clock with its offset (on a fall-back day two
    instants differ only in it), its weekday, when its row is due, and the change of offset
    since `before` (the instant shown before it), if any."""
    zone = ZoneInfo(schedule.timezone)
    local = at.astimezone(zone)
    dst = None
    if before is not None:
        was = before.astimezone(zone).isoformat()[-6:]
        if was != local.isoformat()[-6:]:
            dst = f"{was} → {local.isoformat()[-6:]}"
    return PreviewInstant.model_validate(
        {
            "utc": at,
            "local": local.isoformat(),
            "due_at": schedule.due_at(at),
            "weekday": local.strftime("%a"),
            "dst": dst,
        }
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
            "delivered_at": event.delivered_at,
            "send_attempts": event.send_attempts,
            "last_error": event.last_error,
        }
    )
