"""The base every part of the repository shares: an engine, its backend, and transactions
that fail closed.

A database that cannot be reached raises `DatabaseUnavailable`; any other database error
(a constraint, a deadlock, a bug in a statement) propagates as SQLAlchemy raised it. No
method turns either into an empty answer.

Lock order: a transaction that writes both a singleton row and an occurrence row writes the
singleton row first, everywhere, so two such transactions cannot deadlock on each other.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import sqlalchemy as sa

from cronledger.ledger.backend import WRITE_OPTION, Backend
from cronledger.ledger.models import DatabaseUnavailable


class Store:
    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine
        self._sql = Backend(engine.dialect.name)

    @contextmanager
    def _write(self) -> Iterator[sa.Connection]:
        """A transaction that writes (on SQLite: `BEGIN IMMEDIATE`). Commits on exit."""
        with self._transaction(write=True) as conn:
            yield conn

    @contextmanager
    def _read(self) -> Iterator[sa.Connection]:
        with self._transaction(write=False) as conn:
            yield conn

    @contextmanager
    def _transaction(self, *, write: bool) -> Iterator[sa.Connection]:
        try:
            conn = self.engine.connect()
        except sa.exc.DBAPIError as exc:
            raise DatabaseUnavailable(f"cannot connect to the ledger database: {exc}") from exc
        except sa.exc.TimeoutError as exc:
            raise DatabaseUnavailable(f"no ledger connection available: {exc}") from exc
        try:
            with conn.execution_options(**{WRITE_OPTION: write}).begin():
                yield conn
        except sa.exc.DBAPIError as exc:
            lost = isinstance(exc, sa.exc.OperationalError | sa.exc.InterfaceError)
            if lost or exc.connection_invalidated:
                raise DatabaseUnavailable(f"ledger database unavailable: {exc}") from exc
            raise
        finally:
            conn.close()
