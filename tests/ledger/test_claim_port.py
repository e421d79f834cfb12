"""The claim port's behaviour, on PostgreSQL, SQLite and the in-memory fake alike: the fake
that the loops' pacing tests run on passes every test here, so it cannot drift from the SQL.

A claim leases due work (`pending` and due, or a lease that expired), oldest first,
bounded, `attempt + 1`; a live lease is never claimable; an expired lease on its last attempt
is settled `failed` by the claim; only the holder may hand a claim back."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest

from cronledger.ledger import CLAIMED, FAILED, PENDING, Ledger
from tests.fake_ledger import FakeLedger
from tests.ledger.helpers import LEASE, empty_tables, expire_claim, row


@dataclass
class Backend:
    """A ledger under test (a `ClaimPort` that can also seed and read rows), and how to make
    a lease run out on it."""

    ledger: Any
    expire: Callable[[str], None]

    def seed_due(self, ago: timedelta = timedelta(seconds=30), **fields: Any) -> str:
        new = row(self.ledger.db_now() - ago, **fields)
        assert self.ledger.occurrences.insert_occurrence(new)
        return new.id

    def claim_one(self, claimant: str) -> Any:
        [claimed] = self.ledger.attempts.claim(claimant, 1, LEASE).leased
        return claimed


@pytest.fixture(params=["postgresql", "sqlite", "fake"])
def backend(request: pytest.FixtureRequest) -> Backend:
    if request.param == "fake":
        fake = FakeLedger()
        return Backend(fake, fake.expire_lease)
    real: Ledger = request.getfixturevalue(
        f"{'pg' if request.param == 'postgresql' else 'sqlite'}_ledger"
    )
    if request.param == "postgresql":
        empty_tables(real)
    return Backend(real, lambda occurrence_id: expire_claim(real, occurrence_id))


def test_a_claim_leases_the_row_and_blocks_a_second_claimant(backend: Backend) -> None:
    ledger = backend.ledger
    due = backend.seed_due()
    before = ledger.db_now()

    [claimed] = ledger.attempts.claim("node-a", 10, LEASE).leased

    assert claimed.id == due
    assert (claimed.status, claimed.claimed_by) == (CLAIMED, "node-a")
    # The attempt counter moves on the claim, so it counts attempts even when a node dies
    # before settling one.
    assert claimed.attempt == 1
    assert claimed.claimed_until is not None
    lease = (claimed.claimed_until - before).total_seconds()
    assert LEASE - 1 <= lease <= LEASE + 5, lease
    assert ledger.occurrences.get_occurrence(due) == claimed, "the returned row is the stored row"
    assert ledger.attempts.claim("node-b", 10, LEASE).leased == [], (
        "a live lease must not be claimable"
    )


def test_an_expired_claim_is_reclaimable_as_the_next_attempt(backend: Backend) -> None:
    ledger = backend.ledger
    due = backend.seed_due()
    backend.claim_one("node-a")
    backend.expire(due)

    reclaimed = backend.claim_one("node-b")

    assert (reclaimed.id, reclaimed.claimed_by) == (due, "node-b")
    assert reclaimed.attempt == 2, "the takeover is a second attempt"
    assert ledger.attempts.claim("node-c", 10, LEASE).leased == [], "node-b's live lease holds"


def test_an_expired_lease_on_its_last_attempt_comes_back_abandoned(backend: Backend) -> None:
    # Given an occurrence allowed one attempt, whose lease ran out
    ledger = backend.ledger
    due = backend.seed_due(max_attempts=1)
    backend.claim_one("node-a")
    backend.expire(due)

    # When the next claim finds it
    result = ledger.attempts.claim("node-b", 10, LEASE)

    # Then it is settled failed, not leased again, and says why
    assert result.leased == []
    [abandoned] = result.abandoned
    stored = ledger.occurrences.get_occurrence(due)
    assert abandoned == stored
    assert (stored.status, stored.attempt, stored.claimed_until) == (FAILED, 1, None)
    assert stored.error_message == "abandoned: lease expired after 1 attempt"
    assert stored.completed_at is not None
    assert ledger.attempts.claim("node-c", 10, LEASE).abandoned == [], "it is abandoned once"


def test_an_occurrence_due_in_the_future_is_not_claimed(backend: Backend) -> None:
    ledger = backend.ledger
    later = row(ledger.db_now() + timedelta(hours=1))
    assert ledger.occurrences.insert_occurrence(later)

    assert ledger.attempts.claim("node-a", 10, LEASE).leased == []
    assert ledger.occurrences.get_occurrence(later.id).status == PENDING


def test_the_claim_batch_is_bounded_and_oldest_first(backend: Backend) -> None:
    ledger = backend.ledger
    now = ledger.db_now()
    rows = [row(now - timedelta(minutes=10 - i)) for i in range(5)]
    # Inserted newest first, so insertion order cannot pass for due order.
    assert ledger.occurrences.insert_occurrences(reversed(rows)) == 5

    claimed = ledger.attempts.claim("node-a", 2, LEASE).leased

    assert [o.id for o in claimed] == [rows[0].id, rows[1].id]
    assert [ledger.occurrences.get_occurrence(r.id).status for r in rows[2:]] == [PENDING] * 3
    assert ledger.attempts.claim("node-a", 0, LEASE).leased == []


def test_a_released_claim_returns_to_pending_and_is_claimable_again(backend: Backend) -> None:
    ledger = backend.ledger
    due = backend.seed_due()
    mine = backend.claim_one("node-a")

    assert not ledger.attempts.release_claim(mine.id, "node-b"), "only the holder may release"
    assert ledger.attempts.release_claim(mine.id, "node-a")

    released = ledger.occurrences.get_occurrence(due)
    assert (released.status, released.claimed_by, released.claimed_until) == (PENDING, None, None)
    assert released.attempt == 0, "a deferral gives its attempt back"
    again = backend.claim_one("node-b")
    assert (again.id, again.attempt) == (due, 1)
    assert not ledger.attempts.release_claim(mine.id, "node-a"), "node-a no longer holds it"


def test_in_flight_counts_live_leases_only(backend: Backend) -> None:
    # Given two live leases and one that expired
    ledger = backend.ledger
    for seconds in (30, 20, 10):
        backend.seed_due(ago=timedelta(seconds=seconds), channel_id=f"ch-{seconds}")
    backend.claim_one("node-a")
    backend.claim_one("node-b")
    expired = backend.claim_one("node-c")
    backend.expire(expired.id)

    assert ledger.reporting.in_flight_count() == 2
    assert ledger.attempts.release_claim(expired.id, "node-c")
    assert ledger.reporting.in_flight_count() == 2, (
        "handing back an expired lease changes nothing live"
    )


def test_the_wait_until_the_next_claimable_row_follows_the_database_clock(
    backend: Backend,
) -> None:
    ledger = backend.ledger
    assert ledger.reporting.seconds_until_next_due() is None, "nothing at all: nothing to wait for"

    assert ledger.occurrences.insert_occurrence(row(ledger.db_now() + timedelta(minutes=10)))
    wait = ledger.reporting.seconds_until_next_due()
    assert wait is not None and 590 <= wait <= 600, wait

    # A lease is the next thing to become claimable if it lapses first.
    backend.seed_due(channel_id="ch-2")
    backend.claim_one("node-a")
    wait = ledger.reporting.seconds_until_next_due()
    assert wait is not None and LEASE - 5 <= wait <= LEASE, wait

    backend.seed_due(channel_id="ch-3")
    assert ledger.reporting.seconds_until_next_due() == 0.0, "a due row is claimable now"


def test_job_heartbeats_record_the_last_successful_pass(backend: Backend) -> None:
    ledger = backend.ledger
    assert ledger.reporting.job_heartbeats() == {}
    ledger.reporting.record_job_ok("claim")

    beat = ledger.reporting.job_heartbeats()["claim"]
    assert abs((ledger.db_now() - beat).total_seconds()) < 5
