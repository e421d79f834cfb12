"""What a contender for a held key does, decided inside the start's transaction:
`queue_one` makes at most one contender per key wait (it goes first when a slot frees) and
skips the rest; `replace` cancels the oldest holder and takes its slot under the next token,
so the replaced attempt's renew, settle and release write nothing. Never more than `slots`
occurrences hold a key, in any interleaving (real threads on PostgreSQL)."""

from __future__ import annotations

from datetime import timedelta

import pytest
import sqlalchemy as sa

from cronledger.ledger import (
    CANCELLED,
    CLAIMED,
    COMPLETED,
    PENDING,
    RUNNING,
    Ledger,
    Occurrence,
    SingletonSpec,
)
from cronledger.ledger.singletons import WAITER_SLOT
from cronledger.ledger.tables import singletons
from tests.ledger.helpers import (
    LEASE,
    claim_one,
    contend,
    empty_tables,
    expire_claim,
    held_slots,
    reclaim,
    release_singleton,
    row,
    settle,
    start_attempt,
)

WAIT = 30.0


def claimed(ledger: Ledger, count: int, key: str = "k") -> list[Occurrence]:
    """`count` due occurrences of distinct channels, claimed one claimant each, oldest first."""
    now = ledger.db_now()
    ledger.occurrences.insert_occurrences(
        row(now - timedelta(seconds=60 - n), f"{key}-ch-{n}") for n in range(count)
    )
    return [claim_one(ledger, f"node-{n}") for n in range(count)]


def start_as(
    ledger: Ledger, occurrence: Occurrence, policy: str, slots: int = 1, key: str = "k"
) -> str:
    spec = SingletonSpec(key, slots, policy)  # type: ignore[arg-type]
    claimant = occurrence.claimed_by or ""
    return start_attempt(ledger, occurrence, claimant, 1, spec, LEASE, wait_secs=WAIT).outcome


# --- queue_one -----------------------------------------------------------------------------


def test_queue_one_makes_the_first_contender_wait_and_skips_the_next(ledger: Ledger) -> None:
    holder, waiter, third = claimed(ledger, 3)
    before = ledger.db_now()

    outcomes = [start_as(ledger, o, "queue_one") for o in (holder, waiter, third)]

    assert outcomes == ["started", "waiting", "singleton_busy"]
    waiting = ledger.occurrences.get_occurrence(waiter.id)
    # The waiter is back to pending, due again after the wait, its attempt given back, and
    # admitted: it is no misfire when it finally starts
    assert (waiting.status, waiting.attempt, waiting.claimed_by) == (PENDING, 0, None)
    assert (
        before + timedelta(seconds=WAIT - 1) < waiting.due_at < before + timedelta(seconds=WAIT + 5)
    )
    assert waiting.misfire_judged
    assert ledger.occurrences.get_occurrence(third.id).status == CLAIMED, "busy writes nothing"
    assert held_slots(ledger, "k") == 1


def test_a_waiter_that_finds_the_key_still_held_waits_again(ledger: Ledger) -> None:
    holder, waiter = claimed(ledger, 2)
    assert start_as(ledger, holder, "queue_one") == "started"
    assert start_as(ledger, waiter, "queue_one") == "waiting"

    again = reclaim(ledger, waiter.id, "node-again")

    assert start_as(ledger, again, "queue_one") == "waiting"
    assert ledger.occurrences.get_occurrence(waiter.id).status == PENDING


def test_when_the_holder_ends_the_waiter_starts_and_its_place_is_free_again(
    ledger: Ledger,
) -> None:
    # Given a holder and a waiter
    holder, waiter, later = claimed(ledger, 3)
    assert start_as(ledger, holder, "queue_one") == "started"
    assert start_as(ledger, waiter, "queue_one") == "waiting"
    token = ledger.occurrences.get_occurrence(holder.id).fencing_token

    # When the holder completes and the waiter comes back for the slot
    assert settle(ledger, holder.id, "node-0", COMPLETED, fencing_token=token)
    again = reclaim(ledger, waiter.id, "node-w")
    assert again.attempt == 1, "the wait was not an attempt"

    # Then the waiter holds the slot, and the next contender may wait in its place
    assert start_as(ledger, again, "queue_one") == "started"
    assert ledger.occurrences.get_occurrence(waiter.id).status == RUNNING
    assert start_as(ledger, later, "queue_one") == "waiting"


