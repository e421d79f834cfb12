"""Events are written by the transaction that makes the change they report, once each, with
each channel's delivered events numbered without gaps; the rows are read back to check."""

from __future__ import annotations

from datetime import timedelta

import pytest
import sqlalchemy as sa

from cronledger.ledger import (
    COMPLETED,
    FAILED,
    SKIPPED_MISFIRE,
    Channel,
    CursorMove,
    Event,
    Ledger,
    SingletonSpec,
)
from cronledger.ledger.models import EventFilter
from cronledger.ledger.tables import channels, events, schedule_state
from cronledger.reconcile import reconcile_once
from cronledger.schedule_cache import ScheduleCache
from cronledger.settings import Settings
from tests.ledger.helpers import (
    LEASE,
    active_channel,
    claim_one,
    expire_claim,
    row,
    settle,
    start_attempt,
    upsert_cursor,
)

ALERTS_OFF_COMPLETED = {"on": ["failed", "abandoned", "overdue", "stalled", "recovered"]}


def all_events(ledger: Ledger, channel_id: str | None = None) -> list[Event]:
    """Every event, oldest first."""
    page = ledger.events.list_events(EventFilter(channel_id=channel_id, limit=1000))
    return list(reversed(page.data))


def kinds(found: list[Event]) -> list[str]:
    return [e.kind for e in found]


def run_once(
    ledger: Ledger, channel: Channel, ok: bool, *, attempts: int = 1, ago: float = 30
) -> str:
    """Materialise one due occurrence of `channel` and take it through one attempt that
    succeeds or fails for good (a single allowed attempt); answers its id."""
    new = row(
        ledger.db_now() - timedelta(seconds=ago),
        channel.channel_id,
        channel_name=channel.name,
        max_attempts=attempts,
    )
    assert ledger.occurrences.insert_occurrence(new)
    claimed = claim_one(ledger, "c")
    assert start_attempt(ledger, claimed, "c", 1, None, LEASE).started
    assert settle(ledger, claimed.id, "c", COMPLETED if ok else FAILED, error_message="boom")
    return claimed.id


def test_an_occurrence_makes_one_attempt_failed_per_retried_attempt_and_one_failed_at_the_end(
    ledger: Ledger,
) -> None:
    # Given an occurrence allowed three attempts
    channel = active_channel(ledger)
    assert ledger.occurrences.insert_occurrence(
        row(ledger.db_now() - timedelta(seconds=5), channel.channel_id, max_attempts=3)
    )
    # When every attempt fails (the first two go back to pending, the third is final)
    for attempt in (1, 2, 3):
        claimed = claim_one(ledger, f"c{attempt}")
        assert claimed.attempt == attempt
        assert start_attempt(ledger, claimed, f"c{attempt}", 1, None, LEASE).started
        retry = 0.0 if attempt < 3 else None
        assert settle(
            ledger, claimed.id, f"c{attempt}", FAILED, error_message=f"e{attempt}", retry_in=retry
        )
    # Then the ledger holds two attempt_failed events and one failed, in that order
    found = all_events(ledger)
    assert kinds(found) == [
        "occurrence.attempt_failed",
        "occurrence.attempt_failed",
        "occurrence.failed",
    ]
    assert [e.document["attempt"] for e in found] == [1, 2, 3]
    assert [e.document["error"] for e in found] == ["e1", "e2", "e3"]
    # only the final failure is delivered by default, and it is the channel's first
    assert [e.sequence for e in found] == [None, None, 1]
    final = found[-1].document
    assert final["occurrence_id"] == claimed.id
    assert final["channel_name"] == "nightly"
    assert final["status"] == "failed"
    assert final["max_attempts"] == 3
    assert final["links"]["api"] == f"/api/v1/admin/cron/occurrences/{claimed.id}"


