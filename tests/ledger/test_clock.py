"""The database clock is the only clock, it is UTC whatever the server's or session's time
zone, and it has sub-second precision on both backends."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import UTC, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from cronledger.ledger import Ledger, OccurrenceFilter, create_ledger_engine
from tests.ledger.helpers import LEASE, claim_one, empty_tables, row, seed_due, start


@pytest.fixture
def kolkata_ledger(pg_ledger: Ledger, pg_database_url: str) -> Iterator[Ledger]:
    """The same PostgreSQL database, seen from sessions whose TimeZone is Asia/Kolkata."""
    empty_tables(pg_ledger)
    engine = create_ledger_engine(pg_database_url)

    @sa.event.listens_for(engine, "connect")
    def set_zone(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute("SET TIME ZONE 'Asia/Kolkata'")
        cursor.close()
        dbapi_connection.commit()  # else the pool's rollback on check-in undoes the SET

    ledger = Ledger(engine)
    yield ledger
    ledger.dispose()


def test_the_database_clock_is_aware_utc_with_sub_second_precision(ledger: Ledger) -> None:
    first = ledger.db_now()
    time.sleep(0.05)
    second = ledger.db_now()

    assert first.tzinfo is UTC and second.tzinfo is UTC
    assert timedelta(milliseconds=30) <= second - first < timedelta(seconds=5)


def test_the_clock_and_stored_instants_are_utc_under_a_non_utc_session(
    kolkata_ledger: Ledger, pg_ledger: Ledger
) -> None:
    # Given a session whose TimeZone is five and a half hours ahead of UTC
    with kolkata_ledger.engine.connect() as conn:
        assert conn.execute(sa.text("SHOW TimeZone")).scalar_one() == "Asia/Kolkata"

    # Then its clock reads the same instant as a UTC session's, and says so in UTC
    now = kolkata_ledger.db_now()
    assert now.utcoffset() == timedelta(0)
    assert abs(now - pg_ledger.db_now()) < timedelta(seconds=5)

    # And an instant written there reads back identical from a UTC session, and due-ness
    # is judged on instants: the past row is claimable, the future one is not
    past = row(now - timedelta(seconds=30))
    future = row(now + timedelta(hours=1))
    assert kolkata_ledger.occurrences.insert_occurrences([past, future]) == 2
    assert pg_ledger.occurrences.get_occurrence(past.id).scheduled_for == past.scheduled_for
    claimed = kolkata_ledger.attempts.claim("node-a", 10, LEASE).leased
    assert [o.id for o in claimed] == [past.id]
    assert claimed[0].claimed_until is not None
    assert claimed[0].scheduled_for.tzinfo is UTC and claimed[0].claimed_until.tzinfo is UTC
    assert claimed[0].claimed_until - now < timedelta(seconds=LEASE + 5)


def test_sqlite_stores_fixed_width_instants_that_compare_in_time_order(
    sqlite_ledger: Ledger,
) -> None:
    # Given instants with no, some and full fractional seconds, inserted out of order
    base = sqlite_ledger.db_now().replace(microsecond=0) - timedelta(minutes=1)
    instants = [
        base - timedelta(microseconds=1),
        base,
        base + timedelta(microseconds=1),
        base + timedelta(milliseconds=500),
        base + timedelta(seconds=1),
    ]
    rows = [row(at) for at in instants]
    assert sqlite_ledger.occurrences.insert_occurrences(reversed(rows)) == 5

    # Then every stored value (and the clock) is the same width, so text order is time order
    with sqlite_ledger.engine.connect() as conn:
        stored = conn.exec_driver_sql("SELECT scheduled_for, created_at FROM cron_occurrences")
        widths = {len(value) for pair in stored for value in pair}
    assert widths == {len("2026-01-01 00:00:00.000000")}
    assert [o.id for o in sqlite_ledger.attempts.claim("node-a", 10, LEASE).leased] == [
        r.id for r in rows
    ]
    window = OccurrenceFilter(since=base, until=base + timedelta(milliseconds=500))
    assert {o.id for o in sqlite_ledger.occurrences.list_occurrences(window).data} == {
        r.id for r in rows[1:4]
    }


def test_a_renewal_that_waits_on_a_lock_still_leases_from_when_it_was_asked(
    pg_ledger: Ledger,
) -> None:
    # Given a running attempt whose row another transaction holds locked for a second
    empty_tables(pg_ledger)
    due = seed_due(pg_ledger)
    assert start(pg_ledger, claim_one(pg_ledger, "node-a"), "node-a").started
    blocker = pg_ledger.engine.connect()
    blocker.execute(
        sa.text("SELECT 1 FROM cron_occurrences WHERE id = :id FOR UPDATE"), {"id": due.id}
    )
    renewed: list[bool] = []
    renewal = threading.Thread(
        target=lambda: renewed.append(pg_ledger.attempts.renew(due.id, "node-a", None, LEASE))
    )

    # When the holder asks for a renewal that has to wait for that lock
    asked_at = pg_ledger.db_now()
    renewal.start()
    time.sleep(1.0)
    blocker.commit()
    blocker.close()
    renewal.join()

    # Then the lease runs a full lease from when it was asked, never less: the executor's
    # "stop before the lease can lapse" rule times itself from just before its call
    assert renewed == [True]
    lease_until = pg_ledger.occurrences.get_occurrence(due.id).claimed_until
    assert lease_until is not None
    assert asked_at + timedelta(seconds=LEASE) <= lease_until
    assert lease_until <= asked_at + timedelta(seconds=LEASE + 5)
