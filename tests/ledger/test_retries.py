"""No occurrence is retried without bound: an expired lease is claimed again only while the
occurrence has attempts left, and the claim settles the last one `failed` ("abandoned");
a failure with attempts left goes back to `pending` after its backoff; a manual retry
grants one more attempt, and only for an active channel."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import event

from cronledger.claim import claim_once
from cronledger.errors import Conflict
from cronledger.invokers import OneByOne
from cronledger.ledger import (
    CHANNEL_ARCHIVED,
    CHANNEL_PAUSED,
    CLAIMED,
    FAILED,
    PENDING,
    SKIPPED_SINGLETON,
    Ledger,
)
from cronledger.ledger.tables import occurrences, singletons
from cronledger.settings import Settings
from tests.ledger.helpers import (
    LEASE,
    active_channel,
    claim_one,
    empty_tables,
    expire_claim,
    expire_singleton,
    held_slots,
    open_attempt,
    row,
    seed_due,
    settle,
    start,
    start_attempt,
    upsert_cursor,
)


def test_an_executor_that_dies_every_time_is_abandoned_after_its_attempts_and_never_claimed_again(
    ledger: Ledger,
) -> None:
    # Given an occurrence allowed three attempts, whose executor takes the key and dies
    due = row(ledger.db_now() - timedelta(seconds=30), max_attempts=3)
    assert ledger.occurrences.insert_occurrence(due)
    for attempt in (1, 2, 3):
        claimed = claim_one(ledger, f"node-{attempt}")
        assert claimed.attempt == attempt
        assert start(ledger, claimed, f"node-{attempt}", "key").started
        expire_claim(ledger, due.id)  # the leases run out: no settle ever came
        expire_singleton(ledger, "key")

    # When the next claim finds its third lease expired
    result = ledger.attempts.claim("node-4", 10, LEASE)

    # Then it is settled failed by the claim, not leased a fourth time, and its slot is free
    assert result.leased == []
    [abandoned] = result.abandoned
    stored = ledger.occurrences.get_occurrence(due.id)
    assert abandoned == stored
    assert (stored.status, stored.attempt, stored.claimed_until) == (FAILED, 3, None)
    assert stored.error_message == "abandoned: lease expired after 3 attempts"
    assert stored.completed_at is not None
    assert _slot_holders(ledger, "key") == [None], "a settled row holds no slot"
    assert ledger.attempts.claim("node-5", 10, LEASE).leased == []
    assert ledger.occurrences.get_occurrence(due.id) == stored, "nothing touches it again"


def test_an_abandoned_occurrence_keeps_its_last_error(ledger: Ledger) -> None:
    # Given attempt 1 failed and went back to pending, and attempt 2 of 2 died mid-run
    due = row(ledger.db_now() - timedelta(seconds=30), max_attempts=2)
    assert ledger.occurrences.insert_occurrence(due)
    first = claim_one(ledger, "node-a")
    assert start(ledger, first, "node-a").started
    assert settle(ledger, due.id, "node-a", FAILED, error_message="HTTP 503", retry_in=0)
    second = claim_one(ledger, "node-b")
    assert (second.attempt, second.error_message) == (2, "HTTP 503")
    assert start(ledger, second, "node-b").started
    expire_claim(ledger, due.id)

    # When it is claimed again
    assert ledger.attempts.claim("node-c", 10, LEASE).leased == []

    # Then the abandonment says how many attempts, and what the last error was
    stored = ledger.occurrences.get_occurrence(due.id)
    assert stored.status == FAILED
    assert stored.error_message == "abandoned: lease expired after 2 attempts; last error: HTTP 503"


def test_one_allowed_attempt_is_abandoned_at_its_first_expiry(ledger: Ledger) -> None:
    due = row(ledger.db_now() - timedelta(seconds=30), max_attempts=1)
    assert ledger.occurrences.insert_occurrence(due)
    claim_one(ledger, "node-a")
    expire_claim(ledger, due.id)

    result = ledger.attempts.claim("node-b", 10, LEASE)

    assert [o.id for o in result.abandoned] == [due.id]
    assert (
        ledger.occurrences.get_occurrence(due.id).error_message
        == "abandoned: lease expired after 1 attempt"
    )


def test_a_claim_leases_the_due_and_settles_the_exhausted_in_one_batch(ledger: Ledger) -> None:
    # Given one exhausted expired lease beside two due rows
    now = ledger.db_now()
    exhausted = row(now - timedelta(minutes=3), "a", max_attempts=1)
    due = [row(now - timedelta(minutes=m), "b") for m in (2, 1)]
    ledger.occurrences.insert_occurrences([exhausted, *due])
    claim_one(ledger, "node-a")
    expire_claim(ledger, exhausted.id)

    result = ledger.attempts.claim("node-b", 10, LEASE)

    assert [o.id for o in result.leased] == [o.id for o in due]
    assert all(o.status == CLAIMED and o.claimed_by == "node-b" for o in result.leased)
    assert [o.id for o in result.abandoned] == [exhausted.id]


def test_a_failure_with_attempts_left_waits_out_its_backoff_then_is_claimed_again(
    ledger: Ledger,
) -> None:
    # Given a running attempt that holds a key
    due = seed_due(ledger)
    mine = claim_one(ledger, "node-a")
    token = start(ledger, mine, "node-a", "key").fencing_token
    before = ledger.db_now()

    # When it fails and is settled for a retry in 30 s
    assert settle(
        ledger, due.id, "node-a", FAILED, fencing_token=token, error_message="boom", retry_in=30
    )

    # Then it is pending again, due after the backoff, its error kept and nothing held
    waiting = ledger.occurrences.get_occurrence(due.id)
    assert (waiting.status, waiting.attempt, waiting.error_message) == (PENDING, 1, "boom")
    assert (waiting.claimed_by, waiting.claimed_until, waiting.fencing_token) == (None, None, None)
    assert (waiting.started_at, waiting.completed_at) == (None, None)
    assert waiting.scheduled_for == due.scheduled_for
    assert before + timedelta(seconds=29) < waiting.due_at < before + timedelta(seconds=35)
    assert held_slots(ledger, "key") == 0
    assert ledger.attempts.claim("node-b", 10, LEASE).leased == [], "not before its backoff"
    assert not settle(ledger, due.id, "node-a", FAILED, retry_in=1), "the attempt is over"

    # …and once the backoff has passed it is the next attempt
    ledger.occurrences.insert_occurrence(
        row(ledger.db_now(), "other")
    )  # (a neighbour, to show order)
    _due_now(ledger, due.id)
    again = ledger.attempts.claim("node-b", 1, LEASE).leased
    assert [(o.id, o.attempt) for o in again] == [(due.id, 2)]


def test_a_superseded_attempt_cannot_send_its_occurrence_back_for_a_retry(ledger: Ledger) -> None:
    due = seed_due(ledger)
    mine = claim_one(ledger, "node-a")
    assert start(ledger, mine, "node-a").started
    expire_claim(ledger, due.id)
    claim_one(ledger, "node-b")

    assert not settle(ledger, due.id, "node-a", FAILED, error_message="late", retry_in=0)
    stored = ledger.occurrences.get_occurrence(due.id)
    assert (stored.status, stored.claimed_by, stored.attempt) == (CLAIMED, "node-b", 2)


def test_only_a_failure_is_retried(ledger: Ledger) -> None:
    with pytest.raises(ValueError, match="only a failure"):
        settle(ledger, "x", "node-a", "completed", retry_in=1)


def test_a_start_refreshes_the_attempts_allowed_from_the_channel(ledger: Ledger) -> None:
    due = row(ledger.db_now(), max_attempts=3)
    assert ledger.occurrences.insert_occurrence(due)
    mine = claim_one(ledger, "node-a")

    assert start_attempt(ledger, mine, "node-a", 1, None, LEASE, max_attempts=5).started

    assert ledger.occurrences.get_occurrence(due.id).max_attempts == 5


def test_the_read_that_starts_a_plain_attempt_takes_the_attempts_from_the_channel(
    pg_ledger: Ledger,
) -> None:
    empty_tables(pg_ledger)
    channel = active_channel(pg_ledger, retry={"max_attempts": 7})
    due = row(pg_ledger.db_now(), channel.channel_id, max_attempts=3)
    assert pg_ledger.occurrences.insert_occurrence(due)
    claimed = claim_one(pg_ledger, "node-a")

    opened = open_attempt(pg_ledger, claimed.id, "node-a", LEASE, "t", misfire_grace_secs=5)

    assert opened.start is not None and opened.start.started
    assert pg_ledger.occurrences.get_occurrence(due.id).max_attempts == 7


def test_a_manual_retry_grants_one_more_attempt_to_an_exhausted_occurrence(
    ledger: Ledger,
) -> None:
    # Given an occurrence that failed its only allowed attempt
    channel = active_channel(ledger)
    due = row(ledger.db_now(), channel.channel_id, max_attempts=1)
    assert ledger.occurrences.insert_occurrence(due)
    mine = claim_one(ledger, "node-a")
    assert start(ledger, mine, "node-a").started
    assert settle(ledger, due.id, "node-a", FAILED, error_message="boom")

    # When an operator retries it
    requeued = ledger.occurrences.requeue(due.id)

    # Then it may make one more attempt, and a retry is never judged a misfire
    assert (requeued.status, requeued.attempt, requeued.max_attempts) == (PENDING, 1, 2)
    assert requeued.misfire_judged
    second = claim_one(ledger, "node-b")
    assert second.attempt == 2
    # …and only one: if that attempt's executor dies, the claim gives up on it
    expire_claim(ledger, due.id)
    assert [o.id for o in ledger.attempts.claim("node-c", 10, LEASE).abandoned] == [due.id]


def test_a_manual_retry_keeps_the_attempts_an_occurrence_still_has(ledger: Ledger) -> None:
    channel = active_channel(ledger)
    due = row(ledger.db_now(), channel.channel_id, max_attempts=3)
    assert ledger.occurrences.insert_occurrence(due)
    claim_one(ledger, "node-a")
    assert settle(ledger, due.id, "node-a", SKIPPED_SINGLETON, error_message="busy")

    assert ledger.occurrences.requeue(due.id).max_attempts == 3


@pytest.mark.parametrize("status", [CHANNEL_PAUSED, CHANNEL_ARCHIVED])
def test_an_occurrence_of_a_channel_that_is_not_active_cannot_be_retried(
    ledger: Ledger, status: str
) -> None:
    channel = active_channel(ledger)
    due = seed_due(ledger, channel.channel_id)
    claim_one(ledger, "node-a")
    assert settle(ledger, due.id, "node-a", FAILED, error_message="boom")
    ledger.channels.set_channel_status(channel.channel_id, status)

    with pytest.raises(Conflict, match=f"is {status}, not active"):
        ledger.occurrences.requeue(due.id)
    assert ledger.occurrences.get_occurrence(due.id).status == FAILED


def test_an_occurrence_whose_channel_is_gone_cannot_be_retried(ledger: Ledger) -> None:
    due = seed_due(ledger, "no-such-channel")
    claim_one(ledger, "node-a")
    assert settle(ledger, due.id, "node-a", FAILED, error_message="boom")

    with pytest.raises(Conflict, match="no longer exists"):
        ledger.occurrences.requeue(due.id)


def test_pausing_a_channel_keeps_a_retry_that_waits_out_its_backoff(ledger: Ledger) -> None:
    # Given a failed attempt waiting a minute for its retry, beside a row written ahead
    channel = active_channel(ledger)
    upsert_cursor(ledger, channel.channel_id, 1, "hash", ledger.db_now() + timedelta(hours=1))
    due = seed_due(ledger, channel.channel_id)
    ahead = row(ledger.db_now() + timedelta(minutes=5), channel.channel_id)
    assert ledger.occurrences.insert_occurrence(ahead)
    mine = claim_one(ledger, "node-a")
    assert start(ledger, mine, "node-a").started
    assert settle(ledger, due.id, "node-a", FAILED, error_message="boom", retry_in=60)

    # When the channel is paused
    ledger.channels.set_channel_status(channel.channel_id, CHANNEL_PAUSED)

    # Then the row written ahead is gone, and the admitted retry stays
    assert ledger.occurrences.get_occurrence(due.id).status == PENDING
    assert [o.id for o in ledger.occurrences.list_occurrences().data] == [due.id]


def _slot_holders(ledger: Ledger, key: str) -> list[str | None]:
    with ledger.engine.connect() as conn:
        return list(
            conn.execute(
                sa.select(singletons.c.occurrence_id).where(singletons.c.singleton_key == key)
            ).scalars()
        )


def _due_now(ledger: Ledger, occurrence_id: str) -> None:
    """Write the row's due time into the past, as if its backoff had passed."""
    with ledger.engine.begin() as conn:
        conn.execute(
            sa.update(occurrences)
            .where(occurrences.c.id == occurrence_id)
            .values(due_at=ledger.db_now() - timedelta(hours=1))
        )


