"""The base every part of the repository shares: an engine, its backend, and transactions
that fail closed.

A database that cannot be reached raises `DatabaseUnavailable`, and so does one that does not
answer in time (a statement cancelled by `statement_timeout`, a socket silent past its timeout)
or is shutting down; any other database error (a constraint, a deadlock, a bug in a statement)
propagates as SQLAlchemy raised it. No method turns either into an empty answer.

Lock order: a transaction that writes both a singleton row and an occurrence row writes the
singleton row first, everywhere, and takes several singleton rows in (key, slot) order, so
two such transactions cannot deadlock on each other. Should PostgreSQL abort a write anyway
for a deadlock or a serialization failure (something outside the ledger holding locks, a
stricter isolation level), the write is run again at once, a bounded number of times: an
aborted transaction was rolled back whole, so nothing of it is written twice.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import sqlalchemy as sa

from cronledger.ledger.backend import WRITE_OPTION, Backend
from cronledger.ledger.models import DatabaseUnavailable

log = logging.getLogger(__name__)

S = TypeVar("S")
T = TypeVar("T")
#: What `_run` sends: a read, or a write whose RETURNING (if any) is the answer.
OneStatement = sa.Select[Any] | sa.Update
#: Server errors that mean the database did not serve the statement, not that it was wrong:
#: cancelled (by `statement_timeout`), the server shutting down or not yet accepting, and
#: any connection exception (class 08).
UNAVAILABLE_STATES = {
    "57014": "the statement ran past statement_timeout and was cancelled",
    "57P01": "the server is shutting down",
    "57P02": "the server is shutting down",
    "57P03": "the server is not accepting connections yet",
}
#: Server errors that abort a transaction to resolve its conflict with another one (a
#: serialization failure, a deadlock): nothing of it was written, and it may simply run again.
TRANSIENT_STATES = frozenset({"40001", "40P01"})
#: Tries in all of a write that keeps being aborted that way, before the error is raised.
TRANSIENT_TRIES = 3


def sqlstate(exc: BaseException) -> str | None:
    """The SQLSTATE of a server error pg8000 raised (`exc` or the driver error SQLAlchemy
    wrapped), or None."""
    original = getattr(exc, "orig", exc)
    details = original.args[0] if getattr(original, "args", None) else None
    return details.get("C") if isinstance(details, dict) else None


def _lost_session(context: sa.engine.ExceptionContext) -> None:
    """A server session ended under a statement (shut down, terminated, any connection
    exception) is a lost connection, as a broken socket is: SQLAlchemy then drops it and
    every connection pooled before it, which went to the same server."""
    state = sqlstate(context.original_exception)
    if state is not None and (state in ("57P01", "57P02") or state.startswith("08")):
        context.is_disconnect = True


class Store:
    """The base of every store: on an engine, a base of its own; on another store, that
    store's engine, backend and statement cache, shared, so a ledger's stores make each
    statement once and run it on one pool."""

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
        """The statement `build` makes, made once per `key` and kept, its values bound by
        name when it is executed. For the statements every attempt sends: building one and
        computing its cache key costs SQLAlchemy more than the database takes to run it."""
        statement = self._statements.get(key)
        if statement is None:
            statement = self._statements[key] = build()
        return statement

    def _run(
        self,
        key: Hashable,
        build: Callable[[], OneStatement],
        parameters: dict[str, Any],
        *,
        write: bool = True,
    ) -> tuple[Sequence[Sequence[Any]], int]:
        """Run the statement `build` makes (made once per `key`), atomic by itself, as
        `_write(single=True)` (or `_read()`, with `write=False`): the rows it returned and its
        row count (rows a write changed). A write is retried like `_atomic`'s."""

        def once() -> tuple[Sequence[Sequence[Any]], int]:
            with self._transaction(write=write, autocommit=True) as conn:
                result = conn.execute(self._statement(key, build), parameters)
                return (result.all() if result.returns_rows else []), result.rowcount

        return _retried(once) if write else once()

    def _connect(self) -> sa.Connection:
        """A pooled connection, or `DatabaseUnavailable` (socket errors and timeouts while
        connecting arrive unwrapped)."""
        try:
            return self.engine.connect()
        except (sa.exc.DBAPIError, self.engine.dialect.loaded_dbapi.Error, OSError) as exc:
            raise DatabaseUnavailable(f"cannot connect to the ledger database: {exc}") from exc
        except sa.exc.TimeoutError as exc:
            raise DatabaseUnavailable(f"no ledger connection available: {exc}") from exc

    def _atomic(self, body: Callable[[sa.Connection], T], *, single: bool = False) -> T:
        """What `body` answers, run in a write transaction (`_write`, committed unless the
        body rolled it back), and run again at once, up to `TRANSIENT_TRIES` times in all,
        when the database aborted the transaction for a deadlock or a serialization failure.
        `body` must write through the connection only: it may run more than once."""

        def once() -> T:
            with self._write(single=single) as conn:
                return body(conn)

        return _retried(once)

    @contextmanager
    def _write(self, *, single: bool = False) -> Iterator[sa.Connection]:
        """A transaction that writes (on SQLite: `BEGIN IMMEDIATE`). Commits on exit.
        `single`: the block sends one statement, atomic by itself, which PostgreSQL then
        runs in autocommit, sparing the BEGIN and COMMIT round trips."""
        with self._transaction(write=True, autocommit=single) as conn:
            yield conn

    @contextmanager
    def _read(self) -> Iterator[sa.Connection]:
        """Reads, in autocommit on PostgreSQL: under READ COMMITTED each statement takes its
        own snapshot anyway, so a read transaction would add only BEGIN and COMMIT."""
        with self._transaction(write=False, autocommit=True) as conn:
            yield conn

    @contextmanager
    def _transaction(self, *, write: bool, autocommit: bool = False) -> Iterator[sa.Connection]:
        conn = self._connect()
        try:
            with _unavailable_when_lost():
                if autocommit and self._sql.is_postgres:
                    with _driver_autocommit(conn):
                        yield conn
                else:
                    with conn.execution_options(**{WRITE_OPTION: write}).begin():
                        yield conn
        finally:
            conn.close()


def _retried(attempt: Callable[[], T]) -> T:
    """`attempt()`, tried again while it fails with one of `TRANSIENT_STATES`, up to
    `TRANSIENT_TRIES` times in all; any other failure, or the last one, is raised."""
    tries = 1
    while True:
        try:
            return attempt()
        except sa.exc.DBAPIError as exc:
            state = sqlstate(exc)
            if state not in TRANSIENT_STATES or tries >= TRANSIENT_TRIES:
                raise
            log.info("ledger write aborted (%s), trying again: %s", state, exc.orig)
            tries += 1


@contextmanager
def _unavailable_when_lost() -> Iterator[None]:
    """A statement that failed because the connection was lost (a socket error the driver
    let through unwrapped counts, a socket timeout too) or that the server did not serve
    (`UNAVAILABLE_STATES`) raises `DatabaseUnavailable`; any other failure, as it was
    raised."""
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


@contextmanager
def _driver_autocommit(conn: sa.Connection) -> Iterator[None]:
    """pg8000 in autocommit for the block: no BEGIN before the first statement, each one
    committed by the server as it ends, and SQLAlchemy's closing rollback a no-op (pg8000
    skips it outside a transaction). Switched on the driver, not through SQLAlchemy's
    `isolation_level`, whose reset on check-in is a round trip of its own."""
    driver: Any = conn.connection.driver_connection
    driver.autocommit = True
    try:
        yield
    finally:
        driver.autocommit = False
