"""A claim leases due work: `pending` and due, or leased under a lease that has expired
(crash recovery), oldest first, bounded, `attempt + 1`. A live lease is never claimable,
and no row is ever leased to two claimants. What the in-memory fake shares is in
test_claim_port.py; here, what needs SQL: starts, the statement itself, concurrency."""

from __future__ import annotations

import threading
from collections import Counter
from datetime import timedelta

import pytest

from cronledger.ledger import CLAIMED, Ledger, OccurrenceFilter
from tests.ledger.helpers import (
    LEASE,
    claim_one,
    expire_claim,
    row,
    seed_due,
    sent_statements,
    start,
)


def test_a_running_occurrence_whose_lease_expired_is_reclaimed(ledger: Ledger) -> None:
    due = seed_due(ledger)
    mine = claim_one(ledger, "node-a")
    assert start(ledger, mine, "node-a").started
    assert ledger.attempts.claim("node-b", 10, LEASE).leased == [], "a live running lease holds"

    # node-a dies mid-run: its lease stops moving and runs out
    expire_claim(ledger, due.id)

    taken = claim_one(ledger, "node-b")
    assert (taken.status, taken.claimed_by, taken.attempt) == (CLAIMED, "node-b", 2)


def test_the_postgresql_claim_locks_with_skip_locked_and_binds_its_limit(
    pg_ledger: Ledger,
) -> None:
    with sent_statements(pg_ledger.engine) as statements:
        pg_ledger.attempts.claim("node-shape", 37, LEASE)

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
    ledger.occurrences.insert_occurrences(
        row(now - timedelta(seconds=total - i), f"ch-{i % 7}") for i in range(total)
    )
    claims: dict[str, list[str]] = {}
    errors: list[BaseException] = []
    gate = threading.Barrier(8)

    def drain(claimant: str) -> None:
        mine = claims.setdefault(claimant, [])
        try:
            gate.wait()
            while batch := ledger.attempts.claim(claimant, 25, LEASE).leased:
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
    stored = ledger.occurrences.list_occurrences(OccurrenceFilter(status=CLAIMED, limit=1000))
    assert stored.total == total
    owner = {i: claimant for claimant, ids in claims.items() for i in ids}
    for page_offset in range(0, total, 1000):
        page = ledger.occurrences.list_occurrences(OccurrenceFilter(limit=1000, offset=page_offset))
        for occurrence in page.data:
            assert occurrence.attempt == 1
            assert occurrence.claimed_by == owner[occurrence.id]