def test_a_quiet_completion_writes_no_event_and_stays_one_statement_on_postgresql(
    ledger: Ledger,
) -> None:
    # On PostgreSQL the attempt's end is a CTE of the occurrence's UPDATE; SQLite, which has
    # no UPDATE in a CTE, sends the two in one local transaction.
    channel = active_channel(ledger)
    statements: list[str] = []

    def count(conn, cursor, statement, parameters, context, executemany) -> None:  # type: ignore[no-untyped-def]
        statements.append(statement.split()[0].upper())

    new = row(ledger.db_now() - timedelta(seconds=5), channel.channel_id)
    assert ledger.occurrences.insert_occurrence(new)
    claimed = claim_one(ledger, "c")
    assert start_attempt(ledger, claimed, "c", 1, None, LEASE).started
    sa.event.listen(ledger.engine, "before_cursor_execute", count)
    try:
        assert settle(ledger, claimed.id, "c", COMPLETED)
    finally:
        sa.event.remove(ledger.engine, "before_cursor_execute", count)
    assert all_events(ledger) == []
    sent = [s for s in statements if s not in ("BEGIN", "COMMIT")]
    assert sent == (["WITH"] if ledger.engine.dialect.name == "postgresql" else ["UPDATE"] * 2)
    assert ledger.occurrences.get_occurrence(claimed.id).status == COMPLETED
    [attempt] = ledger.occurrences.attempts_of(claimed.id)
    assert (attempt.outcome, attempt.ended_at is not None) == (COMPLETED, True)


def test_a_transaction_that_fails_after_the_change_leaves_neither_the_change_nor_its_event(
    ledger: Ledger,
) -> None:
    # Given an occurrence on its last attempt, and an events table that refuses every row
    channel = active_channel(ledger)
    assert ledger.occurrences.insert_occurrence(
        row(ledger.db_now() - timedelta(seconds=5), channel.channel_id, max_attempts=1)
    )
    claimed = claim_one(ledger, "c")
    assert start_attempt(ledger, claimed, "c", 1, None, LEASE).started
    with ledger.engine.begin() as conn:
        if ledger.engine.dialect.name == "postgresql":
            conn.execute(
                sa.text(
                    "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS "
                    "$$ BEGIN RAISE EXCEPTION 'no events today'; END $$"
                )
            )
            conn.execute(
                sa.text(
                    "CREATE TRIGGER refuse BEFORE INSERT ON cron_events "
                    "FOR EACH ROW EXECUTE FUNCTION refuse()"
                )
            )
        else:
            conn.execute(
                sa.text(
                    "CREATE TRIGGER refuse BEFORE INSERT ON cron_events "
                    "BEGIN SELECT RAISE(ABORT, 'no events today'); END"
                )
            )
    try:
        # When the settle writes its change and then its event fails
        with pytest.raises(sa.exc.DBAPIError, match="no events today"):
            settle(ledger, claimed.id, "c", FAILED, error_message="boom")
    finally:
        with ledger.engine.begin() as conn:
            conn.execute(
                sa.text(
                    "DROP TRIGGER refuse ON cron_events"
                    if ledger.engine.dialect.name == "postgresql"
                    else "DROP TRIGGER refuse"
                )
            )
            if ledger.engine.dialect.name == "postgresql":
                conn.execute(sa.text("DROP FUNCTION refuse()"))
    # Then the occurrence is still running, leased to its attempt, and there is no event
    after = ledger.occurrences.get_occurrence(claimed.id)
    assert after.status == "running"
    assert after.claimed_by == "c"
    assert all_events(ledger) == []
    # and the attempt can still settle it, event and all
    assert settle(ledger, claimed.id, "c", FAILED, error_message="boom")
    assert kinds(all_events(ledger)) == ["occurrence.failed"]


def test_failed_is_delivered_from_the_third_failure_in_a_row_only(ledger: Ledger) -> None:
    channel = active_channel(ledger, alerts={"after_consecutive_failures": 3})
    for n in range(4):
        run_once(ledger, channel, ok=False, ago=30 + n)
    found = all_events(ledger)
    assert kinds(found) == ["occurrence.failed"] * 4
    assert [e.sequence for e in found] == [None, None, 1, 2]
    assert [e.document["consecutive_failures"] for e in found] == [1, 2, 3, 4]


