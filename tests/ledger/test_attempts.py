"""Starting an attempt takes a singleton slot and goes `running` in one transaction; the
fencing token climbs on every acquisition, so a superseded holder's renew, settle and
release all match nothing."""

from __future__ import annotations

from datetime import timedelta

import pytest

from cronledger.ledger import (
    AttemptStart,
    Ledger,
    Occurrence,
    SingletonSpec,
)
from tests.ledger.helpers import (
    LEASE,
    claim_one,
    contend,
    expire_claim,
    expire_singleton,
    held_slots,
    release_singleton,
    row,
    seed_due,
    settle,
    start,
    start_attempt,
)


def shape(outcome: AttemptStart) -> tuple[str, int | None, int | None]:
    """An outcome without its start instant, which no test can know in advance."""
    return (outcome.outcome, outcome.fencing_token, outcome.slot)


def claimed_pair(ledger: Ledger, claimant: str = "node-a") -> list[Occurrence]:
    """Two due occurrences of one channel, both claimed by `claimant`, oldest first."""
    now = ledger.db_now()
    ledger.occurrences.insert_occurrences(
        [row(now - timedelta(minutes=5)), row(now - timedelta(minutes=4))]
    )
    claimed = ledger.attempts.claim(claimant, 10, LEASE).leased
    assert len(claimed) == 2
    return claimed


def test_starting_moves_the_occurrence_to_running_under_its_lease(ledger: Ledger) -> None:
    due = seed_due(ledger)
    mine = claim_one(ledger, "node-a")

    outcome = start_attempt(ledger, mine, "node-a", 7, SingletonSpec("key"), LEASE)

    assert shape(outcome) == ("started", 1, 0)
    running = ledger.occurrences.get_occurrence(due.id)
    assert running.status == "running"
    assert (running.singleton_key, running.singleton_slot, running.fencing_token) == ("key", 0, 1)
    assert running.executing_version == 7
    assert running.started_at is not None
    assert running.claimed_until is not None and running.claimed_until > ledger.db_now()
    assert held_slots(ledger, "key") == 1


def test_one_singleton_key_admits_one_occurrence(ledger: Ledger) -> None:
    first, second = claimed_pair(ledger)

    assert shape(start(ledger, first, "node-a", "key")) == ("started", 1, 0)
    busy = start(ledger, second, "node-a", "key")

    assert busy == AttemptStart("singleton_busy"), "a live key must refuse the second"
    assert ledger.occurrences.get_occurrence(second.id).status == "claimed", "busy writes nothing"
    assert held_slots(ledger, "key") == 1


def test_a_key_with_two_slots_admits_two_occurrences_and_refuses_a_third(ledger: Ledger) -> None:
    now = ledger.db_now()
    ledger.occurrences.insert_occurrences(row(now - timedelta(minutes=m)) for m in (3, 2, 1))
    first, second, third = ledger.attempts.claim("node-a", 10, LEASE).leased

    assert shape(start(ledger, first, "node-a", "key", slots=2)) == ("started", 1, 0)
    assert shape(start(ledger, second, "node-a", "key", slots=2)) == ("started", 1, 1)
    assert start(ledger, third, "node-a", "key", slots=2).outcome == "singleton_busy"
    assert held_slots(ledger, "key") == 2


def test_distinct_keys_do_not_contend(ledger: Ledger) -> None:
    first, second = claimed_pair(ledger)

    assert start(ledger, first, "node-a", "key-a").started
    assert start(ledger, second, "node-a", "key-b").started
    assert (held_slots(ledger, "key-a"), held_slots(ledger, "key-b")) == (1, 1)


def test_without_a_singleton_occurrences_overlap(ledger: Ledger) -> None:
    for occurrence in claimed_pair(ledger):
        assert shape(start(ledger, occurrence, "node-a")) == ("started", None, None)
        assert ledger.occurrences.get_occurrence(occurrence.id).status == "running"


def test_starting_an_occurrence_this_node_no_longer_holds_is_lost(ledger: Ledger) -> None:
    # Given node-a stalled long enough to lose its lease, and node-b took the occurrence over
    due = seed_due(ledger)
    mine = claim_one(ledger, "node-a")
    expire_claim(ledger, due.id)
    claim_one(ledger, "node-b")

    # When node-a finally tries to start it, with a singleton
    outcome = start(ledger, mine, "node-a", "key")

    # Then it is lost, and the slot it took on the way was rolled back with it
    assert outcome == AttemptStart("lost")
    stored = ledger.occurrences.get_occurrence(due.id)
    assert (stored.status, stored.claimed_by) == ("claimed", "node-b")
    assert held_slots(ledger, "key") == 0


