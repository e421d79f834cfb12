"""The attempt log, on PostgreSQL and SQLite: a row per started attempt, ended by whatever
ends the attempt (a settle, a cancel, a replace, a claim finding its lease ran out), and
deleted with its occurrence."""

from __future__ import annotations

from datetime import timedelta

from cronledger.ledger import (
    ABANDONED,
    CANCELLED,
    COMPLETED,
    FAILED,
    Ledger,
    SingletonSpec,
)
from tests.ledger.helpers import (
    LEASE,
    active_channel,
    age_completion,
    claim_one,
    expire_claim,
    reclaim,
    seed_due,
    settle,
    start,
    start_attempt,
)


def test_a_started_attempt_is_on_record_open_until_it_is_settled(ledger: Ledger) -> None:
    # Given an occurrence claimed and started by node-a
    due = seed_due(ledger)
    claimed = claim_one(ledger, "node-a")
    started = start(ledger, claimed, "node-a")

    # When its attempts are read while it runs
    [running] = ledger.occurrences.attempts_of(due.id)

    # Then the open attempt says who runs it since when, and nothing of its end
    assert (running.number, running.claimant, running.started_at) == (
        1,
        "node-a",
        started.started_at,
    )
    assert (running.ended_at, running.outcome, running.duration_ms) == (None, None, None)


def test_a_failure_retried_then_completed_leaves_both_attempts_with_their_ends(
    ledger: Ledger,
) -> None:
    # Given an attempt that failed with attempts left, and a second one that completed
    due = seed_due(ledger)
    start(ledger, claim_one(ledger, "node-a"), "node-a")
    assert settle(ledger, due.id, "node-a", FAILED, error_message="boom", retry_in=0)
    start(ledger, reclaim(ledger, due.id, "node-b"), "node-b")
    assert settle(ledger, due.id, "node-b", COMPLETED)

    # When the attempts are read back
    attempts = ledger.occurrences.attempts_of(due.id)

    # Then each has its claimant, outcome and error, first to last
    assert [(a.number, a.claimant, a.outcome, a.error_message) for a in attempts] == [
        (1, "node-a", FAILED, "boom"),
        (2, "node-b", COMPLETED, None),
    ]
    assert all(a.ended_at is not None for a in attempts)


def test_a_lease_that_ran_out_is_recorded_abandoned_by_the_claim_that_takes_it_again(
    ledger: Ledger,
) -> None:
    # Given a started attempt whose executor died, its lease run out
    due = seed_due(ledger)
    start(ledger, claim_one(ledger, "node-a"), "node-a")
    expire_claim(ledger, due.id)

    # When another node claims it again
    again = claim_one(ledger, "node-b")

    # Then the first attempt is ended abandoned, and the second is not yet on record
    assert again.attempt == 2
    [first] = ledger.occurrences.attempts_of(due.id)
    assert (first.outcome, first.ended_at is not None) == (ABANDONED, True)
    assert first.error_message is not None and "lease ran out" in first.error_message


def test_cancelling_a_running_occurrence_ends_its_attempt_cancelled(ledger: Ledger) -> None:
    # Given a running attempt
    due = seed_due(ledger)
    start(ledger, claim_one(ledger, "node-a"), "node-a")

    # When an operator cancels it
    ledger.occurrences.cancel(due.id, by="ops", reason="wrong day")

    # Then its attempt ended cancelled, saying who and why
    [attempt] = ledger.occurrences.attempts_of(due.id)
    assert (attempt.outcome, attempt.error_message) == (CANCELLED, "cancelled by ops: wrong day")


def test_a_replaced_holder_has_its_attempt_ended_cancelled_by_the_replacement(
    ledger: Ledger,
) -> None:
    # Given one occurrence running under a `replace` key, and a second one claimed
    old = seed_due(ledger, ago=timedelta(seconds=60))
    new = seed_due(ledger, ago=timedelta(seconds=30))
    spec = SingletonSpec("key", 1, "replace")
    assert start_attempt(ledger, claim_one(ledger, "a"), "a", 1, spec, LEASE).started
    contender = claim_one(ledger, "b")
    assert contender.id == new.id

    # When the second starts, replacing the first
    assert start_attempt(ledger, contender, "b", 1, spec, LEASE).replaced == old.id

    # Then the first's attempt ended cancelled and the second's is open, with a newer token
    [replaced] = ledger.occurrences.attempts_of(old.id)
    [running] = ledger.occurrences.attempts_of(new.id)
    assert (replaced.outcome, replaced.error_message) == (CANCELLED, f"replaced by {new.id}")
    assert running.ended_at is None
    assert running.fencing_token is not None and replaced.fencing_token is not None
    assert running.fencing_token > replaced.fencing_token


def test_retention_deletes_the_attempts_with_their_occurrence(ledger: Ledger) -> None:
    # Given a completed occurrence, with its attempt on record, long past retention
    due = seed_due(ledger)
    start(ledger, claim_one(ledger, "node-a"), "node-a")
    assert settle(ledger, due.id, "node-a", COMPLETED)
    age_completion(ledger, due.id, timedelta(days=30))
    kept = seed_due(ledger, ago=timedelta(seconds=5))
    start(ledger, claim_one(ledger, "node-b"), "node-b")

    # When retention runs
    assert ledger.occurrences.delete_terminal_older_than(24) == 1

    # Then the occurrence and its attempts are gone, and the live one keeps its own
    assert ledger.occurrences.attempts_of(due.id) == []
    assert [a.claimant for a in ledger.occurrences.attempts_of(kept.id)] == ["node-b"]


def test_deleting_a_channel_deletes_its_attempts(ledger: Ledger) -> None:
    # Given a channel's occurrence with an attempt on record
    gone = active_channel(ledger, "gone")
    due = seed_due(ledger, channel_id=gone.channel_id)
    start(ledger, claim_one(ledger, "node-a"), "node-a")

    # When the channel is deleted
    ledger.channels.delete_channel(gone.channel_id)

    # Then no attempt of it is left
    assert ledger.occurrences.attempts_of(due.id) == []