def test_a_contender_does_not_jump_the_queue_when_a_slot_frees(ledger: Ledger) -> None:
    holder, waiter, late = claimed(ledger, 3)
    assert start_as(ledger, holder, "queue_one") == "started"
    assert start_as(ledger, waiter, "queue_one") == "waiting"
    token = ledger.occurrences.get_occurrence(holder.id).fencing_token
    assert settle(ledger, holder.id, "node-0", COMPLETED, fencing_token=token)

    # A contender that arrives before the waiter is back finds it first in line
    assert start_as(ledger, late, "queue_one") == "singleton_busy"
    assert held_slots(ledger, "k") == 0


def test_cancelling_the_waiter_frees_its_place(ledger: Ledger) -> None:
    holder, waiter, next_ = claimed(ledger, 3)
    assert start_as(ledger, holder, "queue_one") == "started"
    assert start_as(ledger, waiter, "queue_one") == "waiting"

    assert ledger.occurrences.cancel(waiter.id).status == CANCELLED

    assert start_as(ledger, next_, "queue_one") == "waiting"


def test_a_waiter_whose_executor_died_loses_its_place_when_the_place_expires(
    ledger: Ledger,
) -> None:
    # Given a waiter re-claimed by an executor that then died (its claim and place expire)
    holder, waiter, next_ = claimed(ledger, 3)
    assert start_as(ledger, holder, "queue_one") == "started"
    assert start_as(ledger, waiter, "queue_one") == "waiting"
    reclaim(ledger, waiter.id, "node-dead")
    _expire_waiter_place(ledger, "k")

    # Then another contender can take the place
    assert start_as(ledger, next_, "queue_one") == "waiting"


@pytest.mark.slow
@pytest.mark.parametrize("slots", [1, 2])
def test_eight_queue_one_contenders_start_slots_of_them_and_queue_exactly_one(
    pg_ledger: Ledger, slots: int
) -> None:
    for round_ in range(5):
        empty_tables(pg_ledger)
        # Given eight claimed contenders for one key, started at the same moment
        contenders = claimed(pg_ledger, 8, key=f"q{round_}")
        spec = SingletonSpec(f"q{round_}", slots, "queue_one")
        outcomes, errors = contend(pg_ledger, contenders, spec, wait_secs=WAIT)

        # Then `slots` run, one waits, and the rest were skipped, as the rows say too
        assert errors == []
        assert sorted(outcomes) == sorted(
            ["started"] * slots + ["waiting"] + ["singleton_busy"] * (7 - slots)
        )
        stored = [pg_ledger.occurrences.get_occurrence(o.id) for o in contenders]
        assert sum(o.status == RUNNING for o in stored) == slots
        assert sum(o.status == PENDING for o in stored) == 1
        assert held_slots(pg_ledger, spec.key) == slots


# --- replace -------------------------------------------------------------------------------


def test_replace_cancels_the_holder_and_takes_its_slot_under_the_next_token(
    ledger: Ledger,
) -> None:
    # Given a running holder of the key
    holder, contender = claimed(ledger, 2)
    assert start_as(ledger, holder, "replace") == "started"
    old_token = ledger.occurrences.get_occurrence(holder.id).fencing_token
    assert old_token is not None

    # When a contender arrives under `replace`
    spec = SingletonSpec("k", 1, "replace")
    started = start_attempt(ledger, contender, "node-1", 1, spec, LEASE)

    # Then the contender runs in the holder's slot under the next token, and the holder is
    # cancelled, naming who replaced it
    assert (started.outcome, started.slot, started.fencing_token) == ("started", 0, old_token + 1)
    assert started.replaced == holder.id
    replaced = ledger.occurrences.get_occurrence(holder.id)
    assert (replaced.status, replaced.claimed_until) == (CANCELLED, None)
    assert replaced.error_message == f"replaced by {contender.id}"
    assert held_slots(ledger, "k") == 1
    # …and the replaced attempt's renew, settle and release write nothing
    assert not ledger.attempts.renew(holder.id, "node-0", old_token, LEASE)
    assert not settle(ledger, holder.id, "node-0", COMPLETED, fencing_token=old_token)
    assert not release_singleton(ledger, "k", holder.id, "node-0", old_token)
    assert ledger.occurrences.get_occurrence(holder.id) == replaced
    assert ledger.attempts.renew(contender.id, "node-1", old_token + 1, LEASE)


