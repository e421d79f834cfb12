"""Materialisation is insert-if-absent on (channel_id, scheduled_for): the property the whole
reconciler rests on. A retried tick or a second reconciler, each minting a fresh id, still
produces one row per instant."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest

from cronledger.ledger import (
    SKIPPED_MISFIRE,
    TRIGGER_MANUAL,
    Ledger,
    OccurrenceFilter,
)
from tests.ledger.helpers import pending_count, row


def test_materialisation_is_idempotent_on_the_scheduled_instant(ledger: Ledger) -> None:
    at = ledger.db_now()
    first, second = row(at), row(at)
    assert first.id != second.id

    assert ledger.occurrences.insert_occurrence(first)
    assert not ledger.occurrences.insert_occurrence(second), (
        "a second id for the same instant must lose"
    )

    page = ledger.occurrences.list_occurrences()
    assert page.total == 1
    assert page.data[0].id == first.id
    # A different instant, and another channel at the same instant, are distinct occurrences.
    assert ledger.occurrences.insert_occurrence(row(at + timedelta(seconds=1)))
    assert ledger.occurrences.insert_occurrence(row(at, channel_id="other"))
    assert ledger.occurrences.list_occurrences().total == 3


def test_a_materialised_row_is_pending_with_no_attempt_and_no_lease(ledger: Ledger) -> None:
    new = row(ledger.db_now(), target_ref="lambda:nightly", trigger=TRIGGER_MANUAL)
    assert ledger.occurrences.insert_occurrence(new)

    stored = ledger.occurrences.get_occurrence(new.id)
    assert (stored.status, stored.attempt, stored.trigger) == ("pending", 0, TRIGGER_MANUAL)
    assert stored.claimed_by is None and stored.claimed_until is None
    assert stored.target_ref == "lambda:nightly"
    assert stored.scheduled_for == new.scheduled_for
    assert stored.completed_at is None


def test_a_misfire_summary_row_is_born_terminal_with_its_message(ledger: Ledger) -> None:
    message = 'skipped 3 missed occurrence(s) between a and b (misfire_policy "latest")'
    new = row(ledger.db_now(), status=SKIPPED_MISFIRE, error_message=message)
    assert ledger.occurrences.insert_occurrence(new)

    stored = ledger.occurrences.get_occurrence(new.id)
    assert stored.status == SKIPPED_MISFIRE
    assert stored.error_message == message
    assert stored.completed_at is not None, "a terminal row records when it ended"
    assert ledger.attempts.claim("node-a", 10, 60).leased == [], "a summary row is not work"


def test_a_batch_insert_counts_only_the_rows_it_created(ledger: Ledger) -> None:
    # Given two instants already materialised
    now = ledger.db_now()
    instants = [now + timedelta(minutes=i) for i in range(5)]
    assert ledger.occurrences.insert_occurrences([row(instants[0]), row(instants[3])]) == 2

    # When a batch covering all five instants arrives
    inserted = ledger.occurrences.insert_occurrences(row(at) for at in instants)

    # Then only the three new ones are inserted, and each instant has one row
    assert inserted == 3
    listed = ledger.occurrences.list_occurrences(OccurrenceFilter(channel_id="ch"))
    assert listed.total == 5
    assert sorted(o.scheduled_for for o in listed.data) == instants
    assert ledger.occurrences.insert_occurrences([]) == 0
    # One instant twice in a single batch is still one row.
    twice = now - timedelta(minutes=1)
    assert ledger.occurrences.insert_occurrences([row(twice), row(twice)]) == 1


def test_a_batch_larger_than_one_statement_chunk_is_inserted_whole(ledger: Ledger) -> None:
    start = ledger.db_now()
    batch = [row(start + timedelta(seconds=i)) for i in range(2500)]

    assert ledger.occurrences.insert_occurrences(batch) == 2500
    assert ledger.occurrences.insert_occurrences(batch) == 0
    assert pending_count(ledger, "ch") == 2500


def test_a_naive_scheduled_for_is_refused(ledger: Ledger) -> None:
    naive = ledger.db_now().replace(tzinfo=None)
    with pytest.raises(ValueError, match="naive"):
        ledger.occurrences.insert_occurrence(row(naive))


@pytest.mark.slow
def test_concurrent_materialisations_of_the_same_instants_produce_one_row_each(
    ledger: Ledger,
) -> None:
    # Given eight reconcilers that planned the same pass: fifty instants, plus one instant
    # each of them inserts on its own
    base = ledger.db_now()
    instants = [base + timedelta(seconds=i) for i in range(50)]
    single = base - timedelta(minutes=1)
    gate = threading.Barrier(8)
    batch_counts: list[int] = []
    single_wins: list[bool] = []
    errors: list[BaseException] = []

    def reconcile() -> None:
        try:
            gate.wait()
            single_wins.append(ledger.occurrences.insert_occurrence(row(single)))
            batch_counts.append(ledger.occurrences.insert_occurrences(row(at) for at in instants))
        except BaseException as exc:  # surfaced below; a thread cannot fail the test itself
            errors.append(exc)

    # When they all insert at once, each with fresh ids
    threads = [threading.Thread(target=reconcile) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    # Then exactly one wins each instant, and the ledger has one row per instant
    assert errors == []
    assert single_wins.count(True) == 1
    assert sum(batch_counts) == 50
    assert ledger.occurrences.list_occurrences(OccurrenceFilter(limit=1000)).total == 51
