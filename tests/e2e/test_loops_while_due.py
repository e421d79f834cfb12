"""The loops on Lambda: they run only while something is due in the invocation and otherwise
return, and both back off while the database is away, logging its going and its return once,
and run again as soon as a probe finds it back rather than when the backoff runs out."""

from __future__ import annotations

import logging
import threading
import time
from datetime import timedelta
from typing import Any

import pytest

from cronledger.claim import run_claim_loop
from cronledger.invokers import OneByOne
from cronledger.ledger import DatabaseUnavailable, Ledger
from cronledger.reconcile import run_reconcile_loop
from cronledger.settings import Settings
from tests.ledger.helpers import row

SETTINGS = Settings(poll_interval_ms=50, misfire_grace_secs=1)
#: An outage of one second: tries at 0, 50, 150, 350 and 750 ms fail, and without a probe
#: the next would come at 1,550 ms.
AWAY_SECS = 1.0
BACKOFF_RUNS_OUT_SECS = 1.55


class Collect(OneByOne):
    def __init__(self) -> None:
        self.dispatched: list[str] = []

    def dispatch(self, occurrence_id: str, claimant: str) -> None:
        self.dispatched.append(occurrence_id)


class Outage:
    """The real ledger, except that while `down` is set every call fails as a lost database
    does; `failed_at` is when each failed, `served_at` when each other call was made
    (monotonic)."""

    def __init__(self, ledger: Ledger) -> None:
        self._ledger = ledger
        self.down = threading.Event()
        self.failed_at: list[float] = []
        self.served_at: list[float] = []

    def for_secs(self, secs: float) -> Outage:
        """Down from now, for `secs`."""
        self.down.set()
        threading.Timer(secs, self.down.clear).start()
        return self

    def __getattr__(self, name: str) -> Any:
        real = getattr(self._ledger, name)
        if not callable(real):
            return real

        def call(*args: Any, **kwargs: Any) -> Any:
            if self.down.is_set():
                self.failed_at.append(time.monotonic())
                raise DatabaseUnavailable("connection refused")
            self.served_at.append(time.monotonic())
            return real(*args, **kwargs)

        return call


def test_a_claim_loop_with_nothing_due_in_its_invocation_returns_at_once(ledger: Ledger) -> None:
    # Given an occurrence due in an hour, and an invocation with a minute left
    ledger.insert_occurrence(row(ledger.db_now() + timedelta(hours=1)))

    started = time.monotonic()
    dispatched = run_claim_loop(ledger, SETTINGS, Collect(), started + 60, while_due=True)

    assert dispatched == 0
    assert time.monotonic() - started < 5


def test_a_claim_loop_stays_for_what_falls_due_in_its_invocation_then_returns(
    ledger: Ledger,
) -> None:
    # Given one occurrence due now and one due in a second (timed from before the clock is
    # read: writing the rows takes a while on a busy machine, and the second comes due anyway)
    started = time.monotonic()
    now = ledger.db_now()
    soon = row(now + timedelta(seconds=1))
    ledger.insert_occurrences([row(now - timedelta(seconds=1)), soon])
    invoker = Collect()

    dispatched = run_claim_loop(ledger, SETTINGS, invoker, started + 60, while_due=True)

    # Then it dispatched both, the second once due, and returned instead of polling on
    assert dispatched == 2 and invoker.dispatched[-1] == soon.id
    assert 0.9 <= time.monotonic() - started < 10


def test_without_while_due_a_claim_loop_polls_until_its_deadline(ledger: Ledger) -> None:
    started = time.monotonic()
    run_claim_loop(ledger, SETTINGS, Collect(), started + 0.5)
    assert time.monotonic() - started >= 0.5


def test_a_reconcile_loop_of_one_pass_retries_a_failed_pass_and_then_returns(
    ledger: Ledger, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a database away for the first second
    with caplog.at_level(logging.INFO, logger="cronledger"):
        started = time.monotonic()
        away = Outage(ledger).for_secs(AWAY_SECS)
        passes = run_reconcile_loop(away, SETTINGS, started + 30, passes=1)  # type: ignore[arg-type]
        elapsed = time.monotonic() - started

    # Then it tried at 0, 50, 150, 350 and 750 ms, went on once a probe found the database
    # back (not at 1,550 ms, when the backoff ran out: timed at its first call that was
    # served, so a slow pass after it cannot blur the figure), and said so twice
    assert passes == 1
    assert elapsed >= AWAY_SECS
    assert AWAY_SECS <= away.served_at[0] - started < BACKOFF_RUNS_OUT_SECS - 0.1
    outage = [r.getMessage() for r in caplog.records if "database" in r.getMessage()]
    assert outage == [
        "reconcile: the database is unavailable (connection refused); retrying with backoff "
        "up to 30 s",
        "reconcile: the database is back after 5 failed tries",
    ]


def test_a_claim_loop_backs_off_while_the_database_is_away_and_logs_it_twice(
    ledger: Ledger, caplog: pytest.LogCaptureFixture
) -> None:
    # Given one due occurrence, and a database away for the next second
    ledger.insert_occurrence(row(ledger.db_now() - timedelta(seconds=1)))
    invoker = Collect()

    with caplog.at_level(logging.INFO, logger="cronledger"):
        started = time.monotonic()
        away = Outage(ledger).for_secs(AWAY_SECS)
        run_claim_loop(away, SETTINGS, invoker, started + 30, while_due=True)  # type: ignore[arg-type]
        elapsed = time.monotonic() - started

    # Then it waited 50 + 100 + 200 + 400 ms between tries, and went on once a probe found
    # the database back instead of waiting out 800 ms more (timed at its first call that was
    # served); it said so twice
    assert len(invoker.dispatched) == 1
    assert elapsed >= AWAY_SECS
    assert AWAY_SECS <= away.served_at[0] - started < BACKOFF_RUNS_OUT_SECS - 0.1
    outage = [r.getMessage() for r in caplog.records if "database" in r.getMessage()]
    assert outage == [
        "claim: the database is unavailable (connection refused); retrying with backoff up to 30 s",
        "claim: the database is back after 5 failed tries",
    ]