def test_replace_takes_a_free_slot_before_replacing_anyone(ledger: Ledger) -> None:
    first, second = claimed(ledger, 2)
    assert start_as(ledger, first, "replace", slots=2) == "started"

    spec = SingletonSpec("k", 2, "replace")
    started = start_attempt(ledger, second, "node-1", 1, spec, LEASE)

    assert (started.outcome, started.slot, started.replaced) == ("started", 1, None)
    assert ledger.occurrences.get_occurrence(first.id).status == RUNNING


def test_replace_cancels_the_holder_that_started_first(ledger: Ledger) -> None:
    first, second, third = claimed(ledger, 3)
    assert start_as(ledger, first, "replace", slots=2) == "started"
    assert start_as(ledger, second, "replace", slots=2) == "started"

    started = start_attempt(ledger, third, "node-2", 1, SingletonSpec("k", 2, "replace"), LEASE)

    assert started.replaced == first.id
    statuses = [ledger.occurrences.get_occurrence(o.id).status for o in (first, second, third)]
    assert statuses == [CANCELLED, RUNNING, RUNNING]
    assert held_slots(ledger, "k") == 2


def test_a_replacement_that_loses_its_own_claim_replaces_nobody(ledger: Ledger) -> None:
    holder, contender = claimed(ledger, 2)
    assert start_as(ledger, holder, "replace") == "started"
    expire_claim(ledger, contender.id)
    claim_one(ledger, "node-late")

    assert start_as(ledger, contender, "replace") == "lost"
    assert ledger.occurrences.get_occurrence(holder.id).status == RUNNING, (
        "rolled back with the start"
    )


@pytest.mark.slow
@pytest.mark.parametrize("slots", [1, 2])
def test_eight_replace_contenders_leave_exactly_slots_holders_and_fence_the_rest(
    pg_ledger: Ledger, slots: int
) -> None:
    for round_ in range(5):
        empty_tables(pg_ledger)
        # Given eight claimed contenders for one key, started at the same moment
        contenders = claimed(pg_ledger, 8, key=f"r{round_}")
        spec = SingletonSpec(f"r{round_}", slots, "replace")
        outcomes, errors = contend(pg_ledger, contenders, spec, wait_secs=WAIT)

        # Then each one started, in turn replacing an earlier one: `slots` are left running,
        # every other one is cancelled by a replacement, and none of those can write
        assert errors == []
        assert outcomes == ["started"] * 8
        stored = [pg_ledger.occurrences.get_occurrence(o.id) for o in contenders]
        running = [o for o in stored if o.status == RUNNING]
        assert len(running) == slots
        assert held_slots(pg_ledger, spec.key) == slots
        replaced = [o for o in stored if o.status == CANCELLED]
        assert len(replaced) == 8 - slots
        ids = {o.id for o in contenders}
        for gone in replaced:
            assert (gone.error_message or "").removeprefix("replaced by ") in ids
            claimant = gone.claimed_by or ""
            assert not pg_ledger.attempts.renew(gone.id, claimant, gone.fencing_token, LEASE)
            assert not settle(
                pg_ledger, gone.id, claimant, COMPLETED, fencing_token=gone.fencing_token
            )
        assert {o.singleton_slot for o in running} == set(range(slots))


def _expire_waiter_place(ledger: Ledger, key: str) -> None:
    with ledger.engine.begin() as conn:
        conn.execute(
            sa.update(singletons)
            .where(singletons.c.singleton_key == key, singletons.c.slot == WAITER_SLOT)
            .values(lease_until=ledger.db_now() - timedelta(hours=1))
        )
