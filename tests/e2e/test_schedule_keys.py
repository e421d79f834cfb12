"""One-time schedules, bounds and jitter through the whole scheduler (reconcile, claim,
execute), on PostgreSQL and SQLite.

As in `test_scheduler`, past instants are reached by writing the cursor where an earlier pass
would have left it, never by waiting; only the jitter test waits, for its rows to fall due.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from cronledger.cron import compile_schedule
from cronledger.instants import to_rfc3339
from cronledger.ledger import CHANNEL_ACTIVE, COMPLETED, Channel, Ledger, OccurrenceFilter
from cronledger.ledger.tables import schedule_state
from cronledger.local import LocalScheduler
from cronledger.reconcile import reconcile_once
from tests.e2e import targets
from tests.e2e.test_scheduler import FAST, rows, run_until_settled
from tests.polling import wait_until

RECORD = {"type": "python", "callable": "tests.e2e.targets:record"}
#: Long enough a grace that rows written into the recent past are late, not misfired.
PATIENT = FAST.replace(misfire_grace_secs=600)


@pytest.fixture(autouse=True)
def _fresh_targets() -> Iterator[None]:
    targets.reset()
    yield
    targets.release.set()


def channel(ledger: Ledger, name: str = "job", **transport_config: Any) -> Channel:
    return ledger.channels.create_channel(
        name=name,
        transport_config=transport_config,
        target=RECORD,
        timeout_ms=20_000,
        status=CHANNEL_ACTIVE,
    )


def set_cursor(ledger: Ledger, at: datetime, channel_id: str | None = None) -> None:
    """Put the cursor(s) where a pass that last ran before `at` would have left them."""
    update = sa.update(schedule_state).values(next_fire_at=at, paused_at=None)
    if channel_id is not None:
        update = update.where(schedule_state.c.channel_id == channel_id)
    with ledger.engine.begin() as conn:
        conn.execute(update)


def cursor(ledger: Ledger, channel_id: str) -> datetime | None:
    (state,) = ledger.cursors.schedule_states([channel_id])
    return state.next_fire_at


def whole_second(at: datetime) -> datetime:
    return at.replace(microsecond=0)


def test_a_one_time_schedule_fires_exactly_once_through_the_scheduler(ledger: Ledger) -> None:
    # Given a channel due once, three seconds from now
    at = whole_second(ledger.db_now()) + timedelta(seconds=3)
    job = channel(ledger, at=at.strftime("%Y-%m-%dT%H:%M:%S"), timezone="UTC")
    scheduler = LocalScheduler(ledger, FAST)
    scheduler.start()
    try:
        # When the scheduler runs past it, for a dozen more reconcile passes
        wait_until(lambda: [o.status for o in rows(ledger, job.channel_id)] == [COMPLETED])
        passes = ledger.db_now() + timedelta(seconds=1.2)
        wait_until(lambda: ledger.db_now() > passes)
    finally:
        scheduler.shutdown(drain_secs=5)

    # Then it ran once, at its instant, and the channel has no next fire
    (row,) = rows(ledger, job.channel_id)
    assert (row.scheduled_for, row.status, row.attempt) == (at, COMPLETED, 1)
    (event,) = targets.received[row.id]
    assert event["trigger"]["scheduled_for"] == at.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert row.started_at is not None and row.started_at >= at
    assert cursor(ledger, job.channel_id) is None, "parked: nothing left to fire"


def test_a_one_time_schedule_at_a_repeated_time_fires_once_at_its_first_instant(
    ledger: Ledger,
) -> None:
    # Given 01:30 on New York's fall-back night (05:30Z in EDT, again at 06:30Z in EST), a
    # channel written before it, and a scheduler that was down through both
    job = channel(ledger, at="2025-11-02T01:30:00", timezone="America/New_York")
    reconcile_once(ledger, FAST)
    assert cursor(ledger, job.channel_id) is None, "created after its instant: nothing to fire"
    set_cursor(ledger, datetime(2025, 11, 2, 5, 30, tzinfo=UTC), job.channel_id)

    # When passes run (latest: the one missed instant still runs) and the row is claimed
    for _ in range(3):
        reconcile_once(ledger, FAST)
    run_until_settled(ledger)

    # Then exactly one occurrence ran, at the first 01:30
    (row,) = rows(ledger, job.channel_id)
    assert (row.scheduled_for, row.status) == (datetime(2025, 11, 2, 5, 30, tzinfo=UTC), COMPLETED)
    assert cursor(ledger, job.channel_id) is None


def test_a_one_time_schedule_at_a_time_the_clocks_skip_never_fires(ledger: Ledger) -> None:
    # Given a channel whose `at` falls in London's spring-forward gap, stored as a tz database
    # update could leave one (the API refuses it when written: tests/api), beside one due soon
    gap = channel(ledger, "gap", at="2027-03-28T01:30:00", timezone="Europe/London")
    at = whole_second(ledger.db_now()) + timedelta(seconds=2)
    other = channel(ledger, "other", at=at.strftime("%Y-%m-%dT%H:%M:%S"), timezone="UTC")

    # When the scheduler runs until the other has fired
    scheduler = LocalScheduler(ledger, FAST)
    scheduler.start()
    try:
        wait_until(lambda: [o.status for o in rows(ledger, other.channel_id)] == [COMPLETED])
    finally:
        scheduler.shutdown(drain_secs=5)

    # Then the gap time is neither fired nor moved to a time that exists: the channel has no
    # row and no cursor, and every pass says why, without stopping the others
    assert rows(ledger, gap.channel_id) == []
    assert [s.channel_id for s in ledger.cursors.schedule_states()] == [other.channel_id]
    report = reconcile_once(ledger, FAST)
    assert "2027-03-28T01:30:00 does not exist in Europe/London" in report.failed[gap.channel_id]


def test_bounds_hold_to_the_second_and_a_later_end_resumes_the_channel(ledger: Ledger) -> None:
    # Given a per-second channel bounded to five seconds in the recent past, and a cursor left
    # ten seconds before its start by a scheduler that was down
    start = whole_second(ledger.db_now()) - timedelta(seconds=60)
    end = start + timedelta(seconds=4)
    job = channel(
        ledger,
        schedule="* * * * * *",
        starts_at=start.isoformat(),
        ends_at=end.isoformat(),
        misfire_policy="catch_up",
        max_catch_up=100,
    )
    reconcile_once(ledger, PATIENT)
    set_cursor(ledger, start - timedelta(seconds=10), job.channel_id)

    # When a pass runs
    reconcile_once(ledger, PATIENT)

    # Then exactly the five instants from the start to the end are rows, and the channel ended
    assert sorted(o.scheduled_for for o in rows(ledger, job.channel_id)) == [
        start + timedelta(seconds=n) for n in range(5)
    ]
    assert cursor(ledger, job.channel_id) is None

    # When its end is moved a day later
    later = {**job.transport_config, "ends_at": (end + timedelta(days=1)).isoformat()}
    edited_at = ledger.db_now()
    ledger.channels.new_channel_version(job.channel_id, later, job.target, job.timeout_ms)
    reconcile_once(ledger, PATIENT)

    # Then the cursor starts again from now: no back-fill of the time it was ended
    resumed = cursor(ledger, job.channel_id)
    assert resumed is not None and resumed > edited_at
    wait_until(lambda: ledger.db_now() > resumed)
    reconcile_once(ledger, PATIENT)
    new = [o.scheduled_for for o in rows(ledger, job.channel_id) if o.scheduled_for > end]
    assert new and min(new) == resumed


def test_a_channel_that_starts_later_waits_for_its_first_instant(ledger: Ledger) -> None:
    start = whole_second(ledger.db_now()) + timedelta(hours=1)
    job = channel(ledger, schedule="* * * * * *", starts_at=start.isoformat())

    reconcile_once(ledger, FAST)

    assert cursor(ledger, job.channel_id) == start
    assert rows(ledger, job.channel_id) == []


def test_jitter_spreads_a_thousand_channels_at_one_instant_and_none_starts_before_due(
    ledger: Ledger,
) -> None:
    # Given 1,000 channels firing every ten seconds, each instant's row spread over 8 seconds,
    # and every cursor at the same coming instant
    burst = {"schedule": "*/10 * * * * *", "jitter_secs": 8}
    channels = [channel(ledger, name=f"burst-{n:04}", **burst) for n in range(1000)]
    now = whole_second(ledger.db_now())
    instant = now + timedelta(seconds=12 - (now.second + 2) % 10)  # a :x0 at least 2 s ahead
    config_hash = compile_schedule(burst, "any").config_hash  # the same for every channel
    with ledger.engine.begin() as conn:  # the cursors a pass would have written, in one go
        conn.execute(
            sa.insert(schedule_state),
            [
                {
                    "channel_id": c.channel_id,
                    "channel_version": c.version,
                    "config_hash": config_hash,
                    "next_fire_at": instant,
                    "updated_at": now,
                }
                for c in channels
            ],
        )

    # When the scheduler runs until all 1,000 rows of that instant have completed (with a
    # grace no busy machine's backlog outlasts: a row started later than the grace would be
    # judged a misfire at start, rightly, and never complete)
    scheduler = LocalScheduler(ledger, FAST.replace(misfire_grace_secs=600))
    scheduler.start()
    try:
        wait_until(lambda: len(completed_at(ledger, instant)) == 1000, timeout=180)
    finally:
        scheduler.shutdown(drain_secs=5)

    # Then every row was due within the window after the instant, its identity…
    done = completed_at(ledger, instant)
    offsets = [(o.due_at - instant).total_seconds() for o in done]
    assert all(0 <= offset < 8 for offset in offsets)
    # …spread evenly across it (eight one-second bins of about 125 rows)…
    histogram = Counter(int(offset) for offset in offsets)
    assert sorted(histogram) == list(range(8)), histogram
    assert all(70 <= n <= 180 for n in histogram.values()), histogram
    # …and none started before it was due, so the starts spread over the window too
    assert all(o.started_at is not None and o.started_at >= o.due_at for o in done)
    first_start = {
        second: min(
            o.started_at for o in done if int((o.due_at - instant).total_seconds()) == second
        )
        for second in histogram
    }
    assert all(start >= instant + timedelta(seconds=s) for s, start in first_start.items())
    (event,) = targets.received[done[0].id]
    assert event["trigger"]["scheduled_for"] == to_rfc3339(instant)
    assert event["trigger"]["due_at"] == to_rfc3339(done[0].due_at)


def completed_at(ledger: Ledger, instant: datetime) -> list[Any]:
    page = ledger.occurrences.list_occurrences(
        OccurrenceFilter(status=COMPLETED, since=instant, until=instant, limit=1000)
    )
    return page.data
