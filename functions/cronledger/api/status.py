"""What the scheduler is doing: the status of active channels, and `/health`.

Both read only the ledger, ages on the database's clock, so any node tells the same truth; an
unreachable database is a 503 from `/health` (through the one error mapping). "Last" is the
latest occurrence that has fallen due, not a row materialised ahead.
"""

from __future__ import annotations

from cronledger.api.channels import channel_page
from cronledger.api.errors import Router
from cronledger.api.models import (
    PREFIX,
    After,
    ChannelStatus,
    ExactTotal,
    Health,
    LabelSelector,
    Limit,
    NamePrefix,
    Offset,
    One,
    Page,
)
from cronledger.api.services import serving
from cronledger.api.views import compiled, cursor, cursors_of, fields_of
from cronledger.claim import JOB as CLAIM_JOB
from cronledger.cron import Schedule
from cronledger.ledger import CHANNEL_ACTIVE, Channel, ChannelActivity, ScheduleState
from cronledger.reconcile import JOB as RECONCILE_JOB

#: What the status view shows of a schedule: all null when the definition no longer compiles.
_SCHEDULE_KEYS = ("schedule", "at", "timezone", "concurrency_policy", "concurrency_key", "slots")

router = Router("status", "")


@router.answers("GET", f"{PREFIX}/cron/status", 200, "a page of active channels")
def status(
    label: LabelSelector = None,
    name_prefix: NamePrefix = None,
    limit: Limit = 50,
    offset: Offset = 0,
    after: After = None,
    exact_total: ExactTotal = False,
) -> Page[ChannelStatus]:
    """Per active channel: cursor, last run, pending count, concurrency"""
    ledger = serving().ledger
    page = channel_page(CHANNEL_ACTIVE, None, label, name_prefix, limit, offset, after, exact_total)
    ids = [channel.channel_id for channel in page.data]
    schedules = {channel.channel_id: compiled(channel) for channel in page.data}
    keys = {s.singleton_key for s in schedules.values() if s and s.singleton_key}
    # A fixed handful of reads for the whole page, whatever its size.
    states = cursors_of(ledger, ids)
    activity = ledger.reporting.channel_activity(ids, keys)
    alerts = ledger.events.open_alerts(ids)
    return Page.of(page, lambda c: _status(c, schedules[c.channel_id], states, activity, alerts))


@router.answers("GET", "/health", 200, "the database answered")
def health() -> One[Health]:
    """Database reachability, backlog, the events outbox, and the last successful reconcile
    and claim"""
    ledger = serving().ledger
    beats = ledger.reporting.job_heartbeats()
    backlog = ledger.reporting.backlog()
    outbox = ledger.events.outbox()
    health = {
        "database": "reachable",
        "db_now": backlog.now,
        "oldest_pending_secs": backlog.oldest_pending_age_secs,
        "pending": backlog.pending,
        "last_reconcile_at": beats.get(RECONCILE_JOB),
        "last_claim_at": beats.get(CLAIM_JOB),
        "undelivered_events": outbox.undelivered,
        "oldest_undelivered_event_secs": outbox.oldest_age_secs,
    }
    return One(data=Health.model_validate(health))


def _status(
    channel: Channel,
    schedule: Schedule | None,
    states: dict[str, ScheduleState],
    activity: ChannelActivity,
    alerts: dict[str, str],
) -> ChannelStatus:
    last = activity.latest.get(channel.channel_id)
    key = None if schedule is None else schedule.singleton_key
    shown = (
        dict.fromkeys(_SCHEDULE_KEYS)
        if schedule is None
        else {**fields_of(schedule), "schedule": schedule.expression}
    )
    return ChannelStatus.model_validate(
        {
            **shown,
            **fields_of(channel),
            **cursor(schedule, states.get(channel.channel_id)),
            "last_occurrence_id": None if last is None else last.id,
            "last_status": None if last is None else last.status,
            "last_scheduled_for": None if last is None else last.scheduled_for,
            "last_completed_at": None if last is None else last.completed_at,
            "pending": activity.pending.get(channel.channel_id, 0),
            "slots_held": None if key is None else activity.held_slots.get(key, 0),
            "open_alert": alerts.get(channel.channel_id),
        }
    )
