"""The claim loop's pacing, on the in-memory ledger and a fake clock: no database, no sleeps,
and every figure exact.

- With no room to claim into (every local worker busy, or `max_in_flight` reached) it waits
  for room instead of asking again at once: due rows stay due, so "sleep until the next due
  instant" alone would never sleep. It claims as soon as room appears.
- On Lambda (`while_due`) it runs only while something is due in the invocation and
  otherwise returns; without it, it polls until its deadline, never past it.
- While the database is away it backs off, logging the outage's start and end once each, and
  runs again at the first probe that finds the database back, not when the backoff runs out.
"""

from __future__ import annotations

import itertools
import logging
from datetime import timedelta

import pytest

from cronledger.claim import NO_ROOM_NAP_SECS, WORKER_WAIT_SECS, run_claim_loop
from cronledger.invokers import OneByOne
from cronledger.ledger import CLAIMED
from cronledger.settings import Settings
from tests.fake_ledger import FakeClock, FakeLedger
from tests.ledger.helpers import row

SETTINGS = Settings(poll_interval_ms=50, misfire_grace_secs=1)
RUN_SECS = 0.6
#: An outage of one second: tries at 0, 50, 150, 350 and 750 ms fail, and without a probe
#: the next would come at 1,550 ms.
AWAY_SECS = 1.0
BACKOFF_RUNS_OUT_SECS = 1.55
#: Float sums of the waits and the fake clock's microsecond steps: far below any step the
#: loop takes.
EPS = 1e-4


