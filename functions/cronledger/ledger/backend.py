"""Engines, and the only places PostgreSQL and SQLite differ: the clock, the upsert, and
how a write transaction begins.

The clock is always the database's. On PostgreSQL, "now" is `statement_timestamp()`: one
value for the whole statement (so it can drive an index scan), yet it moves on between the
statements of one transaction, unlike `now()`, which is frozen at transaction start, and
unlike `clock_timestamp()` it is not re-read row by row. A lease ends at "now" + lease, and
"now" is never earlier than the moment the caller asked, so a holder that times its lease
from just before its call never outlives it, however long the statement then waited.
On SQLite, "now" is `strftime(..., 'now')` (constant within a statement, millisecond
precision) padded to the six fractional digits the stored text uses, so text comparison
is instant comparison.

SQLite runs in WAL mode with a busy timeout, and every transaction that writes starts with
`BEGIN IMMEDIATE`: it takes the write lock up front instead of upgrading a read lock halfway,
which under concurrent writers fails at once rather than waiting.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.dialects import postgresql, sqlite

from cronledger.ledger.tables import UtcDateTime

SQLITE_BUSY_TIMEOUT_SECS = 30.0
SQLITE_NOW_FORMAT = "%Y-%m-%d %H:%M:%f000"  # %f is SS.SSS; pad to microseconds
WRITE_OPTION = "cronledger_write"


def create_ledger_engine(url: str | sa.URL, **engine_options: Any) -> sa.Engine:
    """An engine for `postgresql+pg8000://…` or `sqlite:///path` (a file: the local runner's
    threads must share one database, which an in-memory SQLite cannot give them)."""
    parsed = sa.make_url(url)
    backend = parsed.get_backend_name()
    if backend == "postgresql":
        if parsed.get_driver_name() != "pg8000":
            raise ValueError(f"use postgresql+pg8000://, not {parsed.drivername}://")
        # Pre-ping: a Lambda reuses its pool across invocations, and RDS Proxy or Aurora
        # may have closed a connection in between.
        return sa.create_engine(parsed, **{"pool_pre_ping": True, **engine_options})
    if backend == "sqlite":
        if parsed.database in (None, "", ":memory:"):
            raise ValueError("SQLite needs a file, e.g. sqlite:///.cronledger/ledger.db")
        connect_args = {"timeout": SQLITE_BUSY_TIMEOUT_SECS, "check_same_thread": False}
        engine = sa.create_engine(parsed, **{"connect_args": connect_args, **engine_options})
        event.listen(engine, "connect", _configure_sqlite_connection)
        event.listen(engine, "begin", _begin_sqlite_transaction)
        return engine
    raise ValueError(
        f"unsupported database URL scheme {parsed.drivername!r}: "
        "use postgresql+pg8000://… or sqlite:///path/to/file.db"
    )


def _configure_sqlite_connection(dbapi_connection: Any, _record: Any) -> None:
    # Let SQLAlchemy's "begin" event, not the driver, decide how each transaction begins.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def _begin_sqlite_transaction(conn: sa.Connection) -> None:
    write = conn.get_execution_options().get(WRITE_OPTION, False)
    conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")


class Backend:
    """The SQL that differs per backend, as expressions the repository composes."""

    def __init__(self, dialect_name: str) -> None:
        self.is_postgres = dialect_name == "postgresql"

    def now(self) -> sa.ColumnElement[datetime]:
        if self.is_postgres:
            return sa.func.statement_timestamp(type_=UtcDateTime())
        return sa.func.strftime(SQLITE_NOW_FORMAT, "now", type_=UtcDateTime())

    def now_plus(self, seconds: float) -> sa.ColumnElement[datetime]:
        """The database's now, shifted by `seconds` (negative for the past)."""
        if self.is_postgres:
            return self.now() + sa.literal(timedelta(seconds=seconds), sa.Interval())
        return sa.func.strftime(
            SQLITE_NOW_FORMAT, "now", f"{seconds:+.6f} seconds", type_=UtcDateTime()
        )

    def insert(self, table: sa.Table) -> postgresql.Insert | sqlite.Insert:
        """An INSERT that supports `ON CONFLICT` on this backend."""
        return postgresql.insert(table) if self.is_postgres else sqlite.insert(table)
