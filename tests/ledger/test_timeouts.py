"""Every PostgreSQL connection is bounded in time (cronledger.ledger.backend): a statement that
waits past `statement_timeout` is cancelled by the server, and a connection that goes silent is
given up after the socket timeout; both fail as `DatabaseUnavailable` instead of hanging until
the function's own timeout, and neither writes anything."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from cronledger.ledger import CLAIMED, COMPLETED, DatabaseUnavailable, Ledger
from cronledger.ledger.tables import occurrences
from tests.ledger.helpers import claim_one, empty_tables, seed_due, settle
from tests.relay import Relay, SilentServer

#: How long the blocking transaction holds its lock: far past the timeouts under test, so a
#: statement that waited for it instead of being cancelled would succeed, and the test fail.
HOLD_SECS = 10.0


@pytest.fixture
def quick_ledger(pg_ledger: Ledger, pg_database_url: str) -> Iterator[Ledger]:
    """The run's database, through a ledger whose statements may run 300 ms."""
    empty_tables(pg_ledger)
    ledger = Ledger.connect(pg_database_url, statement_timeout_ms=300, socket_timeout_secs=5)
    yield ledger
    ledger.dispose()


class RowLock:
    """Another session holding an occurrence's row lock for `HOLD_SECS`, or until released."""

    def __init__(self, database_url: str) -> None:
        self._engine = sa.create_engine(database_url)
        self._release = threading.Event()
        self._holder: threading.Thread | None = None

    def hold(self, occurrence_id: str) -> None:
        locked = threading.Event()

        def keep() -> None:
            with self._engine.begin() as conn:
                conn.execute(
                    sa.select(occurrences.c.id)
                    .where(occurrences.c.id == occurrence_id)
                    .with_for_update()
                )
                locked.set()
                self._release.wait(HOLD_SECS)

        self._holder = threading.Thread(target=keep, daemon=True)
        self._holder.start()
        assert locked.wait(5)

    def release(self) -> None:
        self._release.set()
        if self._holder is not None:
            self._holder.join()
        self._engine.dispose()


@pytest.fixture
def row_lock(pg_database_url: str) -> Iterator[RowLock]:
    lock = RowLock(pg_database_url)
    yield lock
    lock.release()


def test_a_write_waiting_on_a_lock_past_statement_timeout_is_cancelled_as_unavailable(
    quick_ledger: Ledger, pg_ledger: Ledger, row_lock: RowLock
) -> None:
    # Given a claimed occurrence whose row another session keeps locked
    seed_due(quick_ledger)
    seed_id = claim_one(quick_ledger, "claimant-1").id
    row_lock.hold(seed_id)

    # When the ledger settles it (a statement sent straight on the connection) and cancels it
    # (through SQLAlchemy), each waits for the lock
    with pytest.raises(DatabaseUnavailable, match="statement_timeout") as settling:
        settle(quick_ledger, seed_id, "claimant-1", COMPLETED, result="done")
    with pytest.raises(DatabaseUnavailable, match="statement_timeout"):
        quick_ledger.occurrences.cancel(seed_id)

    # Then both were cancelled by the server, not left waiting, and nothing was written
    assert "canceling statement due to statement timeout" in str(settling.value)
    row_lock.release()
    assert pg_ledger.occurrences.get_occurrence(seed_id).status == CLAIMED
    # and the connections are still good for the next statement
    assert quick_ledger.db_now() is not None


def test_a_connection_that_goes_silent_is_given_up_after_the_socket_timeout(
    pg_ledger: Ledger, pg_database_url: str
) -> None:
    # Given a ledger reaching the database through a relay, with a one-second socket timeout
    empty_tables(pg_ledger)
    seed_due(pg_ledger)
    with Relay(pg_database_url) as relay:
        relay.open()
        ledger = Ledger.connect(relay.url, statement_timeout_ms=500, socket_timeout_secs=1)
        try:
            assert ledger.reporting.in_flight_count() == 0  # a connection is open and pooled

            # When the network goes silent (a failover's half-open connection)
            relay.freeze(HOLD_SECS)

            # Then a claim gives up on it instead of waiting, and claims nothing
            with pytest.raises(DatabaseUnavailable):
                ledger.attempts.claim("claimant-1", 10, 60)
            # and a new connection through the silent network is given up too
            with pytest.raises(DatabaseUnavailable):
                ledger.db_now()
        finally:
            ledger.dispose()
    assert pg_ledger.reporting.in_flight_count() == 0


def test_a_connection_that_never_answers_is_given_up_after_the_connect_timeout(
    pg_database_url: str,
) -> None:
    # Given a ledger with a long socket timeout (migrate's is the function's) and a short
    # connect timeout, pointed at an address that accepts and never answers
    silent = SilentServer()
    ledger = Ledger.connect(
        silent.url(pg_database_url), socket_timeout_secs=300, connect_timeout_secs=0.5
    )
    try:
        # When it connects
        started = time.monotonic()
        with pytest.raises(DatabaseUnavailable, match=r"within the 0\.5 s connect timeout"):
            ledger.db_now()

        # Then it waited the connect timeout, not the socket's
        assert time.monotonic() - started < 2
    finally:
        ledger.dispose()
        silent.close()
