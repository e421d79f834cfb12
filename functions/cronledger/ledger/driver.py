"""The pg8000 connection a PostgreSQL engine drives (`backend`; never loaded for SQLite).

SQLAlchemy sends the same few statement texts over and over: each connection keeps them as
named prepared statements, so a later execution is one Bind + Execute round trip. BEGIN goes
out with the first statement of a transaction SQLAlchemy began (its `begin` event), so SQL run
outside one (a listener's, a ping) never leaves a pooled connection inside a transaction, and a
transaction that sent nothing commits nothing.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime
from itertools import islice
from typing import Any

import pg8000.dbapi
import sqlalchemy as sa
from pg8000.converters import TIMESTAMPTZ, make_params, timestamptz_in
from pg8000.dbapi import convert_paramstyle
from pg8000.exceptions import DatabaseError, InterfaceError
from sqlalchemy import event

from cronledger.ledger.store import sqlstate

log = logging.getLogger(__name__)

#: Prepared statements a connection keeps (least recently used closed first).
PREPARED_PER_CONNECTION = 256
#: SQLSTATEs meaning a prepared statement no longer fits the schema (its result type
#: changed) or is gone: it is prepared afresh next time.
STALE_STATEMENT_STATES = frozenset({"0A000", "26000"})
#: A connection idle this long is checked before use (a proxy or a frozen Lambda may have
#: dropped it); a fresher one that died anyway fails as `DatabaseUnavailable`.
PING_AFTER_IDLE_SECS = 10.0


class Connection(pg8000.dbapi.Connection):  # type: ignore[misc]  # pg8000 is untyped
    """pg8000's connection on the socket `connecting` opened (kept, so its timeout can change
    once connected), whose cursors run `run`. `prepared_statements=False` behind a pooler that
    moves a client between server sessions (RDS Proxy pins a session that prepares one)."""

    def __init__(self, *args: Any, prepared_statements: bool = True, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.socket = kwargs["sock"]
        self.prepared_statements = prepared_statements
        #: Per statement text: pg8000's text, then what `prepare_statement` answered.
        self.statements: OrderedDict[str, tuple[Any, ...]] = OrderedDict()
        #: SQLAlchemy began a transaction whose BEGIN is not sent yet.
        self.begin_pending = False
        # pg8000 reads timestamptz with `strptime`, many times slower than `fromisoformat` on
        # the server's ISO 8601 text; what that cannot read (infinity, BC) goes to pg8000's.
        self.register_in_adapter(TIMESTAMPTZ, _timestamptz_in)

    def cursor(self) -> Cursor:
        return Cursor(self)

    def run(self, text: str, values: Sequence[Any]) -> Any:
        """pg8000's result of `text` with its `%s` placeholders bound to `values`: a named
        prepared statement (unless the connection prepares none), or a simple query if none."""
        if self.begin_pending:
            self.begin_pending = False
            self.execute_simple("begin transaction")
        if not values:
            return self.execute_simple(text)
        if not self.prepared_statements:
            return self.execute_unnamed(convert_paramstyle("format", text, ())[0], vals=values)
        prepared = self.statements.get(text)
        if prepared is None:
            converted, _ = convert_paramstyle("format", text, ())
            prepared = self.statements[text] = (converted, *self.prepare_statement(converted, ()))
            if len(self.statements) > PREPARED_PER_CONNECTION:
                _, (_, oldest_name, *_) = self.statements.popitem(last=False)
                self.close_prepared_statement(oldest_name)
        else:
            self.statements.move_to_end(text)
        converted, name, columns, input_funcs = prepared
        params = make_params(self.py_types, values)
        try:
            return self.execute_named(name, params, columns, input_funcs, converted)
        except DatabaseError as exc:
            if sqlstate(exc) in STALE_STATEMENT_STATES:
                self.statements.pop(text, None)
            raise

    def commit(self) -> None:
        """COMMIT in one round trip (pg8000's takes three), and none at all for a
        transaction that sent no statement."""
        if self.begin_pending:
            self.begin_pending = False
        else:
            self.execute_simple("commit")

    def rollback(self) -> None:
        self.begin_pending = False
        super().rollback()

    def close(self) -> None:
        """Quiet when the server already cut the connection: pg8000 fails to send Terminate
        (closing the socket all the same), which the pool would log with two tracebacks."""
        try:
            super().close()
        except InterfaceError as exc:
            log.debug("closed a connection the server had cut: %s", exc)


class Cursor:
    """As much of a DB-API cursor as SQLAlchemy uses, over `Connection.run`; rows come whole."""

    arraysize = 1

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self.description: list[tuple[Any, ...]] | None = None
        self.rowcount = -1
        self.rows: Iterator[Any] = iter(())

    def execute(self, operation: str, args: Sequence[Any] = ()) -> None:
        context = self.connection.run(operation, args)
        columns = context.columns
        self.description = (
            [(c["name"], c["type_oid"], None, None, None, None, None) for c in columns]
            if columns
            else None
        )
        self.rowcount = context.row_count
        self.rows = iter(context.rows or ())

    def executemany(self, operation: str, param_sets: Iterable[Sequence[Any]]) -> None:
        total = 0
        for args in param_sets:
            self.execute(operation, args)
            total += max(self.rowcount, 0)
        self.rowcount = total

    def fetchone(self) -> Any:
        return next(self.rows, None)

    def fetchmany(self, size: int | None = None) -> list[Any]:
        return list(islice(self.rows, self.arraysize if size is None else size))

    def fetchall(self) -> list[Any]:
        return list(self.rows)

    def close(self) -> None:
        self.rows = iter(())


def tune_pg8000_engine(engine: sa.Engine, connect: Any) -> None:
    """The events a PostgreSQL engine of `Connection`s needs, `connect` (`connecting`) opening
    each one."""
    event.listen(engine, "do_connect", connect)
    event.listen(engine, "checkin", _mark_idle)
    event.listen(engine, "checkout", _ping_if_idle)
    event.listen(engine, "begin", _begin)


def _timestamptz_in(text: str) -> Any:
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return timestamptz_in(text)


def _mark_idle(_dbapi_connection: Any, record: Any) -> None:
    if record is not None:
        record.info["idle_since"] = time.monotonic()


def _ping_if_idle(dbapi_connection: Any, record: Any, proxy: Any) -> None:
    idle_since = record.info.get("idle_since")
    if idle_since is None or time.monotonic() - idle_since < PING_AFTER_IDLE_SECS:
        return
    try:
        # The simple-query protocol outside a transaction: one round trip, no BEGIN.
        dbapi_connection.run(";", ())
    except Exception as exc:
        # The pool discards this connection and checks out (or opens) another.
        raise sa.exc.DisconnectionError(f"pooled connection is dead: {exc}") from exc


def _begin(conn: sa.Connection) -> None:
    driver: Any = conn.connection.driver_connection
    driver.begin_pending = not driver.autocommit
