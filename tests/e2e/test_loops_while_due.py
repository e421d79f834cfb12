"""The reconcile loop on Lambda: a pass that fails while the database is away is retried with
backoff, logging the outage's start and end once, and runs again as soon as a probe finds the
database back rather than when the backoff runs out. The claim loop's pacing (the same
backoff, and running only while something is due) is tested on the in-memory ledger with a
fake clock (tests/unit/test_claim_loop.py)."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import pytest

from cronledger.ledger import DatabaseUnavailable, Ledger
from cronledger.reconcile import run_reconcile_loop
from cronledger.settings import Settings

SETTINGS = Settings(poll_interval_ms=50, misfire_grace_secs=1)
#: An outage of one second: tries at 0, 50, 150, 350 and 750 ms fail, and without a probe
#: the next would come at 1,550 ms.
AWAY_SECS = 1.0
BACKOFF_RUNS_OUT_SECS = 1.55


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
