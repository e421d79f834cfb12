"""The scheduler core end to end: real reconcile, claim and execute services in this process,
against PostgreSQL and SQLite, with Python targets that record what they received.

Time is the database's: where a test needs "six hours of downtime" or "the lease ran out", it
writes the cursor or the lease into the past rather than waiting.
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from cronledger.claim import claim_once, run_claim_loop
from cronledger.cron import Schedule
from cronledger.execute import Executor
from cronledger.invokers import OneByOne, ThreadPoolInvoker
from cronledger.ledger import (
    CHANNEL_ACTIVE,
    COMPLETED,
    PENDING,
    RUNNING,
    SKIPPED_MISFIRE,
    SKIPPED_SINGLETON,
    Channel,
    Ledger,
    OccurrenceFilter,
)
from cronledger.ledger.tables import occurrences, schedule_state
from cronledger.local import LocalScheduler
from cronledger.reconcile import reconcile_once
from cronledger.schedule_cache import ScheduleCache
from cronledger.settings import Settings
from tests.e2e import targets
from tests.ledger.helpers import expire_claim, held_slots, settle, start_attempt, with_stores
from tests.polling import wait_until

FAST = Settings(
    poll_interval_ms=100,
    claim_lease_secs=3,
    heartbeat_interval_secs=1,
    misfire_grace_secs=5,
    default_timeout_ms=20_000,
    python_targets=("tests",),
)


@pytest.fixture(autouse=True)
def _fresh_targets() -> Iterator[None]:
    targets.reset()
    yield
    targets.release.set()  # never leave a blocked target thread behind


def make_channel(
    ledger: Ledger,
    schedule: str = "* * * * * *",
    target: str = "record",
    name: str = "job",
    **config: Any,
) -> Channel:
    return ledger.channels.create_channel(
        name=name,
        transport_config={"schedule": schedule, "payload": {"report": name}, **config},
        target={"type": "python", "callable": f"tests.e2e.targets:{target}"},
        timeout_ms=20_000,
        status=CHANNEL_ACTIVE,
    )


def rows(ledger: Ledger, channel_id: str | None = None) -> list[Any]:
    return ledger.occurrences.list_occurrences(
        OccurrenceFilter(channel_id=channel_id, limit=1000)
    ).data


def move_cursor_back(ledger: Ledger, channel_id: str, by: timedelta) -> None:
    """Simulate downtime: the cursor is where the scheduler left it, `by` ago."""
    (state,) = [s for s in ledger.cursors.schedule_states() if s.channel_id == channel_id]
    assert state.next_fire_at is not None
    with ledger.engine.begin() as conn:
        conn.execute(
            sa.update(schedule_state)
            .where(schedule_state.c.channel_id == channel_id)
            .values(next_fire_at=state.next_fire_at - by)
        )


def run_until_settled(ledger: Ledger, settings: Settings = FAST) -> Executor:
    """Claim everything due and run it to the end on this thread."""
    executor = Executor(ledger, settings)
    while True:
        round_ = claim_once(ledger, settings, _Inline(executor))
        if not round_.dispatched:
            return executor


class _Inline(OneByOne):
    def __init__(self, executor: Executor) -> None:
        self.executor = executor

    def dispatch(self, occurrence_id: str, claimant: str) -> None:
        self.executor.run_attempt(occurrence_id, claimant)


def test_a_per_second_schedule_produces_occurrences_that_complete(ledger: Ledger) -> None:
    # Given an active per-second channel and the whole scheduler running in-process
    channel = make_channel(ledger)
    scheduler = LocalScheduler(ledger, FAST)
    scheduler.start()
    try:
        # When it runs for a few seconds
        wait_until(
            lambda: sum(o.status == COMPLETED for o in rows(ledger, channel.channel_id)) >= 3
        )
    finally:
        scheduler.shutdown(drain_secs=5)

    # Then every completed row matches the envelope its target received
    completed = [o for o in rows(ledger, channel.channel_id) if o.status == COMPLETED]
    assert len(completed) >= 3
    for row in completed:
        (event,) = targets.received[row.id]
        trigger = event["trigger"]
        assert trigger["occurrence_id"] == row.id
        assert trigger["scheduled_for"] == row.scheduled_for.strftime("%Y-%m-%dT%H:%M:%SZ")
        assert trigger["channel_id"] == channel.channel_id
        assert trigger["type"] == "cron" and trigger["attempt"] == 1
        assert event["payload"] == {"report": "job"}
        assert row.executing_version == channel.version
        assert row.claimed_until is None, "a settled row holds no lease"
        assert row.trace_id and row.started_at and row.completed_at
        assert row.started_at >= row.scheduled_for


def test_downtime_under_latest_runs_the_newest_and_summarises_the_rest(ledger: Ledger) -> None:
    # Given an hourly channel whose cursor is six hours behind (the scheduler was down)
    channel = make_channel(ledger, "0 0 * * * *")
    reconcile_once(ledger, FAST)
    move_cursor_back(ledger, channel.channel_id, timedelta(hours=6))

    # When one pass runs
    report = reconcile_once(ledger, FAST)

    # Then one occurrence is pending and the other five misses are one summary row
    found = rows(ledger, channel.channel_id)
    pending = [o for o in found if o.status == PENDING]
    skipped = [o for o in found if o.status == SKIPPED_MISFIRE]
    assert len(pending) == 1 and len(skipped) == 1, found
    assert "skipped 5 missed occurrence(s)" in (skipped[0].error_message or "")
    assert skipped[0].scheduled_for < pending[0].scheduled_for
    assert report.inserted == 2
    state = ledger.cursors.schedule_states()[0]
    assert state.next_fire_at is not None and state.next_fire_at > ledger.db_now()


@pytest.mark.parametrize("collecting", [True, False])
def test_a_pass_pauses_the_cycle_collector_and_leaves_it_as_it_was(
    ledger: Ledger, collecting: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_channel(ledger)
    reconcile_once(ledger, FAST)  # initialises the cursor
    during: list[bool] = []

    def db_now() -> Any:  # the pass's first read
        during.append(gc.isenabled())
        return Ledger.db_now(ledger)

    monkeypatch.setattr(ledger, "db_now", db_now)
    was = gc.isenabled()
    (gc.enable if collecting else gc.disable)()
    try:
        reconcile_once(ledger, FAST)
        assert during == [False]
        assert gc.isenabled() is collecting
    finally:
        (gc.enable if was else gc.disable)()


def test_a_schedule_change_resets_the_cursor_without_back_filling(ledger: Ledger) -> None:
    channel = make_channel(ledger, "0 0 * * * *")
    reconcile_once(ledger, FAST)
    move_cursor_back(ledger, channel.channel_id, timedelta(hours=6))

    ledger.channels.new_channel_version(
        channel.channel_id, {"schedule": "0 15 2 * * *"}, channel.target, channel.timeout_ms
    )
    reconcile_once(ledger, FAST)

    assert rows(ledger, channel.channel_id) == [], "the old schedule's gap is not replayed"
    state = ledger.cursors.schedule_states()[0]
    assert state.next_fire_at is not None and state.next_fire_at > ledger.db_now()
    assert state.next_fire_at.hour == 2 and state.next_fire_at.minute == 15
    assert state.channel_version == 2


def test_an_unchanged_schedule_hash_keeps_the_cursor(ledger: Ledger) -> None:
    channel = make_channel(ledger, "0 0 * * * *")
    reconcile_once(ledger, FAST)
    before = ledger.cursors.schedule_states()[0]

    # A new version that only edits the payload must not move when the job next runs
    ledger.channels.new_channel_version(
        channel.channel_id,
        {"schedule": "0 0 * * * *", "payload": {"report": "edited"}},
        channel.target,
        channel.timeout_ms,
    )
    reconcile_once(ledger, FAST)

    after = ledger.cursors.schedule_states()[0]
    assert after.next_fire_at == before.next_fire_at
    assert after.config_hash == before.config_hash
    assert after.channel_version == 2


def test_a_crash_between_insert_and_cursor_advance_converges(ledger: Ledger) -> None:
    # Given a per-second channel two seconds behind
    channel = make_channel(ledger)
    reconcile_once(ledger, FAST)
    move_cursor_back(ledger, channel.channel_id, timedelta(seconds=3))
    cursor = ledger.cursors.schedule_states()[0].next_fire_at
    assert cursor is not None

    # When a pass inserted its rows and died before moving the cursor…
    reconcile_once(ledger, FAST)
    inserted = {o.scheduled_for for o in rows(ledger)}
    with ledger.engine.begin() as conn:
        conn.execute(sa.update(schedule_state).values(next_fire_at=cursor))

    # …then the next pass converges: no duplicate rows, and the cursor moves on
    reconcile_once(ledger, FAST)
    after = [o.scheduled_for for o in rows(ledger)]
    assert len(after) == len(set(after)), "one row per instant"
    assert inserted <= set(after)
    state = ledger.cursors.schedule_states()[0]
    assert state.next_fire_at is not None and state.next_fire_at > cursor


@pytest.mark.parametrize("batch", [None, 7])
def test_two_reconcilers_running_at_once_create_one_row_per_instant(
    ledger: Ledger, monkeypatch: pytest.MonkeyPatch, batch: int | None
) -> None:
    from cronledger import reconcile

    # Given twenty per-second channels, each ten seconds behind (written in one batch, or in
    # batches of seven, some from a writer thread)
    if batch is not None:
        monkeypatch.setattr(reconcile, "WRITE_BATCH", batch)
    channels = [make_channel(ledger, name=f"job-{i}") for i in range(20)]
    reconcile_once(ledger, FAST)
    for channel in channels:
        move_cursor_back(ledger, channel.channel_id, timedelta(seconds=10))

    # When two reconcilers run the same pass concurrently
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def reconcile() -> None:
        try:
            barrier.wait()
            reconcile_once(ledger, FAST)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=reconcile) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    # Then each instant of each channel is one row
    assert not errors
    with ledger.engine.connect() as conn:
        duplicates = conn.execute(
            sa.select(occurrences.c.channel_id, occurrences.c.scheduled_for)
            .group_by(occurrences.c.channel_id, occurrences.c.scheduled_for)
            .having(sa.func.count() > 1)
        ).all()
    assert duplicates == []
    assert {o.channel_id for o in rows(ledger)} == {c.channel_id for c in channels}


@pytest.mark.parametrize("slots", [1, 2])
def test_forbid_with_a_slow_target_skips_contenders_and_never_overlaps(
    ledger: Ledger, slots: int
) -> None:
    # Given a per-second forbid channel whose target outlasts `slots` firings
    targets.slow_secs = slots + 0.5
    channel = make_channel(ledger, target="slow", concurrency={"policy": "forbid", "slots": slots})
    scheduler = LocalScheduler(ledger, FAST)
    scheduler.start()
    try:
        # When it has run for a while
        wait_until(
            lambda: (
                sum(o.status == SKIPPED_SINGLETON for o in rows(ledger)) >= 2
                and sum(o.status == COMPLETED for o in rows(ledger)) >= slots
            ),
            timeout=20,
        )
    finally:
        scheduler.shutdown(drain_secs=5)

    # Then contenders were recorded as skipped and at most `slots` ever ran at once
    assert targets.max_running[channel.channel_id] <= slots
    skipped = [o for o in rows(ledger) if o.status == SKIPPED_SINGLETON]
    assert all(channel.channel_id in (o.error_message or "") for o in skipped)
    assert all(o.claimed_until is None for o in skipped)
    assert held_slots(ledger, channel.channel_id) <= slots


def test_an_executor_that_dies_mid_run_is_recovered_and_the_dead_one_writes_nothing(
    ledger: Ledger,
) -> None:
    # Given a started attempt whose executor "died": it holds the claim and never renews
    channel = make_channel(ledger, "0 0 0 1 1 *")
    now = ledger.db_now()
    from cronledger.ledger import NewOccurrence

    ledger.occurrences.insert_occurrence(
        NewOccurrence(channel.channel_id, channel.name, 1, now - timedelta(seconds=1))
    )
    (first,) = ledger.attempts.claim("dead-executor", 1, FAST.claim_lease_secs).leased
    dead = start_attempt(ledger, first, "dead-executor", 1, None, FAST.claim_lease_secs)
    assert dead.started

    # When the lease expires (written into the past: the clock under test is the database's)
    # and a peer claims it
    expire_claim(ledger, first.id)
    assert [o.id for o in ledger.attempts.claim("peer", 1, FAST.claim_lease_secs).leased] == [
        first.id
    ]
    peer = Executor(ledger, FAST)
    report = peer.run_attempt(first.id, "peer")

    # Then the peer completes it as attempt 2, and the dead attempt, waking, writes nothing
    assert report.status == COMPLETED
    row = ledger.occurrences.get_occurrence(first.id)
    assert (row.status, row.attempt, row.claimed_by) == (COMPLETED, 2, "peer")
    assert targets.received[first.id][0]["trigger"]["attempt"] == 2
    assert not ledger.attempts.renew(first.id, "dead-executor", None, FAST.claim_lease_secs)
    assert not settle(ledger, first.id, "dead-executor", "failed", error_message="late")
    assert ledger.occurrences.get_occurrence(first.id).status == COMPLETED


def test_cancelling_a_running_occurrence_stops_its_attempt_and_frees_its_slot(
    ledger: Ledger,
) -> None:
    # Given a forbid channel whose target blocks until released
    channel = make_channel(
        ledger, "0 0 0 1 1 *", target="wait_for_release", concurrency={"policy": "forbid"}
    )
    from cronledger.ledger import NewOccurrence

    ledger.occurrences.insert_occurrence(
        NewOccurrence(channel.channel_id, channel.name, 1, ledger.db_now() - timedelta(seconds=1))
    )
    executor = Executor(ledger, FAST)
    reports: list[Any] = []
    invoker = ThreadPoolInvoker(lambda o, c: reports.append(executor.run_attempt(o, c)), 2)
    claim_once(ledger, FAST, invoker)
    wait_until(lambda: any(o.status == RUNNING for o in rows(ledger)))
    (running,) = [o for o in rows(ledger) if o.status == RUNNING]
    assert held_slots(ledger, channel.channel_id) == 1

    # When an operator cancels it
    ledger.occurrences.cancel(running.id)

    # Then the attempt stops at its next beat, writing nothing, and the slot is free
    wait_until(lambda: reports != [], timeout=5)
    assert reports[0].outcome == "superseded" and reports[0].status is None
    row = ledger.occurrences.get_occurrence(running.id)
    assert row.status == "cancelled" and row.claimed_until is None
    assert held_slots(ledger, channel.channel_id) == 0
    invoker.shutdown(1)


def test_a_failing_target_settles_failed_with_its_error(ledger: Ledger) -> None:
    channel = make_channel(ledger, "0 0 0 1 1 *", target="fail", retry={"max_attempts": 1})
    from cronledger.ledger import NewOccurrence

    ledger.occurrences.insert_occurrence(
        NewOccurrence(channel.channel_id, channel.name, 1, ledger.db_now() - timedelta(seconds=1))
    )
    run_until_settled(ledger)
    (row,) = rows(ledger)
    assert row.status == "failed"
    assert (
        row.error_message == "RuntimeError: the report generator is out of paper (after 1 attempt)"
    )
    assert row.claimed_until is None


def test_an_occurrence_of_a_paused_channel_fails_as_channel_unavailable(ledger: Ledger) -> None:
    channel = make_channel(ledger, "0 0 0 1 1 *")
    from cronledger.ledger import NewOccurrence

    ledger.occurrences.insert_occurrence(
        NewOccurrence(channel.channel_id, channel.name, 1, ledger.db_now() - timedelta(seconds=1))
    )
    ledger.channels.set_channel_status(channel.channel_id, "paused")
    run_until_settled(ledger)
    (row,) = rows(ledger)
    assert row.status == "failed"
    assert (row.error_message or "").startswith("channel_unavailable:")
    assert targets.received == {}


class _DeadLedger:
    """A ledger whose database has gone away: every call raises, as the real one does."""

    def __getattr__(self, name: str) -> Any:
        if name in ("attempts", "cursors", "events", "occurrences", "reporting"):
            return self  # each of its stores is as dead

        def fail(*args: Any, **kwargs: Any) -> Any:
            from cronledger.ledger import DatabaseUnavailable

            raise DatabaseUnavailable("connection refused")

        return fail


def test_with_the_database_down_the_loops_record_the_failure_and_keep_running() -> None:
    from cronledger import metrics
    from cronledger.reconcile import run_reconcile_loop

    recorder = metrics.InMemoryMetrics()
    with metrics.recording_to(recorder):
        dead = _DeadLedger()
        until = time.monotonic() + 0.6
        passes = run_reconcile_loop(dead, FAST, until)  # type: ignore[arg-type]
        dispatched = run_claim_loop(
            dead,  # type: ignore[arg-type]
            FAST,
            ThreadPoolInvoker(lambda o, c: None, 1),
            time.monotonic() + 0.6,
        )
    assert passes == 0 and dispatched == 0
    # several ticks each: the loops kept going after the first failure
    assert recorder.total("DbUnavailable", Operation="reconcile") >= 3
    assert recorder.total("DbUnavailable", Operation="claim") >= 3


class _RenewalsFail:
    """The real ledger, except that every renewal fails as if the database were unreachable."""

    def __init__(self, ledger: Ledger) -> None:
        self._ledger = ledger
        self.renewals = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ledger.attempts, name)

    def renew(self, *args: Any, **kwargs: Any) -> bool:
        from cronledger.ledger import DatabaseUnavailable

        self.renewals += 1
        raise DatabaseUnavailable("connection refused")


def test_an_attempt_that_cannot_renew_stops_itself_before_its_lease_could_be_taken(
    ledger: Ledger,
) -> None:
    # Given a running attempt whose renewals all fail (lease 3 s, heartbeat 1 s)
    channel = make_channel(ledger, "0 0 0 1 1 *", target="wait_for_release")
    from cronledger.ledger import NewOccurrence

    ledger.occurrences.insert_occurrence(
        NewOccurrence(channel.channel_id, channel.name, 1, ledger.db_now() - timedelta(seconds=1))
    )
    (claimed,) = ledger.attempts.claim("flaky", 1, FAST.claim_lease_secs).leased
    flaky = _RenewalsFail(ledger)
    started = time.monotonic()

    # When the attempt runs
    report = Executor(with_stores(ledger, attempts=flaky), FAST).run_attempt(claimed.id, "flaky")
    took = time.monotonic() - started

    # Then it stopped itself after lease - heartbeat without a renewal, before the lease ran out
    assert report.outcome == "stopped" and report.status is None
    assert flaky.renewals >= 1
    assert FAST.renewal_give_up.total_seconds() <= took < FAST.claim_lease_secs
    row = ledger.occurrences.get_occurrence(claimed.id)
    assert row.status == RUNNING, "it wrote nothing: the lease is left to expire"


class _LateAnswerThenRenewalsFail:
    """The real ledger, except that one write is made and then answered late (a slow
    network): the attempt's start (in `open_attempts` on PostgreSQL, `start_attempts` on
    SQLite) or its first renewal; every renewal after that write fails as if the database
    were unreachable."""

    def __init__(self, ledger: Ledger, late_secs: float, late: str) -> None:
        self._ledger = ledger
        self.late_secs = late_secs
        self.late = late
        self.renewals = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ledger.attempts, name)

    def open_attempts(self, *args: Any, **kwargs: Any) -> Any:
        opened = self._ledger.attempts.open_attempts(*args, **kwargs)
        if self.late == "start":
            time.sleep(self.late_secs)
        return opened

    def start_attempts(self, *args: Any, **kwargs: Any) -> Any:
        started = self._ledger.attempts.start_attempts(*args, **kwargs)
        if self.late == "start":
            time.sleep(self.late_secs)
        return started

    def renew(self, *args: Any, **kwargs: Any) -> bool:
        from cronledger.ledger import DatabaseUnavailable

        self.renewals += 1
        if self.late != "renewal" or self.renewals > 1:
            raise DatabaseUnavailable("connection refused")
        renewed = self._ledger.attempts.renew(*args, **kwargs)
        time.sleep(self.late_secs)
        return renewed


@pytest.mark.parametrize("late", ["start", "renewal"])
def test_an_attempt_times_its_lease_from_before_a_write_that_was_answered_late(
    ledger: Ledger, late: str
) -> None:
    # Given a running attempt (lease 3 s, heartbeat 1 s) whose start, or first renewal, is
    # answered 1.8 s after the database granted the lease, and whose later renewals all fail
    channel = make_channel(ledger, "0 0 0 1 1 *", target="wait_for_release")
    from cronledger.ledger import NewOccurrence

    ledger.occurrences.insert_occurrence(
        NewOccurrence(channel.channel_id, channel.name, 1, ledger.db_now() - timedelta(seconds=1))
    )
    (claimed,) = ledger.attempts.claim("slow", 1, FAST.claim_lease_secs).leased
    slow = _LateAnswerThenRenewalsFail(ledger, late_secs=1.8, late=late)

    # When the attempt runs until it stops itself
    report = Executor(with_stores(ledger, attempts=slow), FAST).run_attempt(claimed.id, "slow")
    stopped_at = ledger.db_now()

    # Then it stopped before the lease the database last granted ran out (a peer may take
    # the occurrence from then on), not a lease's length after the late answer arrived
    assert report.outcome == "stopped"
    row = ledger.occurrences.get_occurrence(claimed.id)
    assert row.claimed_until is not None
    assert stopped_at < row.claimed_until, (stopped_at, row.claimed_until)


def test_a_pass_counts_only_the_rows_it_wrote(
    ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cronledger import metrics

    channel = make_channel(ledger)
    reconcile_once(ledger, FAST)
    move_cursor_back(ledger, channel.channel_id, timedelta(seconds=30))  # misses to summarise
    real = ledger.occurrences.materialise

    def peer_wins_first(rows: Any, moves: Any) -> tuple[int, set[str]]:
        rows, moves = list(rows), list(moves)
        real(rows, moves)  # a peer's pass, with the same plan, wins every cursor
        return real(rows, moves)

    monkeypatch.setattr(ledger.occurrences, "materialise", peer_wins_first)
    recorder = metrics.InMemoryMetrics()
    with metrics.recording_to(recorder):
        report = reconcile_once(ledger, FAST)

    assert (report.inserted, report.advanced) == (0, 0)
    assert recorder.total("Occurrences", Status="pending") == 0
    assert recorder.total("Occurrences", Status="skipped_misfire") == 0


def due_channels(ledger: Ledger, count: int) -> list[Channel]:
    """`count` per-second channels whose cursors are a few seconds behind: each is due."""
    channels = [make_channel(ledger, name=f"job-{n:02d}") for n in range(count)]
    reconcile_once(ledger, FAST)  # cursors initialised
    for channel in channels:
        move_cursor_back(ledger, channel.channel_id, timedelta(seconds=3))
    return sorted(channels, key=lambda c: c.channel_id)  # the order a pass meets them in


def test_a_pass_plans_the_next_batch_while_the_last_is_written(
    ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cronledger import reconcile

    # Given ten due channels, written in batches of four
    channels = due_channels(ledger, 10)
    before = {s.channel_id: s.next_fire_at for s in ledger.cursors.schedule_states()}
    monkeypatch.setattr(reconcile, "WRITE_BATCH", 4)
    real_materialise = ledger.occurrences.materialise
    fifth_planned = threading.Event()

    class Counting(ScheduleCache):
        """A pass asks for a due channel's schedule as it plans it."""

        asked = 0

        def get(self, channel: Any) -> Schedule:
            self.asked += 1
            if self.asked == 5:
                fifth_planned.set()
            return super().get(channel)

    # (channels written, from the pass's own thread, the fifth channel planned meanwhile)
    writes: list[tuple[int, bool, bool]] = []

    def materialise(rows: Any, moves: Any) -> tuple[int, set[str]]:
        moves = list(moves)
        # The first batch waits (a generous deadline) for the pass to plan on without it.
        overlapped = fifth_planned.wait(30) if not writes else fifth_planned.is_set()
        on_pass_thread = threading.current_thread() is threading.main_thread()
        writes.append((len(moves), on_pass_thread, overlapped))
        return real_materialise(rows, moves)

    monkeypatch.setattr(ledger.occurrences, "materialise", materialise)

    # When one pass runs
    report = reconcile_once(ledger, FAST, Counting())

    # Then two full batches went from a writer thread, the fifth channel planned while the
    # first was written, and the rest went from the pass's thread
    assert writes == [(4, False, True), (4, False, True), (2, True, True)]
    # And every channel got its rows and moved its cursor, once
    assert (report.due, report.advanced, report.failed) == (10, 10, {})
    after = {s.channel_id: s.next_fire_at for s in ledger.cursors.schedule_states()}
    written = rows(ledger)
    assert report.inserted == len(written)
    for channel in channels:
        old, new = before[channel.channel_id], after[channel.channel_id]
        assert old is not None and new is not None and new > old
        instants = [o.scheduled_for for o in written if o.channel_id == channel.channel_id]
        assert len(instants) == len(set(instants)) >= 3
        assert min(instants) == old and max(instants) < new


