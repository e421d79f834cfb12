"""The base every store shares: an engine, its backend, and transactions that fail closed.

A database that cannot be reached, does not answer in time or is shutting down raises
`DatabaseUnavailable`; any other database error propagates as SQLAlchemy raised it; neither
becomes an empty answer. A transaction writing singleton and occurrence rows writes the
singleton rows first, in (key, slot) order, so two cannot deadlock; a write PostgreSQL aborts
anyway (deadlock, serialization failure) was rolled back whole and runs again, a few times.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any, TypeVar

import sqlalchemy as sa

from cronledger.ledger.backend import WRITE_OPTION, Backend
from cronledger.ledger.models import DatabaseUnavailable

log = logging.getLogger(__name__)

S = TypeVar("S")
T = TypeVar("T")
#: Server errors meaning the statement was not served, not that it was wrong (and class 08).
UNAVAILABLE_STATES = {
    "57014": "the statement ran past statement_timeout and was cancelled",
    "57P01": "the server is shutting down",
    "57P02": "the server is shutting down",
    "57P03": "the server is not accepting connections yet",
}
#: A serialization failure or deadlock: the transaction was rolled back whole; run it again,
#: up to `TRANSIENT_TRIES` times in all.
TRANSIENT_STATES = frozenset({"40001", "40P01"})
TRANSIENT_TRIES = 3


def sqlstate(exc: BaseException) -> str | None:
    """The SQLSTATE of a pg8000 server error (raw or wrapped by SQLAlchemy), or None."""
    original = getattr(exc, "orig", exc)
    details = original.args[0] if getattr(original, "args", None) else None
    return details.get("C") if isinstance(details, dict) else None


def _lost_session(context: sa.engine.ExceptionContext) -> None:
    """A server session ended under a statement is a lost connection, as a broken socket
    is: SQLAlchemy drops it and every connection pooled before it (same server)."""
    state = sqlstate(context.original_exception)
    if state is not None and (state in ("57P01", "57P02") or state.startswith("08")):
        context.is_disconnect = True


class Store:
    """On an engine, a base of its own; on another store, that store's engine, backend and
    statement cache, so a ledger's stores build each statement once and share one pool."""

    engine: sa.Engine
    _sql: Backend
    _statements: dict[Hashable, Any]

    def __init__(self, base: Store | sa.Engine) -> None:
        if isinstance(base, Store):
            self.engine, self._sql, self._statements = base.engine, base._sql, base._statements
            return
        self.engine, self._sql, self._statements = base, Backend(base.dialect.name), {}
        if self._sql.is_postgres and not sa.event.contains(base, "handle_error", _lost_session):
            sa.event.listen(base, "handle_error", _lost_session)

    def _statement(self, key: Hashable, build: Callable[[], S]) -> S:
        """The statement `build` makes, built once per `key` (for the statements every attempt
        sends, building one costs more than running it)."""
        statement = self._statements.get(key)
        if statement is None:
            statement = self._statements[key] = build()
        return statement

    def _run(
        self,
        key: Hashable,
        build: Callable[[], sa.Select[Any] | sa.Update],
        parameters: dict[str, Any],
        *,
        write: bool = True,
    ) -> tuple[Sequence[Sequence[Any]], int]:
        """Run the statement `build` makes (once per `key`) on its own, as a write retried like
        `_atomic`'s, or a read: its rows and its row count."""

        def run(conn: sa.Connection) -> tuple[Sequence[Sequence[Any]], int]:
            result = conn.execute(self._statement(key, build), parameters)
            return (result.all() if result.returns_rows else []), result.rowcount

        if write:
            return self._atomic(run, single=True)
        with self._read() as conn:
            return run(conn)

    def _connect(self) -> sa.Connection:
        """A pooled connection, or `DatabaseUnavailable`."""
        try:
            return self.engine.connect()
        except (sa.exc.DBAPIError, self.engine.dialect.loaded_dbapi.Error, OSError) as exc:
            raise DatabaseUnavailable(f"cannot connect to the ledger database: {exc}") from exc
        except sa.exc.TimeoutError as exc:
            raise DatabaseUnavailable(f"no ledger connection available: {exc}") from exc

    def _atomic(self, body: Callable[[sa.Connection], T], *, single: bool = False) -> T:
        """`body`'s answer, run in a write transaction, again while the database aborts it
        (`TRANSIENT_STATES`, `TRANSIENT_TRIES`): `body` must write through `conn` only."""
        tries = 1
        while True:
            try:
                with self._write(single=single) as conn:
                    return body(conn)
            except sa.exc.DBAPIError as exc:
                state = sqlstate(exc)
                if state not in TRANSIENT_STATES or tries >= TRANSIENT_TRIES:
                    raise
                log.info("ledger write aborted (%s), trying again: %s", state, exc.orig)
                tries += 1

    def _write(self, *, single: bool = False) -> AbstractContextManager[sa.Connection]:
        """A transaction that writes (SQLite: `BEGIN IMMEDIATE`), committed on exit. `single`:
        one statement, atomic by itself, run in autocommit on PostgreSQL."""
        return self._transaction(write=True, autocommit=single)

    def _read(self) -> AbstractContextManager[sa.Connection]:
        """Reads, in autocommit on PostgreSQL (READ COMMITTED snapshots per statement anyway)."""
        return self._transaction(write=False, autocommit=True)

    @contextmanager
    def _transaction(self, *, write: bool, autocommit: bool = False) -> Iterator[sa.Connection]:
        conn = self._connect()
        try:
            with _unavailable_when_lost():
                if autocommit and self._sql.is_postgres:
                    # pg8000 in autocommit: no BEGIN, SQLAlchemy's closing rollback a no-op. Set
                    # on the driver: SQLAlchemy's `isolation_level` resets it with a round trip.
                    driver: Any = conn.connection.driver_connection
                    driver.autocommit = True
                    try:
                        yield conn
                    finally:
                        driver.autocommit = False
                else:
                    with conn.execution_options(**{WRITE_OPTION: write}).begin():
                        yield conn
        finally:
            conn.close()


@contextmanager
def _unavailable_when_lost() -> Iterator[None]:
    """A statement lost with its connection (socket errors and timeouts included) or not
    served (`UNAVAILABLE_STATES`) raises `DatabaseUnavailable`; anything else propagates."""
    try:
        yield
    except (sa.exc.DBAPIError, OSError) as exc:
        lost = isinstance(exc, OSError | sa.exc.OperationalError | sa.exc.InterfaceError)
        if lost or getattr(exc, "connection_invalidated", False):
            raise DatabaseUnavailable(f"ledger database unavailable: {exc}") from exc
        state = sqlstate(exc) or ""
        reason = UNAVAILABLE_STATES.get(state, "connection lost" if state[:2] == "08" else "")
        if reason:
            raise DatabaseUnavailable(f"ledger database unavailable ({reason}): {exc}") from exc
        raise