class _Recording(OneByOne):
    def __init__(self) -> None:
        self.dispatched: list[str] = []

    def dispatch(self, occurrence_id: str, claimant: str) -> None:
        self.dispatched.append(occurrence_id)


def test_a_failure_freeing_an_abandoned_slot_does_not_strand_the_rows_the_claim_leased(
    ledger: Ledger,
) -> None:
    # Given an exhausted expired lease whose executor held a key, beside a due row allowed
    # one attempt
    now = ledger.db_now()
    exhausted = row(now - timedelta(minutes=3), "a", max_attempts=1)
    due = row(now - timedelta(minutes=2), "b", max_attempts=1)
    ledger.occurrences.insert_occurrences([exhausted, due])
    first = claim_one(ledger, "node-a")
    assert start(ledger, first, "node-a", "key").started
    expire_claim(ledger, exhausted.id)
    expire_singleton(ledger, "key")

    # When a claim round leases the due row and settles the exhausted one, and the
    # connection drops as the abandoned row's slot is freed (a statement after the claim's)
    def drop_slot_release(_c: Any, _cur: Any, statement: str, *_: Any) -> None:
        if statement.lstrip().upper().startswith("UPDATE CRON_SINGLETONS"):
            raise OSError("connection reset by peer")

    invoker = _Recording()
    event.listen(ledger.engine, "before_cursor_execute", drop_slot_release)
    try:
        round_ = claim_once(ledger, Settings(), invoker)
    finally:
        event.remove(ledger.engine, "before_cursor_execute", drop_slot_release)

    # Then the row it leased is still handed to an executor (its one attempt is not spent
    # on a lease nobody runs, to be abandoned at expiry without ever running), and the
    # exhausted one is settled
    assert invoker.dispatched == [due.id], round_
    assert ledger.occurrences.get_occurrence(due.id).status == CLAIMED
    assert ledger.occurrences.get_occurrence(exhausted.id).status == FAILED
