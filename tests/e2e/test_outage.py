"""After an outage, what runs is what the misfire policy says, whether the rows were written
before the outage (lookahead) or after it (SPEC §5, misfire judged at start).

Two whole local schedulers run side by side on two databases of the same backend, one
materialising 4 s ahead and one not, with the same channels. Both are frozen (stopped) for
longer than the grace, then started again at the same moment. Per policy, the instants that
ran inside the outage, and the count of those that did not, must be exactly what the policy
keeps, and the same for both.

Time is real here, so the moments are chosen away from every boundary: instants fall every 4 s,
the freeze 2 s after one, the restart 1 s after one, so that instant is late by 1 s (2 s short
of the grace) and the one before it misfired by 2 s, whatever a busy machine adds to a pass
or a start.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from cronledger.ledger import (
    CHANNEL_ACTIVE,
    COMPLETED,
    SKIPPED_MISFIRE,
    Ledger,
    OccurrenceFilter,
)
from cronledger.local import LocalScheduler
from cronledger.settings import Settings
from tests.e2e.test_scheduler import FAST
from tests.pg import scratch_database

EVERY_4_SECONDS = "*/4 * * * * *"
GRACE_SECS = 3
#: Rows for the first two instants of the outage are written before it.
LOOKAHEAD_SECS = 7
#: From the freeze (2 s after an instant) to the restart (1 s after the fourth instant on).
OUTAGE_SECS = 15
POLICIES = {
    "skip": {"misfire_policy": "skip"},
    "latest": {"misfire_policy": "latest"},
    "catch_up": {"misfire_policy": "catch_up", "max_catch_up": 2},
}
SETTINGS = FAST.replace(misfire_grace_secs=GRACE_SECS)
WORKERS = 4
SUMMARY = re.compile(r"skipped (\d+) missed occurrence")


@pytest.fixture
def twin(ledger: Ledger, pg_database_url: str, tmp_path: Path) -> Iterator[Ledger]:
    """A second, empty ledger on the same backend as `ledger`."""
    with contextlib.ExitStack() as stack:
        if ledger.engine.dialect.name == "postgresql":
            url = stack.enter_context(scratch_database(pg_database_url, "twin"))
        else:
            url = f"sqlite:///{tmp_path / 'twin.db'}"
        other = Ledger.connect(url)
        stack.callback(other.dispose)
        other.migrate()
        yield other


@pytest.mark.slow
def test_an_outage_runs_the_same_instants_with_and_without_lookahead(
    ledger: Ledger, twin: Ledger
) -> None:
    # Given the same three channels (skip, latest, catch_up of 2), every 4 s, in two ledgers
    ahead, plain = ledger, twin
    for each in (ahead, plain):
        for policy, config in POLICIES.items():
            each.channels.create_channel(
                policy,
                {"schedule": EVERY_4_SECONDS, **config},
                {"type": "python", "callable": "tests.e2e.targets:record"},
                5000,
                CHANNEL_ACTIVE,
            )
    with_lookahead = SETTINGS.replace(lookahead_secs=LOOKAHEAD_SECS)
    running = _schedulers(ahead, plain, with_lookahead)
    for scheduler in running:
        scheduler.start()

    # When both run a while, are frozen for 15 s, 2 s after an instant, and start again
    time.sleep(3)
    frozen_at = _sleep_until_second(every=4, past=2)
    for scheduler in running:
        scheduler.shutdown(drain_secs=5)
    restart_at = frozen_at + timedelta(seconds=OUTAGE_SECS)
    _sleep_until(restart_at)
    running = _schedulers(ahead, plain, with_lookahead)
    for scheduler in running:
        scheduler.start()
    time.sleep(3)
    for scheduler in running:
        scheduler.shutdown(drain_secs=5)

    # Then per policy, both ran exactly the instants the policy keeps, and counted the rest
    first = frozen_at + timedelta(seconds=2)  # the first instant of the outage
    window = [first + timedelta(seconds=4 * n) for n in range(4)]  # 3 misfired, then 1 late
    expected = {
        "skip": ([window[3]], 3),
        "latest": ([window[2], window[3]], 2),
        "catch_up": ([window[0], window[1], window[3]], 1),
    }
    for policy, (ran, missed) in expected.items():
        for each, name in ((ahead, "with lookahead"), (plain, "without lookahead")):
            assert _outcome(each, policy, frozen_at, restart_at) == (ran, missed), (policy, name)
    # …the rows written ahead having been judged at start, one skipped row per instant
    judged = [
        o.scheduled_for
        for o in ahead.occurrences.list_occurrences(OccurrenceFilter(status=SKIPPED_MISFIRE)).data
        if "judged at start" in (o.error_message or "") and o.channel_name == "skip"
    ]
    assert sorted(judged) == window[:2]


def _schedulers(ahead: Ledger, plain: Ledger, with_lookahead: Settings) -> list[LocalScheduler]:
    """One scheduler per ledger, with few workers: three channels need no more, and the
    suite's PostgreSQL serves other tests' connections too."""
    return [
        LocalScheduler(ahead, with_lookahead, workers=WORKERS),
        LocalScheduler(plain, SETTINGS, workers=WORKERS),
    ]


def _outcome(
    ledger: Ledger, channel_name: str, frozen_at: datetime, restart_at: datetime
) -> tuple[list[datetime], int]:
    """The instants of the outage that ran (completed), and how many did not (each
    `skipped_misfire` row of the outage counts one, a reconcile summary its N)."""
    channel = ledger.channels.get_channel_by_name(channel_name)
    found = ledger.occurrences.list_occurrences(
        OccurrenceFilter(
            channel_id=channel.channel_id, since=frozen_at, until=restart_at, limit=1000
        )
    ).data
    ran = sorted(o.scheduled_for for o in found if o.status == COMPLETED)
    missed = 0
    for row in found:
        if row.status == SKIPPED_MISFIRE:
            summary = SUMMARY.search(row.error_message or "")
            missed += int(summary.group(1)) if summary else 1
    assert all(o.status in (COMPLETED, SKIPPED_MISFIRE) for o in found), found
    return ran, missed


def _sleep_until_second(*, every: int, past: int) -> datetime:
    """Sleep until the next whole second `past` seconds after a multiple of `every` (within
    the minute); answer it, in UTC."""
    target = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=1)
    while target.second % every != past:
        target += timedelta(seconds=1)
    _sleep_until(target)
    return target


def _sleep_until(at: datetime) -> None:
    time.sleep(max(0.0, (at - datetime.now(UTC)).total_seconds()))
