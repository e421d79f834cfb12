"""What the scheduler is doing: the per-channel status view and `/health`.

Both read only the ledger, with ages on the database's clock, so they tell the truth the
ledger holds whichever node answers. `/health` reaching the database at all is the check:
an unreachable database is a 503 (through the one error mapping), never a cheerful 200.

Decisions the guarantees leave open:
- The status view is a page of the active channels, newest first and by key like every
  other list, filterable by name prefix; "last" is the latest occurrence that has fallen due (rows materialised
  ahead are not a last run).
- `last_reconcile_at` / `last_claim_at` are the last heartbeats the loops recorded, null until
  the first one; an alarm compares them with `db_now`.
"""

from __future__ import annotations

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver

from cronledger.api.errors import BROKEN_RESPONSE, responses
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
from cronledger.api.views import (
    compiled,
    cursor_times,
    cursors_by_channel,
    has_ended,
    timestamp,
)
from cronledger.claim import JOB as CLAIM_JOB
from cronledger.cron import Schedule
from cronledger.instants import to_rfc3339
from cronledger.labels import selector
from cronledger.ledger import CHANNEL_ACTIVE, Channel, ChannelActivity, Ledger, ScheduleState
from cronledger.reconcile import JOB as RECONCILE_JOB


def add_status_routes(app: APIGatewayHttpResolver, ledger: Ledger) -> None:

    @app.get(
        f"{PREFIX}/cron/status",
        summary="Per active channel: cursor, last run, pending count, concurrency",
        tags=["status"],
        responses=responses(200, "a page of active channels"),
        custom_response_validation_http_code=BROKEN_RESPONSE,
    )
    def status(
        label: LabelSelector = None,
        name_prefix: NamePrefix = None,
        limit: Limit = 50,
        offset: Offset = 0,
        after: After = None,
        exact_total: ExactTotal = False,
    ) -> Page[ChannelStatus]:
        page = ledger.channels.list_channels(
            status=CHANNEL_ACTIVE,
            limit=limit,
            offset=offset,
            name_prefix=name_prefix,
            labels=selector(label or []),
            after=after,
            exact_total=exact_total,
        )
        ids = [channel.channel_id for channel in page.data]
        schedules = {channel.channel_id: compiled(channel) for channel in page.data}
        keys = {s.singleton_key for s in schedules.values() if s and s.singleton_key}
        # A fixed handful of reads for the whole page, whatever its size.
        states = cursors_by_channel(ledger.cursors.schedule_states(ids))
        activity = ledger.reporting.channel_activity(ids, keys)
        alerts = ledger.events.open_alerts(ids)
        return Page.of(
            page,
            lambda c: _status(
                c,
                schedules[c.channel_id],
                states.get(c.channel_id),
                activity,
                alerts.get(c.channel_id),
            ),
        )


def add_health_routes(app: APIGatewayHttpResolver, ledger: Ledger) -> None:

    @app.get(
        "/health",
        summary="Database reachability, backlog, the events outbox, and the last successful "
        "reconcile and claim",
        tags=["status"],
        responses=responses(200, "the database answered"),
        custom_response_validation_http_code=BROKEN_RESPONSE,
    )
    def health() -> One[Health]:
        beats = ledger.reporting.job_heartbeats()
        backlog = ledger.reporting.backlog()
        outbox = ledger.events.outbox()
        return One(
            data=Health(
                database="reachable",
                db_now=to_rfc3339(backlog.now),
                oldest_pending_secs=backlog.oldest_pending_age_secs,
                pending=backlog.pending,
                last_reconcile_at=timestamp(beats.get(RECONCILE_JOB)),
                last_claim_at=timestamp(beats.get(CLAIM_JOB)),
                undelivered_events=outbox.undelivered,
                oldest_undelivered_event_secs=outbox.oldest_age_secs,
            )
        )


def _status(
    channel: Channel,
    schedule: Schedule | None,
    state: ScheduleState | None,
    activity: ChannelActivity,
    open_alert: str | None,
) -> ChannelStatus:
    last = activity.latest.get(channel.channel_id)
    key = None if schedule is None else schedule.singleton_key
    next_fire_at, paused_at = cursor_times(state)
    return ChannelStatus(
        channel_id=channel.channel_id,
        name=channel.name,
        version=channel.version,
        labels=channel.labels,
        schedule=None if schedule is None else schedule.expression,
        at=None if schedule is None else schedule.at,
        timezone=None if schedule is None else schedule.timezone,
        next_fire_at=next_fire_at,
        paused_at=paused_at,
        ended=schedule is not None and has_ended(schedule, state),
        last_occurrence_id=None if last is None else last.id,
        last_status=None if last is None else last.status,
        last_scheduled_for=None if last is None else to_rfc3339(last.scheduled_for),
        last_completed_at=None if last is None else timestamp(last.completed_at),
        pending=activity.pending.get(channel.channel_id, 0),
        concurrency_policy=None if schedule is None else schedule.concurrency_policy,
        concurrency_key=None if schedule is None else schedule.concurrency_key,
        slots=None if schedule is None else schedule.slots,
        slots_held=None if key is None else activity.held_slots.get(key, 0),
        open_alert=open_alert,
    )