def test_a_success_resets_the_run_of_failures(ledger: Ledger) -> None:
    channel = active_channel(ledger, alerts={"after_consecutive_failures": 2})
    run_once(ledger, channel, ok=False, ago=40)
    run_once(ledger, channel, ok=True, ago=39)
    run_once(ledger, channel, ok=False, ago=38)
    found = all_events(ledger)
    # the success answered no delivered alert, so it records nothing; the run starts again
    assert kinds(found) == ["occurrence.failed", "occurrence.failed"]
    assert [e.sequence for e in found] == [None, None]


def test_recovered_is_written_once_at_the_first_success_after_a_delivered_failure(
    ledger: Ledger,
) -> None:
    channel = active_channel(ledger)
    run_once(ledger, channel, ok=False, ago=40)
    first_ok = run_once(ledger, channel, ok=True, ago=39)
    run_once(ledger, channel, ok=True, ago=38)
    found = all_events(ledger)
    assert kinds(found) == ["occurrence.failed", "channel.recovered"]
    assert [e.sequence for e in found] == [1, 2]
    assert found[1].occurrence_id == first_ok
    assert found[1].document["error"] is None
    assert ledger.events.open_alerts() == {}


def test_completed_is_written_only_when_the_channel_asks_to_be_told(ledger: Ledger) -> None:
    told = active_channel(ledger, "told", alerts={"on": ["completed"]})
    quiet = active_channel(ledger, "quiet")
    run_once(ledger, told, ok=True, ago=40)
    run_once(ledger, quiet, ok=True, ago=39)
    # the executor says whether completions are told (it has the compiled rules)
    new = row(ledger.db_now() - timedelta(seconds=38), told.channel_id, channel_name="told")
    assert ledger.occurrences.insert_occurrence(new)
    claimed = claim_one(ledger, "c")
    assert start_attempt(ledger, claimed, "c", 1, None, LEASE).started
    assert settle(ledger, claimed.id, "c", COMPLETED, completed_is_told=True)
    assert kinds(all_events(ledger, quiet.channel_id)) == []
    found = all_events(ledger, told.channel_id)
    assert kinds(found) == ["occurrence.completed"]
    assert found[0].sequence == 1


def test_an_abandoned_occurrence_makes_one_abandoned_event(ledger: Ledger) -> None:
    channel = active_channel(ledger)
    assert ledger.occurrences.insert_occurrence(
        row(ledger.db_now() - timedelta(seconds=5), channel.channel_id, max_attempts=1)
    )
    claimed = claim_one(ledger, "c")
    assert start_attempt(ledger, claimed, "c", 1, None, LEASE).started
    expire_claim(ledger, claimed.id)
    result = ledger.attempts.claim("d", 10, LEASE)
    assert [o.id for o in result.abandoned] == [claimed.id]
    found = all_events(ledger)
    assert kinds(found) == ["occurrence.abandoned"]
    assert found[0].sequence == 1
    assert "abandoned" in found[0].document["error"]
    assert ledger.events.open_alerts() == {channel.channel_id: "occurrence.abandoned"}


def test_a_cancel_says_who_and_why(ledger: Ledger) -> None:
    channel = active_channel(ledger)
    new = row(ledger.db_now() - timedelta(seconds=5), channel.channel_id)
    assert ledger.occurrences.insert_occurrence(new)
    ledger.occurrences.cancel(new.id, by="arn:aws:iam::1:user/ops", reason="wrong data")
    (event,) = all_events(ledger)
    assert event.kind == "occurrence.cancelled"
    assert event.sequence is None  # not delivered by default
    assert event.document["error"] == "cancelled by arn:aws:iam::1:user/ops: wrong data"


