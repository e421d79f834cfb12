"""Settling writes an attempt's end, conditional on still owning it, drops the lease, and
releases the singleton slot in the same transaction."""

from __future__ import annotations

import pytest

from cronledger.ledger import COMPLETED, FAILED, SKIPPED_SINGLETON, Ledger
from tests.ledger.helpers import (
    LEASE,
    claim_one,
    held_slots,
    seed_due,
    settle,
    start,
    start_attempt,
)


def test_settling_requires_still_holding_the_claim(ledger: Ledger) -> None:
    due = seed_due(ledger)
    mine = claim_one(ledger, "node-a")
    assert start(ledger, mine, "node-a").started

    assert not settle(ledger, due.id, "node-b", COMPLETED), "a non-holder writes nothing"
    assert ledger.occurrences.get_occurrence(due.id).status == "running"

    assert settle(ledger, due.id, "node-a", COMPLETED, trace_id="trace-1", result='{"ok": true}')
    settled = ledger.occurrences.get_occurrence(due.id)
    assert settled.status == COMPLETED
    assert settled.trace_id == "trace-1"
    assert settled.result == '{"ok": true}'
    assert settled.completed_at is not None
    assert settled.claimed_until is None, "a settled row holds no lease"
    assert ledger.reporting.in_flight_count() == 0
    assert not settle(ledger, due.id, "node-a", FAILED), "a settled row cannot be settled again"


def test_settling_releases_the_singleton_in_the_same_transaction(ledger: Ledger) -> None:
    due = seed_due(ledger)
    mine = claim_one(ledger, "node-a")
    token = start(ledger, mine, "node-a", "key").fencing_token
    assert held_slots(ledger, "key") == 1

    assert settle(ledger, due.id, "node-a", FAILED, fencing_token=token, error_message="boom")

    failed = ledger.occurrences.get_occurrence(due.id)
    assert (failed.status, failed.error_message) == (FAILED, "boom")
    assert held_slots(ledger, "key") == 0, "the key is free the moment the attempt ends"


def test_a_wrong_token_settles_nothing_and_keeps_the_slot(ledger: Ledger) -> None:
    due = seed_due(ledger)
    mine = claim_one(ledger, "node-a")
    token = start(ledger, mine, "node-a", "key").fencing_token
    assert token is not None

    assert not settle(ledger, due.id, "node-a", COMPLETED, fencing_token=token + 1)

    assert ledger.occurrences.get_occurrence(due.id).status == "running"
    assert held_slots(ledger, "key") == 1


def test_a_busy_key_is_recorded_as_skipped_singleton_with_the_key_in_the_message(
    ledger: Ledger,
) -> None:
    due = seed_due(ledger)
    claim_one(ledger, "node-a")

    assert settle(
        ledger, due.id, "node-a", SKIPPED_SINGLETON, error_message="singleton key 'nightly' is held"
    )

    skipped = ledger.occurrences.get_occurrence(due.id)
    assert skipped.status == SKIPPED_SINGLETON
    assert skipped.error_message == "singleton key 'nightly' is held"
    assert skipped.claimed_until is None


def test_a_long_result_and_error_are_truncated(ledger: Ledger) -> None:
    due = seed_due(ledger)
    mine = claim_one(ledger, "node-a")
    assert start(ledger, mine, "node-a").started

    assert settle(
        ledger, due.id, "node-a", FAILED, error_message="e" * 100_000, result="r" * 100_000
    )

    failed = ledger.occurrences.get_occurrence(due.id)
    assert failed.result is not None and failed.error_message is not None
    assert len(failed.result) <= 65536 and failed.result.endswith("[truncated]")
    assert len(failed.error_message) <= 4096 and failed.error_message.startswith("eee")


def test_only_an_end_status_can_be_settled(ledger: Ledger) -> None:
    due = seed_due(ledger)
    claim_one(ledger, "node-a")

    with pytest.raises(ValueError, match="cannot settle"):
        settle(ledger, due.id, "node-a", "pending")
    assert ledger.occurrences.get_occurrence(due.id).status == "claimed"


def test_the_trace_id_is_recorded_only_by_the_holder(ledger: Ledger) -> None:
    due = seed_due(ledger)
    mine = claim_one(ledger, "node-a")

    lost = start_attempt(ledger, mine, "node-b", 1, None, LEASE, trace_id="trace-b")
    assert lost.outcome == "lost"
    assert start_attempt(ledger, mine, "node-a", 1, None, LEASE, trace_id="trace-a").started
    assert not settle(ledger, due.id, "node-b", COMPLETED, trace_id="trace-b")

    assert ledger.occurrences.get_occurrence(due.id).trace_id == "trace-a"
