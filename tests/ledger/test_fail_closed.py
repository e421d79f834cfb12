"""Fail closed: a database that cannot be reached is an error, never an empty answer.

An empty claim is indistinguishable from a healthy idle tick, so a claimer would loop
quietly while work piled up; a singleton read that failed open would let a second node run
beside a live holder.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from cronledger.ledger import DatabaseUnavailable, Ledger, SingletonSpec
from tests.ledger.helpers import LEASE, seed_due, start_attempt
from tests.pg import drop_database, scratch_database

UNREACHABLE_POSTGRES = "postgresql+pg8000://postgres@127.0.0.1:1/cronledger"


def assert_every_decision_raises(ledger: Ledger) -> None:
    calls: list[Callable[[], object]] = [
        lambda: ledger.attempts.claim("node-a", 10, LEASE).leased,
        ledger.db_now,
        lambda: start_attempt(ledger, "occ", "node-a", 1, SingletonSpec("key"), LEASE),
        ledger.reporting.in_flight_count,
        ledger.cursors.schedule_states,
    ]
    for call in calls:
        with pytest.raises(DatabaseUnavailable):
            call()


@pytest.mark.parametrize("backend", ["postgresql", "sqlite"])
def test_an_unreachable_database_raises_rather_than_reporting_nothing(
    backend: str, tmp_path: Path
) -> None:
    # A SQLite file under a path component that is a regular file cannot be opened.
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    url = UNREACHABLE_POSTGRES if backend == "postgresql" else f"sqlite:///{blocker}/ledger.db"
    ledger = Ledger.connect(url)
    try:
        assert_every_decision_raises(ledger)
    finally:
        ledger.dispose()


def test_a_postgresql_database_that_goes_away_raises_rather_than_reporting_nothing(
    pg_database_url: str,
) -> None:
    # Given a ledger with work in it, on a database of its own
    with scratch_database(pg_database_url, "gone") as url:
        ledger = Ledger.connect(url)
        try:
            ledger.migrate()
            seed_due(ledger)
            seed_due(ledger, channel_id="other")
            assert len(ledger.attempts.claim("node-a", 1, LEASE).leased) == 1, "there is work"

            # When the database disappears under it
            drop_database(url)

            # Then the remaining work is not reported as "nothing due"
            assert_every_decision_raises(ledger)
        finally:
            ledger.dispose()


def test_a_sqlite_file_that_goes_away_raises_rather_than_reporting_nothing(
    tmp_path: Path,
) -> None:
    path = tmp_path / "ledger.db"
    ledger = Ledger.connect(f"sqlite:///{path}")
    try:
        ledger.migrate()
        seed_due(ledger)
        seed_due(ledger, channel_id="other")
        assert len(ledger.attempts.claim("node-a", 1, LEASE).leased) == 1, "there is work"

        # The file is replaced by something that is not a database.
        ledger.dispose()
        for leftover in tmp_path.glob("ledger.db*"):
            os.remove(leftover)
        path.mkdir()

        assert_every_decision_raises(ledger)
    finally:
        ledger.dispose()