def test_a_pause_and_a_resume_are_events_with_the_reason_delivered_only_when_asked(
    ledger: Ledger,
) -> None:
    # Given one channel with default alerts and one that asks to be told of pauses
    quiet = active_channel(ledger, "quiet")
    told = active_channel(ledger, "told", alerts={"on": ["paused", "resumed"]})

    # When each is paused with a reason, paused again, then resumed
    for channel in (quiet, told):
        ledger.channels.set_channel_status(
            channel.channel_id, "paused", reason="warehouse migration"
        )
        ledger.channels.set_channel_status(channel.channel_id, "paused", reason="still migrating")
        ledger.channels.set_channel_status(channel.channel_id, "active")

    # Then each has one pause (its reason kept) and one resume; only `told` delivers them
    for channel, sequences in ((quiet, [None, None]), (told, [1, 2])):
        found = all_events(ledger, channel.channel_id)
        assert kinds(found) == ["channel.paused", "channel.resumed"]
        assert [e.sequence for e in found] == sequences
        assert found[0].document["reason"] == "warehouse migration"
        assert "reason" not in found[1].document


def test_a_dry_run_pause_records_no_event(ledger: Ledger) -> None:
    channel = active_channel(ledger)

    ledger.channels.set_channel_status(channel.channel_id, "paused", reason="trying", dry_run=True)

    assert all_events(ledger) == []
    assert ledger.channels.get_channel(channel.channel_id).status == "active"


def test_a_misfire_summary_event_carries_its_count_and_range(ledger: Ledger) -> None:
    channel = active_channel(ledger, alerts={"on": ["skipped"]})
    now = ledger.db_now().replace(microsecond=0)
    summary = row(
        now - timedelta(seconds=10),
        channel.channel_id,
        status=SKIPPED_MISFIRE,
        error_message="skipped 7 missed occurrence(s)",
        skipped_count=7,
        skipped_oldest=now - timedelta(seconds=16),
    )
    upsert_cursor(ledger, channel.channel_id, 1, "h", now - timedelta(seconds=20))
    inserted, moved = ledger.occurrences.materialise(
        [summary], [CursorMove(channel.channel_id, now - timedelta(seconds=20), now, "h")]
    )
    assert (inserted, moved) == (1, {channel.channel_id})
    (event,) = all_events(ledger)
    assert event.kind == "occurrence.skipped"
    assert event.document["count"] == 7
    assert event.document["oldest_scheduled_for"] == (now - timedelta(seconds=16)).strftime(
        "%Y-%m-%dT%H:%M:%SZ"
    )
    assert event.sequence == 1
    # a pass that loses the race writes no second summary and no second event
    again = row(summary.scheduled_for, channel.channel_id, status=SKIPPED_MISFIRE, skipped_count=7)
    upsert_cursor(ledger, channel.channel_id, 1, "h", now - timedelta(seconds=20))
    ledger.occurrences.materialise(
        [again], [CursorMove(channel.channel_id, now - timedelta(seconds=20), now, "h")]
    )
    assert len(all_events(ledger)) == 1


def overdue_rows(
    ledger: Ledger, channel: Channel, *, count: int, due_ago: float, limit: int
) -> list[str]:
    rows = [
        row(
            ledger.db_now() - timedelta(seconds=due_ago + i),
            channel.channel_id,
            channel_name=channel.name,
            overdue_after_secs=limit,
        )
        for i in range(count)
    ]
    assert ledger.occurrences.insert_occurrences(rows) == count
    return [r.id for r in rows]


def test_an_instant_stuck_pending_is_reported_overdue_once(ledger: Ledger) -> None:
    channel = active_channel(ledger, alerts={"overdue_after_secs": 10})
    (stuck,) = overdue_rows(ledger, channel, count=1, due_ago=30, limit=10)
    (fresh,) = overdue_rows(ledger, channel, count=1, due_ago=2, limit=10)
    first = ledger.events.detect_overdue()
    second = ledger.events.detect_overdue()
    assert [e.occurrence_id for e in first] == [stuck]
    assert second == []
    (event,) = all_events(ledger)
    assert event.kind == "occurrence.overdue"
    assert event.document["status"] == "pending"
    assert event.sequence == 1
    assert ledger.occurrences.get_occurrence(fresh).overdue_at is not None


