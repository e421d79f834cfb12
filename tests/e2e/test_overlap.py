"""Overlap policies end to end, on PostgreSQL and SQLite: `queue_one` runs the one waiting
contender as soon as the key frees and skips the rest; under `replace` the replaced attempt
stops at its next beat, writing nothing, and says why."""

from __future__ import annotations

import itertools
import logging
import threading
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
from tests.ledger.helpers import empty_tables, held_slots, with_stores
from tests.polling import wait_until

#: FAST (beats every second) with a lease no busy machine outlasts: these tests are about
#: overlap, not about an attempt starved of the processor past its lease (recovered, rightly,
#: as its next attempt, and a waiter's place expiring with it).
SETTINGS = FAST.replace(claim_lease_secs=30)


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
    scheduler = LocalScheduler(ledger, SETTINGS)
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
    recording = _RecordedRenewals(ledger)
    executor = Executor(with_stores(ledger, attempts=recording), SETTINGS)
    reports: list[AttemptReport] = []
    invoker = ThreadPoolInvoker(lambda o, c: reports.append(executor.run_attempt(o, c)), 4)
    first = _due(ledger, channel.channel_id, ago=2)
    claim_once(ledger, SETTINGS, invoker)
    wait_until(lambda: ledger.occurrences.get_occurrence(first.id).status == RUNNING)
    wait_until(lambda: recording.answers(first.id)[:1] == [True], timeout=30)  # it has beaten

    # When the next occurrence arrives and replaces it
    second = _due(ledger, channel.channel_id, ago=1)
    with caplog.at_level(logging.WARNING, logger="cronledger.execute"):
        claim_once(ledger, SETTINGS, invoker)
        wait_until(lambda: len(reports) == 1, timeout=30)

    # Then the replaced attempt stopped at its next beat (the first renewal after the
    # replacement was answered "not yours", and it renewed nothing after it), wrote nothing,
    # and logged one line naming the occurrence, its attempt and why; the newcomer runs
    # under the next token
    answers = recording.answers(first.id)
    assert answers == [True] * (len(answers) - 1) + [False], answers
    assert (reports[0].occurrence_id, reports[0].outcome, reports[0].status) == (
        first.id,
        "superseded",
        None,
    )
    gone = ledger.occurrences.get_occurrence(first.id)
    assert (gone.status, gone.error_message) == (CANCELLED, f"replaced by {second.id}")
    now = ledger.occurrences.get_occurrence(second.id)
    assert (now.status, now.fencing_token) == (RUNNING, (gone.fencing_token or 0) + 1)
    [line] = [r.getMessage() for r in caplog.records if "superseded" in r.getMessage()]
    assert first.id in line and "attempt 1" in line and f"replaced by {second.id}" in line
    targets.release.set()
    wait_until(lambda: len(reports) == 2, timeout=5)
    assert ledger.occurrences.get_occurrence(second.id).status == COMPLETED
    invoker.shutdown(1)


def _due(ledger: Ledger, channel_id: str, ago: float) -> NewOccurrence:
    new = NewOccurrence(channel_id, "job", 1, ledger.db_now() - timedelta(seconds=ago))
    assert ledger.occurrences.insert_occurrence(new)
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


# --- eight channels on one key, real threads, PostgreSQL -----------------------------------

CONTENDERS = 8
#: Rounds in which every channel is triggered once, a little apart, so that arrivals, ends,
#: waits and re-admissions interleave in whatever order eight threads produce.
ROUNDS = 6


def _shared_key_channels(ledger: Ledger, policy: str, slots: int, target: str) -> list[Any]:
    return [
        make_channel(
            ledger,
            "0 0 0 1 1 *",
            target=target,
            name=f"contender-{n}",
            concurrency={"policy": policy, "key": "shared", "slots": slots},
        )
        for n in range(CONTENDERS)
    ]


def _trigger_all(ledger: Ledger, channels: list[Any]) -> list[str]:
    """One manual run of every channel (never a misfire), due now; their ids."""
    now = ledger.db_now()
    new = [NewOccurrence.of(c, now, None, trigger="manual") for c in channels]
    ledger.occurrences.insert_occurrences(new)
    return [n.id for n in new]


