"""Every attempt is on record, on PostgreSQL and SQLite: the executor's start and settle
write the attempt's row with the attempt, failures keep their error (and a Python target's
last frames), and the API's single-occurrence read shows them all."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cronledger.api.views import occurrence_record
from cronledger.ledger import COMPLETED, FAILED, Ledger
from tests.e2e import targets
from tests.e2e.test_retries import RETRY_AT_ONCE, due_now
from tests.e2e.test_scheduler import make_channel, run_until_settled


@pytest.fixture(autouse=True)
def _fresh_targets() -> Iterator[None]:
    targets.reset()
    yield


def test_a_retried_then_completed_occurrence_shows_each_attempt_with_its_error(
    ledger: Ledger,
) -> None:
    # Given a channel whose target fails its first attempt, retried at once
    channel = make_channel(ledger, "0 0 0 1 1 *", target="fail_first", retry=RETRY_AT_ONCE)
    due = due_now(ledger, channel.channel_id)

    # When the scheduler runs everything due until nothing is
    run_until_settled(ledger)

    # Then the occurrence completed on its second attempt, and both attempts are on record
    assert ledger.occurrences.get_occurrence(due.id).status == COMPLETED
    first, second = ledger.occurrences.attempts_of(due.id)
    assert (first.number, first.outcome) == (1, FAILED)
    assert first.error_message == "RuntimeError: the printer jammed"
    assert first.error_detail is not None
    assert "in _jam" in first.error_detail, "the callable's own frames"
    assert first.error_detail.endswith("RuntimeError: the printer jammed")
    assert (second.number, second.outcome, second.error_message) == (2, COMPLETED, None)
    for attempt in (first, second):
        assert attempt.claimant
        assert attempt.ended_at is not None and attempt.ended_at >= attempt.started_at
        assert attempt.duration_ms is not None and attempt.duration_ms >= 0
    assert second.started_at >= first.ended_at  # type: ignore[operator]


def test_the_api_record_of_an_occurrence_lists_its_attempts_first_to_last(
    ledger: Ledger,
) -> None:
    # Given an occurrence that failed once and then completed
    channel = make_channel(ledger, "0 0 0 1 1 *", target="fail_first", retry=RETRY_AT_ONCE)
    due = due_now(ledger, channel.channel_id)
    run_until_settled(ledger)

    # When its record is read as the API answers it
    record = occurrence_record(
        ledger.occurrences.get_occurrence(due.id), ledger.occurrences.attempts_of(due.id)
    )

    # Then it carries both attempts, outcome and error each
    shown = [(a.number, a.outcome, a.error_message) for a in record.attempts]
    assert shown == [(1, FAILED, "RuntimeError: the printer jammed"), (2, COMPLETED, None)]
