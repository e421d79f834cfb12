"""After a long database outage the loops run again within a probe of its return, not after
whatever their backoff had grown to: an instant due just after the database is back runs,
rather than being skipped as a misfire because the loops were still waiting.

The outage is simulated: every ledger call fails as a lost database does while it lasts. Time
is real and scaled down: polls of 100 ms make the backoff grow past the 1 s misfire grace
within a few seconds, as polls of 1 s make it grow past 5 s within half a minute.
"""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta

import pytest

from cronledger.ledger import (
    CHANNEL_ACTIVE,
    COMPLETED,
    Ledger,
    OccurrenceFilter,
)
from cronledger.local import LocalScheduler
from cronledger.settings import Settings
from tests.e2e import outage
from tests.e2e.test_scheduler import FAST


class Outage(outage.Outage):
    """Away while `down` is set; times are monotonic."""

    def __init__(self, ledger: Ledger) -> None:
        super().__init__(ledger)
        self.down = threading.Event()

    def is_down(self) -> bool:
        return self.down.is_set()

    def now(self) -> float:
        return time.monotonic()


SETTINGS = FAST.replace(poll_interval_ms=100, misfire_grace_secs=1)
#: Long enough for the loops' backoff to reach 6.4 s between two tries.
OUTAGE_SECS = 6.0


@pytest.mark.slow
def test_an_instant_due_just_after_a_long_outage_runs_under_skip(ledger: Ledger) -> None:
    # polls of 100 ms and a 1 s grace: the backoff passes the grace within six seconds
    _outage_then_an_instant(ledger, SETTINGS, OUTAGE_SECS, due_after=timedelta(seconds=2))


@pytest.mark.slow
def test_after_a_25_second_outage_an_instant_due_3_seconds_later_runs_under_skip(
    sqlite_ledger: Ledger,
) -> None:
    # the installation's own polls (1 s) and grace (5 s): the backoff alone would wait 16 s
    settings = FAST.replace(poll_interval_ms=1000, misfire_grace_secs=5)
    _outage_then_an_instant(sqlite_ledger, settings, 25.0, due_after=timedelta(seconds=3))


def _outage_then_an_instant(
    ledger: Ledger, settings: Settings, outage_secs: float, due_after: timedelta
) -> None:
    # Given a channel every second that skips misfires, run by a scheduler whose database
    # then goes away for `outage_secs`
    channel = ledger.channels.create_channel(
        "every-second",
        {"schedule": "* * * * * *", "misfire_policy": "skip"},
        {"type": "python", "callable": "tests.e2e.targets:record"},
        5000,
        CHANNEL_ACTIVE,
    )
    outage = Outage(ledger)
    scheduler = LocalScheduler(outage, settings, workers=2)  # type: ignore[arg-type]
    scheduler.start()
    try:
        time.sleep(1.0)
        outage.down.set()
        went = time.monotonic()

        # When it comes back right after one of the loops' tries failed (so that, left to
        # its backoff, the next try would be the longest wait away)
        while not _just_failed(outage, since=went + outage_secs):
            time.sleep(0.005)
        outage.down.clear()
        back = ledger.db_now()
        instant = back.replace(microsecond=0) + due_after  # due_after, up to 1 s more
        _sleep_until(ledger, instant + timedelta(seconds=2))
    finally:
        scheduler.shutdown(drain_secs=5)

    # Then the instant due just after the database came back ran
    found = ledger.occurrences.list_occurrences(
        OccurrenceFilter(channel_id=channel.channel_id, since=instant, until=instant)
    ).data
    assert [(o.scheduled_for, o.status) for o in found] == [(instant, COMPLETED)]


def _just_failed(outage: Outage, since: float) -> bool:
    """A call failed in the last 20 ms, at `since` or later."""
    now = time.monotonic()
    return bool(outage.failed_at) and since <= outage.failed_at[-1] > now - 0.02


def _sleep_until(ledger: Ledger, at: datetime) -> None:
    time.sleep(max(0.0, (at - ledger.db_now()).total_seconds()))