@pytest.mark.slow
@pytest.mark.parametrize("slots", [1, 2])
def test_eight_queue_one_channels_on_one_key_never_run_more_than_slots_nor_queue_two(
    pg_ledger: Ledger, slots: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given eight channels sharing one queue_one key, and a scheduler of eight workers
    empty_tables(pg_ledger)
    monkeypatch.setattr(targets, "slow_secs", 0.3)
    channels = _shared_key_channels(pg_ledger, "queue_one", slots, "slow")
    scheduler = LocalScheduler(pg_ledger, SETTINGS, workers=CONTENDERS)
    ids: list[str] = []
    waiting_seen: list[int] = []
    running_seen: list[int] = []

    def look() -> None:
        found = rows(pg_ledger)
        waiting_seen.append(sum(_waits(o) for o in found))
        running_seen.append(sum(o.status == RUNNING for o in found))

    # When every channel is triggered round after round while the scheduler runs
    scheduler.start()
    try:
        for _ in range(ROUNDS):
            ids += _trigger_all(pg_ledger, channels)
            for _ in range(5):
                look()
                time.sleep(0.05)
        wait_until(lambda: look() or _all_settled(pg_ledger, ids), timeout=60, every=0.05)
    finally:
        scheduler.shutdown(drain_secs=10)

    # Then no more than `slots` targets ever ran at once, as they counted themselves and as
    # the rows said, no more than one contender ever waited, and every run ended one way or
    # the other: completed (the holders and the waiters let in) or skipped
    assert targets.max_running["shared"] <= slots
    assert max(running_seen) <= slots, running_seen
    assert max(waiting_seen) <= 1, waiting_seen
    ended = [pg_ledger.occurrences.get_occurrence(i) for i in ids]
    assert {o.status for o in ended} <= {COMPLETED, SKIPPED_SINGLETON}
    done = [o for o in ended if o.status == COMPLETED]
    assert len(done) > slots, "the key was held, freed and taken again"
    ran = [pg_ledger.occurrences.get_occurrence(i) for i in targets.received]
    assert {o.id for o in ran} == {o.id for o in done}, "the completed ran, and only they"


@pytest.mark.slow
@pytest.mark.parametrize("slots", [1, 2])
def test_eight_replace_channels_on_one_key_stop_each_replaced_holder_at_its_next_beat(
    pg_ledger: Ledger, slots: int
) -> None:
    # Given eight channels sharing one replace key, their targets blocking until released,
    # and a scheduler of eight workers that records every renewal's answer
    empty_tables(pg_ledger)
    channels = _shared_key_channels(pg_ledger, "replace", slots, "wait_for_release")
    recording = _RecordedRenewals(pg_ledger)
    reports: list[AttemptReport] = []
    scheduler = LocalScheduler(
        with_stores(pg_ledger, attempts=recording),
        SETTINGS,
        on_settled=reports.append,
        workers=CONTENDERS,
    )
    ids: list[str] = []
    held_seen: list[int] = []

    # When every channel is triggered in a few rounds, each arrival replacing a holder, the
    # rounds a beat and a half apart (so a round's last holders have renewed before the next
    # round replaces them)
    scheduler.start()
    try:
        for _ in range(3):
            ids.extend(_trigger_all(pg_ledger, channels))
            wait_until(lambda: _none_pending(pg_ledger, ids), timeout=60)
            held_seen.append(held_slots(pg_ledger, "shared"))
            time.sleep(1.5 * SETTINGS.heartbeat_interval.total_seconds())
        replaced = [i for i in ids if pg_ledger.occurrences.get_occurrence(i).status == CANCELLED]
        wait_until(lambda: len(reports) >= len(replaced), timeout=60)
        targets.release.set()
        wait_until(lambda: len(reports) == len(ids), timeout=60)
    finally:
        targets.release.set()
        scheduler.shutdown(drain_secs=10)

    # Then `slots` holders were left at each round's end, the rest replaced, each naming its
    # replacement
    assert held_seen == [slots] * 3
    ended = {i: pg_ledger.occurrences.get_occurrence(i) for i in ids}
    assert sorted(o.status for o in ended.values()) == sorted(
        [COMPLETED] * slots + [CANCELLED] * (len(ids) - slots)
    )
    for gone in replaced:
        assert (ended[gone].error_message or "").removeprefix("replaced by ") in ended
    # …and each replaced attempt stopped at its next beat: its renewals were answered "yours"
    # until the replacement and "not yours" exactly once, after which it renewed nothing, and
    # it reported itself superseded, having written nothing (its row is still as the
    # replacement left it)
    by_id = {r.occurrence_id: r for r in reports}
    renewed_before: list[bool] = []
    for gone in replaced:
        answers = recording.answers(gone)
        assert answers == [True] * (len(answers) - 1) + [False], (gone, answers)
        renewed_before.append(len(answers) > 1)
        assert (by_id[gone].outcome, by_id[gone].status) == ("superseded", None)
        assert ended[gone].completed_at is not None and ended[gone].claimed_until is None
    assert {by_id[i].status for i in ids if i not in replaced} == {COMPLETED}
    assert any(renewed_before), "some were replaced after holding the key for a beat or more"


class _RecordedRenewals:
    """The real ledger, recording every renewal's answer by occurrence."""

    def __init__(self, ledger: Ledger) -> None:
        self._ledger = ledger
        self._answers: list[tuple[str, bool]] = []
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ledger.attempts, name)

    def renew(self, occurrence_id: str, *args: Any, **kwargs: Any) -> bool:
        answer = self._ledger.attempts.renew(occurrence_id, *args, **kwargs)
        with self._lock:
            self._answers.append((occurrence_id, answer))
        return answer

    def answers(self, occurrence_id: str) -> list[bool]:
        with self._lock:
            return [answer for i, answer in self._answers if i == occurrence_id]


def _all_settled(ledger: Ledger, ids: list[str]) -> bool:
    return all(
        ledger.occurrences.get_occurrence(i).status in (COMPLETED, SKIPPED_SINGLETON) for i in ids
    )


def _none_pending(ledger: Ledger, ids: list[str]) -> bool:
    return all(ledger.occurrences.get_occurrence(i).status in (RUNNING, CANCELLED) for i in ids)
