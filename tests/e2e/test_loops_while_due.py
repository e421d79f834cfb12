"""The reconcile loop on Lambda: a pass that fails while the database is away is retried with
backoff, logging the outage's start and end once, and runs again as soon as a probe finds the
database back rather than when the backoff runs out. The pass runs on the real ledger; the
loop's waits run on a fake clock, so the figures are exact and nothing sleeps. The claim
loop's pacing is tested on the in-memory ledger (tests/unit/test_claim_loop.py)."""

from __future__ import annotations

import logging

import pytest

from cronledger.ledger import Ledger
from cronledger.reconcile import run_reconcile_loop
from cronledger.settings import Settings
from tests.e2e import outage
from tests.fake_ledger import FakeClock

SETTINGS = Settings(poll_interval_ms=50, misfire_grace_secs=1)
#: An outage of one second: tries at 0, 50, 150, 350 and 750 ms fail, and without a probe
#: the next would come at 1,550 ms.
AWAY_SECS = 1.0
BACKOFF_RUNS_OUT_SECS = 1.55
#: The fake clock's microsecond steps, summed: far below any step the loop takes.
EPS = 1e-4


class Outage(outage.Outage):
    """Away while the fake clock is within `secs` of its start; times are the clock's."""

    def __init__(self, ledger: Ledger, clock: FakeClock, secs: float) -> None:
        super().__init__(ledger)
        self._clock = clock
        self._back_at = clock.now + secs

    def is_down(self) -> bool:
        return self._clock.now < self._back_at - EPS

    def now(self) -> float:
        return self._clock.now


def test_a_reconcile_loop_of_one_pass_retries_a_failed_pass_and_then_returns(
    ledger: Ledger, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a database away for the first second
    clock = FakeClock()
    started = clock.now
    away = Outage(ledger, clock, AWAY_SECS)

    with caplog.at_level(logging.INFO, logger="cronledger"):
        passes = run_reconcile_loop(
            away,  # type: ignore[arg-type]
            SETTINGS,
            started + 30,
            passes=1,
            clock=clock.clock,
        )

    # Then it tried at 0, 50, 150, 350 and 750 ms (probing every 50 ms in between), went on
    # at the first probe that found the database back (not at 1,550 ms, when the backoff ran
    # out), and said so twice
    assert passes == 1
    assert away.failed_at[0] == started
    served = away.served_at[0] - started
    assert AWAY_SECS - EPS <= served < AWAY_SECS + SETTINGS.poll_interval.total_seconds()
    assert served < BACKOFF_RUNS_OUT_SECS - 0.1
    outage = [r.getMessage() for r in caplog.records if "database" in r.getMessage()]
    assert outage == [
        "reconcile: the database is unavailable (connection refused); retrying with backoff "
        "up to 30 s",
        "reconcile: the database is back after 5 failed tries",
    ]