def test_a_run_longer_than_the_limit_is_overdue_and_a_completed_one_never(ledger: Ledger) -> None:
    channel = active_channel(ledger, alerts={"overdue_after_secs": 10})
    # a completed instant, even one completed late, is not watched any more
    done = run_once_with_overdue(ledger, channel, ago=40, ok=True)
    running_id = overdue_rows(ledger, channel, count=1, due_ago=30, limit=10)[0]
    claimed = claim_one(ledger, "r")
    assert claimed.id == running_id
    assert start_attempt(ledger, claimed, "r", 1, None, LEASE).started
    found = ledger.events.detect_overdue()
    assert [(e.occurrence_id, e.document["status"]) for e in found] == [(running_id, "running")]
    assert ledger.occurrences.get_occurrence(done).overdue_at is None
    assert ledger.events.detect_overdue() == []


def run_once_with_overdue(ledger: Ledger, channel: Channel, *, ago: float, ok: bool) -> str:
    (occurrence_id,) = overdue_rows(ledger, channel, count=1, due_ago=ago, limit=10)
    claimed = claim_one(ledger, "c")
    assert claimed.id == occurrence_id
    assert start_attempt(ledger, claimed, "c", 1, None, LEASE).started
    assert settle(ledger, claimed.id, "c", COMPLETED if ok else FAILED)
    return occurrence_id


def test_a_cursor_behind_by_more_than_the_limit_is_stalled_once_and_recovers(
    ledger: Ledger,
) -> None:
    channel = active_channel(ledger, alerts={"overdue_after_secs": 60})
    now = ledger.db_now()
    upsert_cursor(ledger, channel.channel_id, 1, "h", now - timedelta(minutes=5))
    (stalled,) = ledger.events.detect_overdue()
    assert stalled.kind == "channel.stalled"
    assert stalled.occurrence_id is None
    assert stalled.sequence == 1
    assert ledger.events.detect_overdue() == []
    assert ledger.events.open_alerts() == {channel.channel_id: "channel.stalled"}
    # the cursor catches up: nothing new is written, and the next completion recovers
    with ledger.engine.begin() as conn:
        conn.execute(
            sa.update(schedule_state)
            .where(schedule_state.c.channel_id == channel.channel_id)
            .values(next_fire_at=now + timedelta(minutes=1))
        )
    assert ledger.events.detect_overdue() == []
    run_once(ledger, channel, ok=True)
    assert kinds(all_events(ledger)) == ["channel.stalled", "channel.recovered"]


def test_a_channel_without_a_limit_is_never_stalled(ledger: Ledger) -> None:
    channel = active_channel(ledger)
    upsert_cursor(ledger, channel.channel_id, 1, "h", ledger.db_now() - timedelta(days=1))
    assert ledger.events.detect_overdue() == []


def test_sequences_stay_gapless_per_channel_across_kinds_and_channels(ledger: Ledger) -> None:
    a = active_channel(ledger, "a")
    b = active_channel(ledger, "b")
    for n in range(3):
        run_once(ledger, a, ok=False, ago=50 + n)
        run_once(ledger, b, ok=n % 2 == 0, ago=40 + n)
    run_once(ledger, a, ok=True, ago=10)
    for channel in (a, b):
        delivered = [e.sequence for e in all_events(ledger, channel.channel_id) if e.deliver]
        assert delivered == list(range(1, len(delivered) + 1))
    assert len(all_events(ledger, a.channel_id)) == 4


def test_the_outbox_leases_events_so_two_sweeps_never_take_one_and_delivery_marks_them(
    ledger: Ledger,
) -> None:
    channel = active_channel(ledger)
    run_once(ledger, channel, ok=False)
    # a fresh event is the maker's to send for a while: the sweep leaves it
    assert ledger.events.take_outbox() == []
    assert ledger.events.outbox().undelivered == 1
    with ledger.engine.begin() as conn:
        conn.execute(sa.update(events).values(send_after=ledger.db_now() - timedelta(seconds=1)))
    taken = ledger.events.take_outbox()
    assert len(taken) == 1
    assert ledger.events.take_outbox() == []  # leased again, with backoff
    assert ledger.events.mark_delivered([taken[0].event_id]) == 1
    assert ledger.events.outbox().undelivered == 0
    assert ledger.events.mark_delivered([taken[0].event_id]) == 0


