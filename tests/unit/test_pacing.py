"""A loop's backoff while the database is away: doubling waits up to 30 s, reset by the first
success, and one log line for the outage's start and one for its end."""

from __future__ import annotations

import logging

import pytest

from cronledger.pacing import MAX_BACKOFF_SECS, Backoff


def test_waits_double_from_the_first_up_to_thirty_seconds_and_a_success_resets_them(
    caplog: pytest.LogCaptureFixture,
) -> None:
    backoff = Backoff("claim", 1.0, logging.getLogger("cronledger.test"))

    waits = [backoff.failed(ConnectionError("refused")) for _ in range(8)]
    backoff.succeeded()
    after = backoff.failed(ConnectionError("refused"))

    assert waits == [1.0, 2.0, 4.0, 8.0, 16.0, MAX_BACKOFF_SECS, MAX_BACKOFF_SECS, MAX_BACKOFF_SECS]
    assert MAX_BACKOFF_SECS == 30.0
    assert after == 1.0


def test_an_outage_is_two_log_lines_however_many_polls_it_lasts(
    caplog: pytest.LogCaptureFixture,
) -> None:
    backoff = Backoff("reconcile", 0.5, logging.getLogger("cronledger.test"))

    with caplog.at_level(logging.INFO, logger="cronledger.test"):
        backoff.succeeded()  # nothing to report while the database is up
        for _ in range(25):
            backoff.failed(ConnectionError("connection refused"))
        backoff.succeeded()
        backoff.succeeded()

    assert [r.getMessage() for r in caplog.records] == [
        "reconcile: the database is unavailable (connection refused); retrying with backoff "
        "up to 30 s",
        "reconcile: the database is back after 25 failed tries",
    ]
