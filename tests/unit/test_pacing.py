"""A loop's backoff while the database is away: doubling waits up to 30 s, reset by the first
success, cut short by the first probe that finds the database back, and one log line for the
outage's start and one for its end; housekeeping that runs once per period, and sooner when
it ran out of time."""

from __future__ import annotations

import logging
import threading
import time
from datetime import timedelta

import pytest

from cronledger import reconcile
from cronledger.ledger import COMPLETED, Ledger
from cronledger.pacing import MAX_BACKOFF_SECS, Backoff, Every
from cronledger.settings import Settings
from tests.fake_ledger import FakeClock
from tests.ledger.helpers import age_completion, row


def test_waits_double_from_the_first_up_to_thirty_seconds_and_a_success_resets_them(
    caplog: pytest.LogCaptureFixture,
) -> None:
    backoff = Backoff("claim", 1.0, logging.getLogger("cronledger.test"))

    waits = [backoff.failed(ConnectionError("refused")) for _ in range(8)]
    backoff.succeeded()
    after = backoff.failed(ConnectionError("refused"))

    assert waits == [1.0, 2.0, 4.0, 8.0, 16.0, MAX_BACKOFF_SECS, MAX_BACKOFF_SECS, MAX_BACKOFF_SECS]
    assert MAX_BACKOFF_SECS == 30.0
    assert after == 1.0


def test_a_wait_ends_at_the_first_probe_that_answers_and_a_failed_probe_is_no_try() -> None:
    # Given a loop whose backoff has grown to 800 ms, on a clock that never sleeps
    fake = FakeClock()
    backoff = Backoff("claim", 0.05, logging.getLogger("cronledger.test"), fake.clock)
    for _ in range(4):
        backoff.failed(ConnectionError("refused"))
    answers: list[Exception | None] = [ConnectionError("refused"), ConnectionError("refused"), None]
    probed: list[float] = []

    def probe() -> None:
        probed.append(fake.now)
        answer = answers.pop(0)
        if answer is not None:
            raise answer

    # When it waits after its next failure, the database answering the third probe
    started = fake.now
    backoff.wait(ConnectionError("refused"), threading.Event(), started + 60, probe)

    # Then the wait ended at that probe, one poll apart each, and only the try counted
    assert len(probed) == 3 and answers == []
    assert [at - started for at in probed] == pytest.approx([0.05, 0.10, 0.15], abs=1e-4)
    assert fake.now == probed[-1], "nothing waited after the probe that answered"
    assert backoff.failures == 5


def test_a_wait_with_no_answer_ends_when_its_backoff_runs_out_or_at_the_deadline() -> None:
    # Given a backoff of 400 ms next, and a database that never answers
    fake = FakeClock()
    backoff = Backoff("claim", 0.05, logging.getLogger("cronledger.test"), fake.clock)
    for _ in range(3):
        backoff.failed(ConnectionError("refused"))

    def probe() -> None:
        raise ConnectionError("refused")

    # When it waits with a minute left, and again with 100 ms left
    started = fake.now
    backoff.wait(ConnectionError("refused"), threading.Event(), started + 60, probe)
    ran_out = fake.now - started
    backoff.wait(ConnectionError("refused"), threading.Event(), fake.now + 0.1, probe)

    # Then the first wait lasted its 400 ms, and the second stopped at the deadline
    assert ran_out == pytest.approx(0.4, abs=1e-4)
    assert fake.now - started == pytest.approx(0.5, abs=1e-4)


def test_an_outage_is_two_log_lines_however_many_polls_it_lasts(
    caplog: pytest.LogCaptureFixture,
) -> None:
    backoff = Backoff("reconcile", 0.5, logging.getLogger("cronledger.test"))

    with caplog.at_level(logging.INFO, logger="cronledger.test"):
        backoff.succeeded()  # nothing to report while the database is up
        for _ in range(25):
            backoff.failed(ConnectionError("connection refused"))
        backoff.succeeded()
        backoff.succeeded()

    assert [r.getMessage() for r in caplog.records] == [
        "reconcile: the database is unavailable (connection refused); retrying with backoff "
        "up to 30 s",
        "reconcile: the database is back after 25 failed tries",
    ]


