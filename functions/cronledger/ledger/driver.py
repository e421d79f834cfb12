"""The pg8000 connection SQLAlchemy drives: a statement costs one round trip. Loaded with a
PostgreSQL engine (`cronledger.ledger.backend`), never for SQLite.

SQLAlchemy sends the same few statement texts over and over, so each connection keeps them as
named prepared statements, parsed once: a later execution is one Bind + Execute round trip,
where pg8000's own cursor waits on Parse and Describe first.

A transaction begins where SQLAlchemy begins one (its `begin` event), its BEGIN sent with its
first statement, so statements outside SQLAlchemy's transactions (a listener's, a ping) cannot
leave a pooled connection inside one, and a transaction that sent nothing commits nothing.

Also here: a faster `timestamptz` reader, a liveness check on checkout only after idling, and
a quiet close of a connection the server already cut.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime
from itertools import islice
from typing import Any, NamedTuple

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


class Prepared(NamedTuple):
    """A statement prepared on one connection: its server-side name and how pg8000 reads
    its rows."""

    text: str
    name: bytes
    columns: Any
    input_funcs: Any


class Connection(pg8000.dbapi.Connection):  # type: ignore[misc]  # pg8000 is untyped
    """pg8000's DB-API connection, whose cursors run `Connection.run`. `sock` is required
    (`cronledger.ledger.connecting` opens it) and kept as `socket`, so its timeout can change
    once connected. `prepared_statements=False` behind a pooler that must stay free to move a
    client between server sessions (RDS Proxy pins a session that prepares one)."""

    def __init__(self, *args: Any, prepared_statements: bool = True, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.socket = kwargs["sock"]
        self.prepared_statements = prepared_statements
        self.statements: OrderedDict[str, Prepared] = OrderedDict()
        #: SQLAlchemy began a transaction whose BEGIN is not sent yet.
        self.begin_pending = False

    def cursor(self) -> Cursor:
        return Cursor(self)

    def run(self, text: str, values: Sequence[Any]) -> Any:
        """pg8000's result (`rows`, `row_count`, `columns`) of `text`, its `%s` placeholders
        bound to `values`: a named prepared statement, prepared on first use, unless the
        connection prepares none; the simple query protocol for a statement without any."""
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
            prepared = Prepared(converted, *self.prepare_statement(converted, ()))
            self.statements[text] = prepared
            if len(self.statements) > PREPARED_PER_CONNECTION:
                _, oldest = self.statements.popitem(last=False)
                self.close_prepared_statement(oldest.name)
        else:
            self.statements.move_to_end(text)
        params = make_params(self.py_types, values)
        try:
            return self.execute_named(
                prepared.name, params, prepared.columns, prepared.input_funcs, prepared.text
            )
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
        """A connection the server cut (`pg_terminate_backend`, a restart, a failover)
        cannot say goodbye: pg8000 fails writing its Terminate message, though it closes the
        socket all the same, and the pool would log that failure with two tracebacks, after
        the statement's own error has already said the database went away."""
        try:
            super().close()
        except InterfaceError as exc:
            log.debug("closed a connection the server had cut: %s", exc)


class Cursor:
    """A DB-API cursor over `Connection.run`; rows come whole, as pg8000's do."""

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

    def __iter__(self) -> Iterator[Any]:
        return self.rows

    def close(self) -> None:
        self.rows = iter(())

    def setinputsizes(self, *sizes: Any) -> None:
        pass

    def setoutputsize(self, size: int, column: int | None = None) -> None:
        pass


def tune_pg8000_engine(engine: sa.Engine) -> None:
    """The events a PostgreSQL engine of `Connection`s needs (see the module header)."""
    event.listen(engine, "connect", _configure_connection)
    event.listen(engine, "checkin", _mark_idle)
    event.listen(engine, "checkout", _ping_if_idle)
    event.listen(engine, "begin", _begin)


def _configure_connection(dbapi_connection: Any, _record: Any) -> None:
    # pg8000 reads every timestamptz with `strptime` (~15 µs): a pass over ten thousand
    # channels reads forty thousand of them. The server's text form is ISO 8601, which
    # `fromisoformat` reads in well under a microsecond; anything else (infinity, BC) goes to
    # pg8000's own reader.
    dbapi_connection.register_in_adapter(TIMESTAMPTZ, _timestamptz_in)


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
