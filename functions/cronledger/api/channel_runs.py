"""Running a channel outside its schedule, and looking ahead: trigger, backfill, preview.

A manual or backfill run is an occurrence inserted if absent on `(channel_id, scheduled_for)`,
so it never doubles an instant. Trigger and backfill need an `active` channel (the executor
would settle any other's run `channel_unavailable`); backfilled rows run one after another
unless `overlap: policy` (whoever backfills wants every instant run). Preview works in any
status, drafts included.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Final

from aws_lambda_powertools.event_handler.openapi.params import Body, Query

from cronledger.api.errors import Router
from cronledger.api.models import (
    PREFIX,
    BackfillResult,
    BackfillWindow,
    ChannelId,
    OccurrenceRecord,
    One,
    Preview,
    PreviewInstant,
    invalid,
)
from cronledger.api.services import serving
from cronledger.api.views import fields_of, occurrence_record, preview_instant, safe_target_ref
from cronledger.cron import Schedule
from cronledger.errors import Conflict, FieldError, NotFound, ValidationFailed
from cronledger.instants import to_rfc3339
from cronledger.ledger import (
    CHANNEL_ACTIVE,
    CHANNEL_ARCHIVED,
    TRIGGER_BACKFILL,
    TRIGGER_MANUAL,
    Channel,
    Ledger,
    NewOccurrence,
)
from cronledger.schedule_cache import SHARED_SCHEDULES

MAX_BACKFILL: Final = 1000
MAX_PREVIEW: Final = 1000


router = Router("channels", f"{PREFIX}/channels")


@router.answers("POST", "/<channel_id>/trigger", 202, "a pending manual occurrence", 400, 409)
def trigger(channel_id: ChannelId) -> One[OccurrenceRecord]:
    """Run an active channel now (a manual occurrence at the database's now)"""
    ledger = serving().ledger
    channel = _active_channel(ledger, channel_id, "triggered")
    (row,) = _occurrences_of(channel, [ledger.db_now()], TRIGGER_MANUAL)
    if not ledger.occurrences.insert_occurrence(row):
        raise Conflict(
            f"channel {channel.name} already has an occurrence at "
            f"{to_rfc3339(row.scheduled_for)}; trigger again"
        )
    return One(data=occurrence_record(ledger.occurrences.get_occurrence(row.id)))


@router.answers(
    "POST",
    "/<channel_id>/backfill",
    202,
    "backfill occurrences written",
    400,
    415,
    summary=f"Run an active channel's past instants in [from, to] (at most {MAX_BACKFILL})",
)
def backfill(
    channel_id: ChannelId,
    body: Annotated[BackfillWindow, Body()],
    dry_run: Annotated[
        bool, Query(description="answer the instants it would write; write nothing")
    ] = False,
) -> One[BackfillResult]:
    ledger = serving().ledger
    channel = _active_channel(ledger, channel_id, "backfilled")
    now = ledger.db_now()
    problems = []
    if body.from_ > body.to:
        problems.append(FieldError("from", "invalid", "from must not be after to"))
    if body.to > now:
        future = (
            f"to is in the future (the database's now is {to_rfc3339(now)}); backfill covers "
            "past instants, use trigger to run now"
        )
        problems.append(FieldError("to", "invalid", future))
    if problems:
        raise ValidationFailed(problems, "invalid backfill window")
    schedule = SHARED_SCHEDULES.get(channel)
    instants = schedule.fires_in(body.from_, body.to, cap=MAX_BACKFILL + 1)
    if len(instants) > MAX_BACKFILL:
        raise invalid(
            "to",
            f"the window holds more than {MAX_BACKFILL} instants of `{schedule.expression}`; "
            f"backfill at most {MAX_BACKFILL} at a time (split the window)",
            "backfill window too large",
        )
    rows = _occurrences_of(
        channel,
        instants,
        TRIGGER_BACKFILL,
        waits_for_key=True if body.overlap == "sequential" else None,
    )
    created = 0 if dry_run else ledger.occurrences.insert_occurrences(rows)
    result = {
        "channel_id": channel.channel_id,
        "from": body.from_,
        "to": body.to,
        "instants": len(instants),
        "created": created,
        "already_present": 0 if dry_run else len(instants) - created,
        "overlap": body.overlap,
        "dry_run": dry_run,
        "planned": instants if dry_run else [],
    }
    return One(data=BackfillResult.model_validate(result))


@router.answers("GET", "/<channel_id>/preview", 200, "the next instants", 400, 404)
def preview(
    channel_id: ChannelId,
    count: Annotated[
        int, Query(ge=1, le=MAX_PREVIEW, description=f"how many, 1..{MAX_PREVIEW}")
    ] = 10,
    from_: Annotated[
        datetime | None,
        Query(
            alias="from",
            description="the instants after this one (RFC 3339 with an offset); default: "
            "the database's now",
        ),
    ] = None,
) -> One[Preview]:
    """The next instants, in UTC and in the channel's local wall time"""
    ledger = serving().ledger
    channel = ledger.channels.get_channel(channel_id)
    schedule = SHARED_SCHEDULES.get(channel)
    if from_ is not None and from_.tzinfo is None:
        raise invalid("from", "give an offset, e.g. 2026-10-25T00:00:00Z")
    instants: list[PreviewInstant] = []
    at: datetime | None = ledger.db_now() if from_ is None else from_
    before: datetime | None = None
    while at is not None and len(instants) < count:
        at = schedule.next_after(at)
        if at is not None:
            instants.append(preview_instant(at, schedule, before))
            before = at
    note = None if at is not None else _why_no_more(schedule)
    shown = {**fields_of(schedule), "schedule": schedule.expression, "ended": not instants}
    return One(data=Preview.model_validate({**shown, "instants": instants, "note": note}))


def _active_channel(ledger: Ledger, channel_id: str, verb: str) -> Channel:
    try:
        channel = ledger.channels.get_channel(channel_id)
    except NotFound:
        message = f"no channel {channel_id}; check the id"
        raise invalid("channel_id", message, f"channel {channel_id} cannot be {verb}") from None
    if channel.status != CHANNEL_ACTIVE:
        # Archived is final: point at what can still be done, never at re-activating it.
        remedy = (
            "archived is final; create a new channel to run this schedule"
            if channel.status == CHANNEL_ARCHIVED
            else 'activate it first (PATCH …/status with {"status": "active"})'
        )
        raise invalid(
            "channel_id",
            f"channel {channel.name} is {channel.status}; only an active channel can be "
            f"{verb}: {remedy}",
            f"channel {channel.name} cannot be {verb}",
        )
    return channel


def _why_no_more(schedule: Schedule) -> str:
    if schedule.at is not None:
        return f"a one-time schedule: its instant ({schedule.at} {schedule.timezone}) has passed"
    if schedule.ends_at is not None:
        return f"no instant is left before ends_at ({to_rfc3339(schedule.ends_at)})"
    return "no instant is left"


def _occurrences_of(
    channel: Channel, instants: list[datetime], trigger: str, waits_for_key: bool | None = None
) -> list[NewOccurrence]:
    """New rows of `channel` at `instants`, run by hand (`manual`) or to fill a gap."""
    ref = safe_target_ref(channel)
    schedule = SHARED_SCHEDULES.get(channel)
    return [
        NewOccurrence.of(
            channel,
            at,
            ref,
            trigger=trigger,
            max_attempts=schedule.retry.max_attempts,
            overdue_after_secs=schedule.alerts.overdue_after_secs,
            waits_for_key=waits_for_key,
        )
        for at in instants
    ]