def test_starting_twice_is_lost_the_second_time(ledger: Ledger) -> None:
    seed_due(ledger)
    mine = claim_one(ledger, "node-a")
    assert start(ledger, mine, "node-a", "key").started

    assert start(ledger, mine, "node-a", "key") == AttemptStart("lost")
    assert ledger.occurrences.get_occurrence(mine.id).fencing_token == 1, (
        "the lost start wrote nothing"
    )


def test_taking_over_an_expired_key_bumps_the_fencing_token(ledger: Ledger) -> None:
    first, second = claimed_pair(ledger)
    assert shape(start(ledger, first, "node-a", "key")) == ("started", 1, 0)

    # node-a dies: its occurrence claim and its singleton lease both run out, and node-b
    # picks up the second occurrence.
    expire_singleton(ledger, "key")
    expire_claim(ledger, second.id)
    taken_over = claim_one(ledger, "node-b")
    assert taken_over.id == second.id

    assert shape(start(ledger, taken_over, "node-b", "key")) == ("started", 2, 0), (
        "an expired key is takeable, under a higher generation"
    )
    assert held_slots(ledger, "key") == 1


def test_a_superseded_holder_cannot_renew_settle_or_release(ledger: Ledger) -> None:
    # Given node-a was superseded on the key by node-b (token 1 → 2)
    first, second = claimed_pair(ledger)
    assert start(ledger, first, "node-a", "key").fencing_token == 1
    expire_singleton(ledger, "key")
    expire_claim(ledger, second.id)
    taken_over = claim_one(ledger, "node-b")
    assert start(ledger, taken_over, "node-b", "key").fencing_token == 2

    # When node-a, still believing it holds token 1, renews, settles and releases
    renewed = ledger.attempts.renew(first.id, "node-a", 1, LEASE)
    settled = settle(ledger, first.id, "node-a", "completed", fencing_token=1)
    released = release_singleton(ledger, "key", first.id, "node-a", 1)

    # Then every one of those matches nothing: node-a's row and node-b's slot are untouched
    assert (renewed, settled, released) == (False, False, False)
    assert ledger.occurrences.get_occurrence(first.id).status == "running"
    assert held_slots(ledger, "key") == 1
    assert ledger.attempts.renew(taken_over.id, "node-b", 2, LEASE), "the real holder still renews"
    assert release_singleton(ledger, "key", taken_over.id, "node-b", 2), "and releases its own slot"
    assert held_slots(ledger, "key") == 0


def test_a_reclaimed_occurrence_fences_its_own_earlier_attempt(ledger: Ledger) -> None:
    # Given attempt 1 of an occurrence is running with the key and then stalls past its lease
    due = seed_due(ledger)
    first_attempt = claim_one(ledger, "node-a")
    assert start(ledger, first_attempt, "node-a", "key", slots=2).fencing_token == 1
    expire_claim(ledger, due.id)

    # When node-b re-claims it and starts attempt 2 while the slot's lease is still live
    second_attempt = claim_one(ledger, "node-b")
    outcome = start(ledger, second_attempt, "node-b", "key", slots=2)

    # Then attempt 2 takes the slot attempt 1 held, under a new token, and attempt 1 is fenced
    assert shape(outcome) == ("started", 2, 0)
    assert held_slots(ledger, "key") == 1, "one occurrence never holds two slots"
    assert not ledger.attempts.renew(due.id, "node-a", 1, LEASE)
    assert ledger.occurrences.get_occurrence(due.id).attempt == 2


def test_a_superseded_claimant_cannot_release_a_later_attempts_slot_under_an_equal_token(
    ledger: Ledger,
) -> None:
    # Given attempt 1 (node-a) held slot 0 under token 1 and stalled; another occurrence
    # took that expired slot, and attempt 2 (node-b) holds slot 1, under token 1 as well
    now = ledger.db_now()
    ledger.occurrences.insert_occurrences(
        [row(now - timedelta(minutes=5)), row(now - timedelta(minutes=4))]
    )
    stalled, other = claim_one(ledger, "node-a"), claim_one(ledger, "node-c")
    assert shape(start(ledger, stalled, "node-a", "key", slots=2)) == ("started", 1, 0)
    expire_claim(ledger, stalled.id)
    expire_singleton(ledger, "key")
    assert shape(start(ledger, other, "node-c", "key", slots=2)) == ("started", 2, 0)
    again = claim_one(ledger, "node-b")
    assert again.id == stalled.id
    assert shape(start(ledger, again, "node-b", "key", slots=2)) == ("started", 1, 1)

    # When node-a, still believing it holds token 1, releases
    released = release_singleton(ledger, "key", stalled.id, "node-a", 1)

    # Then nothing is freed: attempt 2 still holds slot 1 and renews under its token
    assert not released
    assert held_slots(ledger, "key") == 2
    current = ledger.occurrences.get_occurrence(stalled.id)
    assert (current.claimed_by, current.singleton_slot, current.fencing_token) == ("node-b", 1, 1)
    assert ledger.attempts.renew(stalled.id, "node-b", 1, LEASE)
    assert release_singleton(ledger, "key", stalled.id, "node-b", 1)
    assert held_slots(ledger, "key") == 1


