"""Overlap policies end to end, on PostgreSQL and SQLite: `queue_one` runs the one waiting
contender as soon as the key frees and skips the rest; under `replace` the replaced attempt
stops at its next beat, writing nothing, and says why."""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from cronledger.claim import claim_once
from cronledger.execute import AttemptReport, Executor
from cronledger.invokers import ThreadPoolInvoker
from cronledger.ledger import (
    CANCELLED,
    COMPLETED,
    PENDING,
    RUNNING,
    SKIPPED_SINGLETON,
    Ledger,
    NewOccurrence,
)
from cronledger.local import LocalScheduler
from tests.e2e import targets
from tests.e2e.test_scheduler import FAST, make_channel, rows
from tests.polling import wait_until


@pytest.fixture(autouse=True)
def _fresh_targets() -> Iterator[None]:
    targets.reset()
    yield
    targets.release.set()


@pytest.mark.slow
def test_queue_one_runs_the_waiting_contender_as_the_key_frees_and_skips_the_rest(
    ledger: Ledger,
) -> None:
    # Given a channel firing every 2 s whose target takes 3 s, one slot, queue_one
    targets.slow_secs = 3
    channel = make_channel(
        ledger, "*/2 * * * * *", target="slow", concurrency={"policy": "queue_one"}
    )
    scheduler = LocalScheduler(ledger, FAST)
    scheduler.start()
    waiting_seen: list[int] = []
    try:
        # When it has run for a while (watching how many wait at once)
        def enough() -> bool:
            found = rows(ledger, channel.channel_id)
            waiting_seen.append(sum(_waits(o) for o in found))
            return sum(o.status == COMPLETED for o in found) >= 3

        wait_until(enough, timeout=30, every=0.05)
    finally:
        scheduler.shutdown(drain_secs=5)

    # Then never two ran at once, never two waited at once, and each queued contender
    # started as soon as the one before it ended (within one instant's gap, on a busy machine)
    assert targets.max_running[channel.channel_id] == 1
    assert max(waiting_seen) == 1
    done = sorted(
        (o for o in rows(ledger, channel.channel_id) if o.status == COMPLETED),
        key=lambda o: o.started_at or o.scheduled_for,
    )
    for before, after in itertools.pairwise(done):
        assert before.completed_at is not None and after.started_at is not None
        assert after.started_at >= before.completed_at
        assert after.started_at - before.completed_at < timedelta(seconds=1.5), (before, after)
    assert any(o.status == SKIPPED_SINGLETON for o in rows(ledger, channel.channel_id))


def test_a_replaced_attempt_stops_at_its_next_beat_and_says_why(
    ledger: Ledger, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a replace channel whose attempt is running a target that blocks
    channel = make_channel(
        ledger, "0 0 0 1 1 *", target="wait_for_release", concurrency={"policy": "replace"}
    )
    executor = Executor(ledger, FAST)
    reports: list[AttemptReport] = []
    invoker = ThreadPoolInvoker(lambda o, c: reports.append(executor.run_attempt(o, c)), 4)
    first = _due(ledger, channel.channel_id, ago=2)
    claim_once(ledger, FAST, invoker)
    wait_until(lambda: ledger.get_occurrence(first.id).status == RUNNING)

    # When the next occurrence arrives and replaces it
    second = _due(ledger, channel.channel_id, ago=1)
    with caplog.at_level(logging.WARNING, logger="cronledger.execute"):
        claim_once(ledger, FAST, invoker)
        replaced_at = time.monotonic()
        wait_until(lambda: len(reports) == 1, timeout=5)
        stopped_after = time.monotonic() - replaced_at

    # Then the replaced attempt stopped within a beat, wrote nothing, and logged one line
    # naming the occurrence, its attempt and why; the newcomer runs under the next token
    assert stopped_after < FAST.heartbeat_interval.total_seconds() + 1.0
    assert (reports[0].occurrence_id, reports[0].outcome, reports[0].status) == (
        first.id,
        "superseded",
        None,
    )
    gone = ledger.get_occurrence(first.id)
    assert (gone.status, gone.error_message) == (CANCELLED, f"replaced by {second.id}")
    now = ledger.get_occurrence(second.id)
    assert (now.status, now.fencing_token) == (RUNNING, (gone.fencing_token or 0) + 1)
    [line] = [r.getMessage() for r in caplog.records if "superseded" in r.getMessage()]
    assert first.id in line and "attempt 1" in line and f"replaced by {second.id}" in line
    targets.release.set()
    wait_until(lambda: len(reports) == 2, timeout=5)
    assert ledger.get_occurrence(second.id).status == COMPLETED
    invoker.shutdown(1)


def _due(ledger: Ledger, channel_id: str, ago: float) -> NewOccurrence:
    new = NewOccurrence(channel_id, "job", 1, ledger.db_now() - timedelta(seconds=ago))
    assert ledger.insert_occurrence(new)
    return new


def _waits(row: Any) -> bool:
    """A contender queued for the key: back to pending, admitted, due again after its
    instant (a late row kept by a misfire judgment is pending and admitted too, but still
    due at its instant)."""
    return bool(
        row.status == PENDING
        and row.misfire_judged
        and row.started_at is None
        and row.due_at > row.scheduled_for
    )