def test_deleting_a_channel_removes_its_events(ledger: Ledger) -> None:
    channel, other = active_channel(ledger), active_channel(ledger, "other")
    run_once(ledger, channel, ok=False)
    run_once(ledger, other, ok=False)
    ledger.channels.delete_channel(channel.channel_id)
    with ledger.engine.connect() as conn:
        left = conn.execute(sa.select(events.c.channel_id)).scalars().all()
        assert left and set(left) == {other.channel_id}
        assert conn.execute(sa.select(channels.c.channel_id)).scalars().all() == [other.channel_id]
        assert {o.channel_id for o in ledger.occurrences.list_occurrences().data} == {
            other.channel_id
        }


def test_an_instant_waiting_behind_a_held_key_is_overdue_once(ledger: Ledger) -> None:
    # Given a holder running on a key and a queue_one contender waiting for it
    channel = active_channel(ledger, alerts={"overdue_after_secs": 10})
    holder_id, waiter_id = overdue_rows(ledger, channel, count=2, due_ago=30, limit=10)
    spec = SingletonSpec("nightly-key", 1, "queue_one")
    for claimant in ("h", "w"):
        claimed = claim_one(ledger, claimant)
        outcome = start_attempt(ledger, claimed, claimant, 1, spec, LEASE).outcome
        assert outcome == ("started" if claimant == "h" else "waiting")
    # When the overdue watch runs, twice
    first = ledger.events.detect_overdue()
    assert ledger.events.detect_overdue() == []
    # Then each instant is reported once, the waiter as pending behind the key
    status = {e.occurrence_id: e.document["status"] for e in first}
    assert status == {holder_id: "running", waiter_id: "pending"} or status == {
        waiter_id: "running",
        holder_id: "pending",
    }
    assert kinds(all_events(ledger)) == ["occurrence.overdue"] * 2


def test_a_channel_whose_reconcile_keeps_failing_is_reported_stalled(ledger: Ledger) -> None:
    # Given a channel with an overdue limit whose cursor is due, and whose stored schedule no
    # longer compiles (every pass fails for it)
    channel = active_channel(ledger, alerts={"overdue_after_secs": 60})
    settings = Settings()
    reconcile_once(ledger, settings)
    broken = {**channel.transport_config, "schedule": "not a schedule"}
    with ledger.engine.begin() as conn:
        conn.execute(
            sa.update(channels)
            .where(channels.c.channel_id == channel.channel_id)
            .values(transport_config=broken)
        )
        conn.execute(
            sa.update(schedule_state)
            .where(schedule_state.c.channel_id == channel.channel_id)
            .values(next_fire_at=ledger.db_now() - timedelta(minutes=3))
        )
    # When passes fail for it and the watch runs
    report = reconcile_once(ledger, settings, ScheduleCache())
    assert channel.channel_id in report.failed
    found = ledger.events.detect_overdue()
    # Then it is stalled, once
    assert kinds(found) == ["channel.stalled"]
    assert found[0].document["channel_name"] == "nightly"
    reconcile_once(ledger, settings, ScheduleCache())
    assert ledger.events.detect_overdue() == []


def test_retention_deletes_old_events_with_nothing_left_to_send(ledger: Ledger) -> None:
    # Given three month-old events: one waiting for delivery, one delivered, one listed only
    channel = active_channel(ledger)
    run_once(ledger, channel, ok=False, ago=50)
    sent = run_once(ledger, channel, ok=False, ago=40)
    (delivered,) = [e for e in all_events(ledger) if e.occurrence_id == sent]
    assert ledger.events.mark_delivered([delivered.event_id]) == 1
    listed = row(ledger.db_now() - timedelta(seconds=1), channel.channel_id)
    assert ledger.occurrences.insert_occurrence(listed)
    ledger.occurrences.cancel(listed.id, reason="not needed")
    with ledger.engine.begin() as conn:
        conn.execute(sa.update(events).values(at=ledger.db_now() - timedelta(days=40)))
    # When retention runs, then only the one still waiting for its destination stays
    assert ledger.events.delete_events_older_than(24 * 30) == 2
    (left,) = all_events(ledger)
    assert left.kind == "occurrence.failed"
    assert left.delivered_at is None
