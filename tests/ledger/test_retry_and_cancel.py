"""Retry puts an unsuccessful end back to `pending` under the same identity; cancel ends a
live occurrence and frees what it holds. Both answer 404 and 409 apart."""

from __future__ import annotations

import pytest

from cronledger.errors import Conflict, NotFound
from cronledger.ledger import (
    CANCELLED,
    COMPLETED,
    FAILED,
    PENDING,
    SKIPPED_MISFIRE,
    SKIPPED_SINGLETON,
    Ledger,
)
from tests.ledger.helpers import (
    LEASE,
    active_channel,
    claim_one,
    held_slots,
    row,
    seed_due,
    settle,
    start,
)


def test_retry_keeps_the_occurrence_identity(ledger: Ledger) -> None:
    # Given an occurrence whose first attempt failed while holding the key
    due = seed_due(ledger, active_channel(ledger).channel_id)
    mine = claim_one(ledger, "node-a")
    token = start(ledger, mine, "node-a", "key").fencing_token
    assert settle(ledger, due.id, "node-a", FAILED, fencing_token=token, error_message="boom")

    # When it is retried
    requeued = ledger.occurrences.requeue(due.id)

    # Then it is the same occurrence, pending again with the last attempt's traces cleared
    assert requeued.id == due.id
    assert requeued.scheduled_for == due.scheduled_for, "a retry is the same instant"
    assert requeued.status == PENDING
    assert requeued.error_message is None and requeued.completed_at is None
    assert requeued.claimed_by is None and requeued.fencing_token is None
    assert ledger.occurrences.get_occurrence(due.id) == requeued
    # …and claimable again, as its second attempt
    assert claim_one(ledger, "node-b").attempt == 2


def test_a_completed_occurrence_cannot_be_retried(ledger: Ledger) -> None:
    due = seed_due(ledger)
    mine = claim_one(ledger, "node-a")
    assert start(ledger, mine, "node-a").started
    assert settle(ledger, due.id, "node-a", COMPLETED)

    with pytest.raises(Conflict, match="trigger"):
        ledger.occurrences.requeue(due.id)
    assert ledger.occurrences.get_occurrence(due.id).status == COMPLETED


def test_live_occurrences_cannot_be_retried_and_unknown_ones_are_not_found(
    ledger: Ledger,
) -> None:
    due = seed_due(ledger)
    with pytest.raises(Conflict):
        ledger.occurrences.requeue(due.id)
    with pytest.raises(NotFound):
        ledger.occurrences.requeue("no-such-occurrence")


def test_a_skipped_misfire_and_a_cancelled_occurrence_can_be_retried(ledger: Ledger) -> None:
    channel_id = active_channel(ledger).channel_id
    now = ledger.db_now()
    skipped = row(now, channel_id, status=SKIPPED_MISFIRE, error_message="skipped 2")
    assert ledger.occurrences.insert_occurrence(skipped)
    cancelled = seed_due(ledger, channel_id)
    ledger.occurrences.cancel(cancelled.id)

    assert ledger.occurrences.requeue(skipped.id).status == PENDING
    assert ledger.occurrences.requeue(cancelled.id).status == PENDING


def test_cancelling_a_pending_occurrence_takes_it_out_of_the_queue(ledger: Ledger) -> None:
    due = seed_due(ledger)

    cancelled = ledger.occurrences.cancel(due.id)

    assert cancelled.status == CANCELLED
    assert cancelled.completed_at is not None
    assert ledger.occurrences.get_occurrence(due.id) == cancelled
    assert ledger.attempts.claim("node-a", 10, LEASE).leased == []


def test_cancelling_a_running_occurrence_frees_its_slot_and_fences_its_attempt(
    ledger: Ledger,
) -> None:
    # Given a running attempt that holds the key
    due = seed_due(ledger)
    mine = claim_one(ledger, "node-a")
    token = start(ledger, mine, "node-a", "key").fencing_token
    assert held_slots(ledger, "key") == 1

    # When an operator cancels it
    cancelled = ledger.occurrences.cancel(due.id)

    # Then it is cancelled with no claim, the key is free, and the attempt's next beat,
    # settle or release finds it has lost ownership
    assert (cancelled.status, cancelled.claimed_by, cancelled.claimed_until) == (
        CANCELLED,
        None,
        None,
    )
    assert held_slots(ledger, "key") == 0
    assert ledger.reporting.in_flight_count() == 0
    assert not ledger.attempts.renew(due.id, "node-a", token, LEASE)
    assert not settle(ledger, due.id, "node-a", COMPLETED, fencing_token=token)
    assert ledger.occurrences.get_occurrence(due.id).status == CANCELLED


def test_cancelling_a_claimed_occurrence_makes_its_start_lost(ledger: Ledger) -> None:
    due = seed_due(ledger)
    mine = claim_one(ledger, "node-a")

    ledger.occurrences.cancel(due.id)

    assert start(ledger, mine, "node-a", "key").outcome == "lost"
    assert held_slots(ledger, "key") == 0


def test_a_finished_occurrence_cannot_be_cancelled_and_an_unknown_one_is_not_found(
    ledger: Ledger,
) -> None:
    # Given a completed occurrence beside a running one that holds the key
    done = seed_due(ledger)
    claim_one(ledger, "node-a")
    assert settle(ledger, done.id, "node-a", SKIPPED_SINGLETON, error_message="busy")
    live = seed_due(ledger, channel_id="other")
    mine = claim_one(ledger, "node-b")
    assert start(ledger, mine, "node-b", "key").started

    # When cancelling the finished one, or one that does not exist
    with pytest.raises(Conflict, match="skipped_singleton"):
        ledger.occurrences.cancel(done.id)
    with pytest.raises(NotFound):
        ledger.occurrences.cancel("no-such-occurrence")

    # Then nothing else moved
    assert ledger.occurrences.get_occurrence(done.id).status == "skipped_singleton"
    assert ledger.occurrences.get_occurrence(live.id).status == "running"
    assert held_slots(ledger, "key") == 1
