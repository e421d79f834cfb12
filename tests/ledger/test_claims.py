"""A claim leases due work: `pending` and due, or leased under a lease that has expired
(crash recovery), oldest first, bounded, `attempt + 1`. A live lease is never claimable,
and no row is ever leased to two claimants."""

from __future__ import annotations

import threading
from collections import Counter
from datetime import timedelta

import pytest

from cronledger.ledger import CLAIMED, PENDING, Ledger, OccurrenceFilter
from tests.ledger.helpers import (
    LEASE,
    claim_one,
    expire_claim,
    row,
    seed_due,
    sent_statements,
    start,
)


def test_a_claim_leases_the_row_and_blocks_a_second_claimant(ledger: Ledger) -> None:
    due = seed_due(ledger)
    before = ledger.db_now()

    [claimed] = ledger.claim_due("node-a", 10, LEASE)

    assert claimed.id == due.id
    assert (claimed.status, claimed.claimed_by) == (CLAIMED, "node-a")
    # The attempt counter moves on the claim, so it counts attempts even when a node dies
    # before settling one.
    assert claimed.attempt == 1
    assert claimed.claimed_until is not None
    lease = (claimed.claimed_until - before).total_seconds()
    assert LEASE - 1 <= lease <= LEASE + 5, lease
    assert ledger.get_occurrence(due.id) == claimed, "the returned row is the stored row"
    assert ledger.claim_due("node-b", 10, LEASE) == [], "a live lease must not be claimable"


def test_an_expired_claim_is_reclaimable_as_the_next_attempt(ledger: Ledger) -> None:
    due = seed_due(ledger)
    claim_one(ledger, "node-a")
    expire_claim(ledger, due.id)

    reclaimed = claim_one(ledger, "node-b")

    assert (reclaimed.id, reclaimed.claimed_by) == (due.id, "node-b")
    assert reclaimed.attempt == 2, "the takeover is a second attempt"
    assert ledger.claim_due("node-c", 10, LEASE) == [], "node-b's live lease holds"


def test_a_running_occurrence_whose_lease_expired_is_reclaimed(ledger: Ledger) -> None:
    due = seed_due(ledger)
    mine = claim_one(ledger, "node-a")
    assert start(ledger, mine, "node-a").started
    assert ledger.claim_due("node-b", 10, LEASE) == [], "a live running lease holds"

    # node-a dies mid-run: its lease stops moving and runs out
    expire_claim(ledger, due.id)

    taken = claim_one(ledger, "node-b")
    assert (taken.status, taken.claimed_by, taken.attempt) == (CLAIMED, "node-b", 2)


def test_an_occurrence_due_in_the_future_is_not_claimed(ledger: Ledger) -> None:
    later = row(ledger.db_now() + timedelta(hours=1))
    assert ledger.insert_occurrence(later)

    assert ledger.claim_due("node-a", 10, LEASE) == []
    assert ledger.get_occurrence(later.id).status == PENDING


def test_the_claim_batch_is_bounded_and_oldest_first(ledger: Ledger) -> None:
    now = ledger.db_now()
    rows = [row(now - timedelta(minutes=10 - i)) for i in range(5)]
    # Inserted newest first, so insertion order cannot pass for due order.
    assert ledger.insert_occurrences(reversed(rows)) == 5

    claimed = ledger.claim_due("node-a", 2, LEASE)

    assert [o.id for o in claimed] == [rows[0].id, rows[1].id]
    assert ledger.pending_count() == 3
    assert ledger.claim_due("node-a", 0, LEASE) == []


def test_a_released_claim_returns_to_pending_and_is_claimable_again(ledger: Ledger) -> None:
    due = seed_due(ledger)
    mine = claim_one(ledger, "node-a")

    assert not ledger.release_claim(mine.id, "node-b"), "only the holder may release"
    assert ledger.release_claim(mine.id, "node-a")

    released = ledger.get_occurrence(due.id)
    assert (released.status, released.claimed_by, released.claimed_until) == (PENDING, None, None)
    assert released.attempt == 0, "a deferral gives its attempt back"
    again = claim_one(ledger, "node-b")
    assert (again.id, again.attempt) == (due.id, 1)
    assert not ledger.release_claim(mine.id, "node-a"), "node-a no longer holds it"


def test_the_postgresql_claim_locks_with_skip_locked_and_binds_its_limit(
    pg_ledger: Ledger,
) -> None:
    with sent_statements(pg_ledger.engine) as statements:
        pg_ledger.claim_due("node-shape", 37, LEASE)

    [(sql, params)] = [s for s in statements if "UPDATE cron_occurrences" in s[0]]
    assert "FOR UPDATE SKIP LOCKED" in sql
    assert "RETURNING" in sql
    assert "37" not in sql, "the limit must travel as a bound value"
    assert 37 in params


@pytest.mark.slow
def test_eight_claimers_draining_two_thousand_rows_claim_each_exactly_once(
    ledger: Ledger,
) -> None:
    # Given two thousand due occurrences
    now = ledger.db_now()
    total = 2000
    ledger.insert_occurrences(
        row(now - timedelta(seconds=total - i), f"ch-{i % 7}") for i in range(total)
    )
    claims: dict[str, list[str]] = {}
    errors: list[BaseException] = []
    gate = threading.Barrier(8)

    def drain(claimant: str) -> None:
        mine = claims.setdefault(claimant, [])
        try:
            gate.wait()
            while batch := ledger.claim_due(claimant, 25, LEASE):
                mine.extend(o.id for o in batch)
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    # When eight claimers drain them concurrently
    threads = [threading.Thread(target=drain, args=(f"node-{n}",)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    # Then every row was claimed exactly once, by the claimant the row names
    assert errors == []
    counted = Counter(i for ids in claims.values() for i in ids)
    assert len(counted) == total
    assert set(counted.values()) == {1}
    stored = ledger.list_occurrences(OccurrenceFilter(status=CLAIMED, limit=1000))
    assert stored.total == total
    owner = {i: claimant for claimant, ids in claims.items() for i in ids}
    for page_offset in range(0, total, 1000):
        page = ledger.list_occurrences(OccurrenceFilter(limit=1000, offset=page_offset))
        for occurrence in page.data:
            assert occurrence.attempt == 1
            assert occurrence.claimed_by == owner[occurrence.id]