class Collect(OneByOne):
    """Takes every dispatch, noting when it came (the fake clock's time)."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.dispatched: list[str] = []
        self.at: list[float] = []

    def dispatch(self, occurrence_id: str, claimant: str) -> None:
        self.dispatched.append(occurrence_id)
        self.at.append(self.clock.now)


@pytest.fixture
def ledger() -> FakeLedger:
    return FakeLedger()


def seed(ledger: FakeLedger, *seconds_from_now: float) -> list[str]:
    now = ledger.db_now()
    rows = [row(now + timedelta(seconds=s)) for s in seconds_from_now]
    assert ledger.occurrences.insert_occurrences(rows) == len(rows)
    return [r.id for r in rows]


def test_a_claim_loop_whose_workers_are_all_busy_waits_without_asking_the_database(
    ledger: FakeLedger,
) -> None:
    # Given a backlog of due rows, and a process whose workers are all busy
    seed(ledger, -1, -2, -3, -4, -5)
    ledger.calls.clear()
    clock = ledger.time
    invoker = Collect(clock)
    started = clock.now

    # When the claim loop runs for a while with no room
    run_claim_loop(
        ledger, Settings(), invoker, until=started + RUN_SECS, room=lambda: 0, clock=clock.clock
    )

    # Then it claimed nothing, asked the database nothing, and waited for a worker in steps
    # rather than spinning, up to its deadline and not past it
    assert invoker.dispatched == []
    assert ledger.calls == []
    assert clock.waits and all(w <= WORKER_WAIT_SECS + EPS for w in clock.waits)
    assert len(clock.waits) <= RUN_SECS / WORKER_WAIT_SECS + 2
    assert clock.now == pytest.approx(started + RUN_SECS, abs=EPS)


def test_a_claim_loop_at_max_in_flight_naps_instead_of_spinning(ledger: FakeLedger) -> None:
    # Given two leases in flight, an instance allowed two, and a backlog still due
    seed(ledger, -10, -20)
    assert len(ledger.attempts.claim("elsewhere", 2, 60).leased) == 2
    seed(ledger, -1, -2, -3)
    ledger.calls.clear()
    clock = ledger.time
    invoker = Collect(clock)

    # When the claim loop runs for a while
    settings = Settings(max_in_flight=2)
    run_claim_loop(ledger, settings, invoker, until=clock.now + RUN_SECS, clock=clock.clock)

    # Then it claimed nothing and looked about once per nap, not thousands of times
    assert invoker.dispatched == []
    assert [n for n, _ in ledger.calls if n == "claim"] == []
    rounds = RUN_SECS / NO_ROOM_NAP_SECS
    assert len(ledger.calls) <= 3 * (rounds + 1), f"{len(ledger.calls)} calls in {RUN_SECS} s"
    assert all(w <= NO_ROOM_NAP_SECS + EPS for w in clock.waits)


def test_a_claim_loop_claims_as_soon_as_room_appears(ledger: FakeLedger) -> None:
    # Given a backlog, and workers that come free a moment after the loop starts
    ids = seed(ledger, -1, -2, -3)
    clock = ledger.time
    free_at = clock.now + 0.2
    invoker = Collect(clock)

    # When the loop runs past that moment
    run_claim_loop(
        ledger,
        Settings(),
        invoker,
        until=clock.now + 0.5,
        room=lambda: 10 if clock.now >= free_at else 0,
        clock=clock.clock,
    )

    # Then the backlog was dispatched within one look at the workers of their coming free
    assert sorted(invoker.dispatched) == sorted(ids)
    assert all(free_at <= at <= free_at + WORKER_WAIT_SECS + EPS for at in invoker.at)


def test_a_claim_loop_with_nothing_due_in_its_invocation_returns_at_once(
    ledger: FakeLedger,
) -> None:
    # Given an occurrence due in an hour, and an invocation with a minute left
    seed(ledger, 3600)
    clock = ledger.time
    started = clock.now

    dispatched = run_claim_loop(
        ledger, SETTINGS, Collect(clock), started + 60, while_due=True, clock=clock.clock
    )

    # Then it returned without waiting at all
    assert dispatched == 0
    assert clock.waits == [] and clock.now == started


def test_a_claim_loop_stays_for_what_falls_due_in_its_invocation_then_returns(
    ledger: FakeLedger,
) -> None:
    # Given one occurrence due now and one due in a second, and an invocation with half a
    # minute left (less than a lease: the leases it takes do not come due in it)
    clock = ledger.time
    started = clock.now
    _, soon = seed(ledger, -1, 1)
    invoker = Collect(clock)

    dispatched = run_claim_loop(
        ledger, SETTINGS, invoker, started + 30, while_due=True, clock=clock.clock
    )

    # Then it dispatched both, the second once due, and returned instead of polling on
    assert dispatched == 2 and invoker.dispatched[-1] == soon
    assert invoker.at[-1] - started >= 1.0 - EPS
    assert clock.now - started < 1.0 + SETTINGS.poll_interval.total_seconds()
    assert ledger.occurrences.get_occurrence(soon).status == CLAIMED


def test_without_while_due_a_claim_loop_polls_until_its_deadline(ledger: FakeLedger) -> None:
    clock = ledger.time
    started = clock.now

    run_claim_loop(ledger, SETTINGS, Collect(clock), started + 0.5, clock=clock.clock)

    # It polled every poll interval until the deadline, one claim a poll, and stopped there
    poll = SETTINGS.poll_interval.total_seconds()
    assert clock.now == pytest.approx(started + 0.5, abs=EPS)
    assert [w for w in clock.waits if w > EPS] == pytest.approx([poll] * 10, abs=EPS)
    assert [n for n, _ in ledger.calls].count("claim") == len(clock.waits)


def test_a_claim_loop_backs_off_while_the_database_is_away_and_logs_it_twice(
    ledger: FakeLedger, caplog: pytest.LogCaptureFixture
) -> None:
    # Given one due occurrence, and a database away for the next second
    seed(ledger, -1)
    ledger.calls.clear()
    clock = ledger.time
    started = clock.now
    ledger.down = True

    def meanwhile(now: float) -> None:
        ledger.down = now - started < AWAY_SECS - EPS

    clock.on_wait = meanwhile
    invoker = Collect(clock)

    with caplog.at_level(logging.INFO, logger="cronledger"):
        run_claim_loop(ledger, SETTINGS, invoker, started + 30, while_due=True, clock=clock.clock)

    # Then it tried at 0, 50, 150, 350 and 750 ms (its probes in between failing too, and
    # counting as no try), went on at the first probe that found the database back instead
    # of waiting out 800 ms more, and said so twice
    assert len(invoker.dispatched) == 1
    tries = [at - started for name, at in ledger.failed if name == "in_flight_count"]
    assert tries == pytest.approx([0.0, 0.05, 0.15, 0.35, 0.75], abs=EPS)
    probes = [at - started for name, at in ledger.failed if name == "db_now"]
    assert all(
        b - a == pytest.approx(0.05, abs=EPS) for a, b in itertools.pairwise(probes) if b < 0.75
    )
    served = ledger.calls[0][1] - started
    assert AWAY_SECS - EPS <= served < AWAY_SECS + SETTINGS.poll_interval.total_seconds()
    assert served < BACKOFF_RUNS_OUT_SECS - 0.1
    outage = [r.getMessage() for r in caplog.records if "database" in r.getMessage()]
    assert outage == [
        "claim: the database is unavailable (connection refused); retrying with backoff up to 30 s",
        "claim: the database is back after 5 failed tries",
    ]