def test_housekeeping_is_due_once_per_period_unless_it_stopped_before_it_was_done() -> None:
    every = Every(3600)

    assert [every.due(), every.due()] == [True, False]
    every.again()
    assert [every.due(), every.due()] == [True, False]


@pytest.mark.parametrize(("budget_secs", "due_again"), [(0.0, True), (3600.0, False)])
def test_retention_whose_budget_ran_out_goes_on_at_the_next_pass(
    sqlite_ledger: Ledger, monkeypatch: pytest.MonkeyPatch, budget_secs: float, due_again: bool
) -> None:
    # Given a terminal row past the retention window
    ended = row(sqlite_ledger.db_now() - timedelta(days=60), status=COMPLETED)
    assert sqlite_ledger.occurrences.insert_occurrence(ended)
    age_completion(sqlite_ledger, ended.id, timedelta(days=60))
    monkeypatch.setattr(reconcile, "RETENTION_BUDGET_SECS", budget_secs)
    retention, heartbeat = Every(3600), Every(3600)

    # When a pass's bookkeeping runs retention
    reconcile.after_pass(sqlite_ledger, Settings(), retention, heartbeat)

    # Then the row is gone, and retention is due again only if its time ran out
    assert sqlite_ledger.occurrences.list_occurrences().total == 0
    assert retention.due() is due_again


def test_retention_after_the_loops_last_pass_may_take_the_rest_of_its_time(
    sqlite_ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a loop of two passes, and retention's deadline as each pass's bookkeeping gets it
    deadlines: list[float] = []
    monkeypatch.setattr(reconcile, "after_pass", lambda *args: deadlines.append(args[-1]))
    until = time.monotonic() + 3600
    settings = Settings(poll_interval_ms=10)

    # When the loop runs
    started = time.monotonic()
    assert reconcile.run_reconcile_loop(sqlite_ledger, settings, until, passes=2) == 2

    # Then the first pass's retention may hold up the next pass by its budget only; the last
    # one's may run until the loop's deadline (a backlog is trimmed while there is time)
    first, last = deadlines
    assert started < first <= time.monotonic() + reconcile.RETENTION_BUDGET_SECS
    assert last == until


def test_a_signal_that_lands_on_another_thread_still_ends_the_wait_for_ctrl_c() -> None:
    import signal
    import threading

    from cronledger.pacing import SIGNAL_LOOK_SECS, wait_for_interrupt

    class Stop(Exception):
        pass

    def handler(_signum: int, _frame: object) -> None:
        raise Stop

    # Given a main thread waiting for Ctrl-C, and a signal sent to another thread (as the
    # kernel may hand a process's Ctrl-C to a server's thread)
    main = threading.main_thread()
    assert threading.current_thread() is main, "signal handlers run on the main thread only"
    done, rescued = threading.Event(), threading.Event()

    def elsewhere() -> None:
        time.sleep(0.1)
        signal.pthread_kill(threading.get_ident(), signal.SIGUSR1)  # lands on this thread
        if not done.wait(SIGNAL_LOOK_SECS + 5):  # a wait that missed it: free the test
            rescued.set()
            signal.pthread_kill(main.ident or 0, signal.SIGUSR1)

    previous = signal.signal(signal.SIGUSR1, handler)
    other = threading.Thread(target=elsewhere)
    try:
        other.start()
        started = time.monotonic()
        # When the main thread waits, then the handler ran there within a step
        with pytest.raises(Stop):
            wait_for_interrupt()
        took = time.monotonic() - started
        done.set()
        other.join()
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert not rescued.is_set(), "the wait missed a signal another thread took"
    assert took < SIGNAL_LOOK_SECS + 1