def test_a_batch_that_fails_is_written_channel_by_channel_and_the_others_stand(
    ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cronledger import reconcile

    # Given six due channels in batches of three, and a write that fails for the second one
    channels = due_channels(ledger, 6)
    bad = channels[1].channel_id
    before = {s.channel_id: s.next_fire_at for s in ledger.cursors.schedule_states()}
    monkeypatch.setattr(reconcile, "WRITE_BATCH", 3)
    real = ledger.occurrences.materialise
    calls: list[int] = []

    def refuse_bad(rows: Any, moves: Any) -> tuple[int, set[str]]:
        rows, moves = list(rows), list(moves)
        calls.append(len(moves))
        if any(move.channel_id == bad for move in moves):
            raise ValueError("refused")
        return real(rows, moves)

    monkeypatch.setattr(ledger.occurrences, "materialise", refuse_bad)

    # When one pass runs
    report = reconcile_once(ledger, FAST)

    # Then its batch was retried channel by channel, the other batch stood as one write
    assert sorted(calls) == [1, 1, 1, 3, 3]
    assert report.failed == {bad: "ValueError: refused"}
    assert report.due == 6 and report.advanced == 5
    # And the failed channel kept its cursor and got no row; every other one moved
    after = {s.channel_id: s.next_fire_at for s in ledger.cursors.schedule_states()}
    assert after[bad] == before[bad] and not rows(ledger, bad)
    assert all(after[c.channel_id] != before[c.channel_id] for c in channels if c.channel_id != bad)


@pytest.mark.parametrize("batch", [None, 2], ids=["one batch", "batches of two"])
def test_a_database_failure_while_writing_stops_the_pass_at_its_first_write(
    ledger: Ledger, monkeypatch: pytest.MonkeyPatch, batch: int | None
) -> None:
    from cronledger import reconcile
    from cronledger.ledger import DatabaseUnavailable

    # Given six due channels (in one batch, or in batches of two written meanwhile), and a
    # database that is down for writes
    due_channels(ledger, 6)
    if batch:
        monkeypatch.setattr(reconcile, "WRITE_BATCH", batch)
    calls: list[int] = []

    def down(*_args: object) -> None:
        calls.append(1)
        raise DatabaseUnavailable("connection refused")

    monkeypatch.setattr(ledger.occurrences, "materialise", down)

    # When a pass runs, then it fails as the database's failure after its first write: no
    # channel-by-channel fallback, no later batch against a dead database
    with pytest.raises(DatabaseUnavailable):
        reconcile_once(ledger, FAST)
    assert calls == [1]


@pytest.mark.parametrize("batch", [None, 1], ids=["from the pass", "from the writer"])
def test_a_channel_paused_after_the_pass_read_it_gets_none_of_the_pass_rows(
    ledger: Ledger, monkeypatch: pytest.MonkeyPatch, batch: int | None
) -> None:
    from cronledger import reconcile

    # Given a due per-second channel
    (channel,) = due_channels(ledger, 1)
    (before,) = ledger.cursors.schedule_states()
    if batch:
        monkeypatch.setattr(reconcile, "WRITE_BATCH", batch)
    real = ledger.occurrences.materialise

    def paused_meanwhile(rows: Any, moves: Any) -> tuple[int, set[str]]:
        # An operator pauses it between the pass's read and its write
        ledger.channels.set_channel_status(channel.channel_id, "paused")
        return real(rows, moves)

    monkeypatch.setattr(ledger.occurrences, "materialise", paused_meanwhile)

    # When the pass writes its plan
    report = reconcile_once(ledger, FAST)

    # Then the paused channel got no row and its cursor stayed where the pause left it
    assert rows(ledger, channel.channel_id) == []
    (after,) = ledger.cursors.schedule_states()
    assert after.paused_at is not None and after.next_fire_at == before.next_fire_at
    assert (report.inserted, report.advanced) == (0, 0)


def test_a_plan_made_before_an_edit_loses_to_a_reset_onto_the_same_instant(
    ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a per-second channel whose cursor is ten seconds ahead, inside a minute's
    # lookahead, so a pass plans some fifty rows from it
    settings = FAST.replace(lookahead_secs=60)
    channel = make_channel(ledger)
    reconcile_once(ledger, settings)  # cursor initialised
    start = ledger.db_now().replace(microsecond=0) + timedelta(seconds=10)
    with ledger.engine.begin() as conn:
        conn.execute(sa.update(schedule_state).values(next_fire_at=start))
    real = ledger.occurrences.materialise
    peer: list[Any] = []

    def edited_meanwhile(rows: Any, moves: Any) -> tuple[int, set[str]]:
        if not peer:
            # Between the pass's read and its write: an edit to once a minute, at the
            # cursor's second, and a peer's pass that resets the cursor onto that instant
            ledger.channels.new_channel_version(
                channel.channel_id,
                {"schedule": f"{start.second} * * * * *"},
                channel.target,
                channel.timeout_ms,
            )
            peer.append(reconcile_once(ledger, settings))
            (reset,) = ledger.cursors.schedule_states()
            assert (reset.next_fire_at, reset.channel_version) == (start, 2)
        return real(rows, moves)

    monkeypatch.setattr(ledger.occurrences, "materialise", edited_meanwhile)

    # When the first pass writes the plan it made under the per-second schedule
    reconcile_once(ledger, settings)

    # Then no row of the old schedule landed: every row is an instant of the new one
    written = rows(ledger, channel.channel_id)
    assert [o.scheduled_for for o in written if o.scheduled_for.second != start.second] == []
    assert {o.channel_version for o in written} <= {2}


def test_the_local_reconciler_wakes_the_claim_loop_when_it_lands_rows(
    ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cronledger import local
    from cronledger.reconcile import PassReport

    def one_pass(*_args: Any, on_pass: Any = None, **_kw: Any) -> int:
        on_pass(PassReport(inserted=1))
        return 1

    monkeypatch.setattr(local, "run_reconcile_loop", one_pass)
    scheduler = LocalScheduler(ledger, FAST)
    scheduler.stop.set()  # the claim loop returns at once; only the wiring is under test
    scheduler.start()
    wait_until(scheduler._wake.is_set, timeout=5)
    scheduler.shutdown(drain_secs=0)


def test_the_reconcile_loop_records_its_heartbeat_every_few_seconds_not_every_pass(
    ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cronledger.reconcile import run_reconcile_loop

    beats: list[str] = []
    monkeypatch.setattr(ledger.reporting, "record_job_ok", beats.append)
    passes = run_reconcile_loop(ledger, FAST, time.monotonic() + 0.5)

    assert passes >= 3 and beats == ["reconcile"]  # the first pass beats; the next is 15 s on