def test_a_released_slot_hands_the_next_holder_a_higher_token(ledger: Ledger) -> None:
    first, second = claimed_pair(ledger)
    assert start(ledger, first, "node-a", "key").fencing_token == 1
    assert settle(ledger, first.id, "node-a", "completed", fencing_token=1)
    assert held_slots(ledger, "key") == 0

    assert shape(start(ledger, second, "node-a", "key")) == ("started", 2, 0), (
        "tokens never repeat on a key, even after a release"
    )


def test_a_renewal_extends_both_the_claim_and_the_singleton(ledger: Ledger) -> None:
    # Given a running attempt whose deadlines have both slipped into the past
    due = seed_due(ledger)
    mine = claim_one(ledger, "node-a")
    token = start(ledger, mine, "node-a", "key").fencing_token
    assert token is not None
    expire_claim(ledger, due.id)
    expire_singleton(ledger, "key")
    assert ledger.reporting.in_flight_count() == 0 and held_slots(ledger, "key") == 0

    # When the holder renews
    assert ledger.attempts.renew(due.id, "node-a", token, 600)

    # Then both deadlines are in the future again, and the occurrence is not takeable
    now = ledger.db_now()
    renewed = ledger.occurrences.get_occurrence(due.id)
    assert renewed.claimed_until is not None
    assert renewed.claimed_until > now + timedelta(seconds=590)
    assert held_slots(ledger, "key") == 1
    assert ledger.reporting.in_flight_count() == 1
    assert ledger.attempts.claim("node-b", 10, LEASE).leased == []
    assert not ledger.attempts.renew(due.id, "node-a", token + 1, 600), (
        "a wrong token extends nothing"
    )
    assert not ledger.attempts.renew(due.id, "node-b", token, 600), (
        "another claimant extends nothing"
    )


def test_a_renewal_without_a_singleton_extends_the_claim(ledger: Ledger) -> None:
    due = seed_due(ledger)
    mine = claim_one(ledger, "node-a")
    assert start(ledger, mine, "node-a").started
    expire_claim(ledger, due.id)

    assert ledger.attempts.renew(due.id, "node-a", None, LEASE)
    assert ledger.attempts.claim("node-b", 10, LEASE).leased == []
    assert not ledger.attempts.renew(due.id, "node-b", None, LEASE)


def test_a_claimed_but_not_started_occurrence_cannot_be_renewed(ledger: Ledger) -> None:
    seed_due(ledger)
    mine = claim_one(ledger, "node-a")

    assert not ledger.attempts.renew(mine.id, "node-a", None, LEASE)


@pytest.mark.slow
@pytest.mark.parametrize("slots", [1, 2])
def test_eight_contenders_on_one_forbid_key_start_exactly_slots_of_them(
    ledger: Ledger, slots: int
) -> None:
    for round_ in range(3):
        # Given eight claimed occurrences, one per claimant, all under one key
        spec = SingletonSpec(f"key-{slots}-{round_}", slots)
        now = ledger.db_now()
        ledger.occurrences.insert_occurrences(
            row(now - timedelta(seconds=n + 1), f"ch-{round_}-{n}") for n in range(8)
        )
        claimed = [claim_one(ledger, f"node-{n}") for n in range(8)]
        outcomes, errors = contend(ledger, claimed, spec)

        # Then exactly `slots` started, the rest found the key busy, and the rows agree
        assert errors == []
        assert sorted(outcomes) == ["singleton_busy"] * (8 - slots) + ["started"] * slots
        assert held_slots(ledger, spec.key) == slots
        running = [
            o for o in claimed if ledger.occurrences.get_occurrence(o.id).status == "running"
        ]
        assert len(running) == slots
        assert {ledger.occurrences.get_occurrence(o.id).singleton_slot for o in running} == set(
            range(slots)
        )


def test_a_start_records_its_trace_and_reports_when_it_started(ledger: Ledger) -> None:
    due = seed_due(ledger)
    mine = claim_one(ledger, "node-a")

    outcome = start_attempt(ledger, mine, "node-a", 1, None, LEASE, trace_id="trace-1")

    running = ledger.occurrences.get_occurrence(due.id)
    assert running.trace_id == "trace-1"
    assert outcome.started_at is not None and outcome.started_at == running.started_at
    assert outcome.started_at >= due.scheduled_for
