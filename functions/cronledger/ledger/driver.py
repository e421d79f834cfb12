"""What the PostgreSQL engine does to pg8000 so a statement costs one round trip.

pg8000's DB-API cursor sends every parameterised statement as an unnamed statement: Parse
(wait), Describe (wait), Bind + Execute (wait), three round trips, after rescanning the
statement's text in Python, character by character, to turn `%s` into `$1`. SQLAlchemy sends
the same few statement texts over and over (its compiled cache), so here each connection
keeps them as *named prepared statements*, converted and parsed once: every later execution
is a single Bind + Execute message and one round trip. This is what libpq-based drivers and
asyncpg do too. It lives here, behind SQLAlchemy's `do_execute` hook, because it reaches into
pg8000's cursor (pinned to 1.31 in pyproject.toml; a test checks the hook is still taken).

Also here: TCP_NODELAY, a faster `timestamptz` reader, a liveness check on checkout only
for a connection that sat idle (a ping on every checkout was a round trip, plus its BEGIN,
per transaction), and `DirectStatements`, which sends the statements of every attempt
without SQLAlchemy's per-execution machinery.
"""

from __future__ import annotations

import socket
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event

#: Prepared statements a connection keeps (least recently used closed first). The ledger
#: sends a few dozen distinct statements; the API's filters add some.
PREPARED_PER_CONNECTION = 256
#: SQLSTATEs meaning a prepared statement no longer fits the schema (its result type
#: changed) or is gone: it is prepared afresh next time.
STALE_STATEMENT_STATES = frozenset({"0A000", "26000"})
#: A connection idle this long is checked before use: RDS Proxy, Aurora or a frozen Lambda
#: may have dropped it in between. One used more recently is trusted; if it has died after
#: all, the statement fails as `DatabaseUnavailable` and the pool drops it.
PING_AFTER_IDLE_SECS = 10.0


def tune_pg8000_engine(engine: sa.Engine, *, prepared_statements: bool = True) -> None:
    """`prepared_statements=False` behind a connection pooler that must stay free to move
    a client between server sessions (RDS Proxy pins a session that prepares one)."""
    event.listen(engine, "connect", _configure_connection)
    event.listen(engine, "checkin", _mark_idle)
    event.listen(engine, "checkout", _ping_if_idle)
    if prepared_statements:
        event.listen(engine, "do_execute", _execute_prepared)


def _configure_connection(dbapi_connection: Any, _record: Any) -> None:
    # pg8000 leaves Nagle's algorithm on. A message larger than its write buffer (a batch's
    # JSON parameter) leaves in several segments, and the last one waits for the server's
    # delayed ACK: 40 ms per statement on Linux. libpq turns it off the same way.
    sock = getattr(dbapi_connection, "_usock", None)
    if sock is not None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    # pg8000 reads every timestamptz with `strptime` (~15 µs): a pass over ten thousand
    # channels reads forty thousand of them. The server's text form is ISO 8601, which
    # `fromisoformat` reads in well under a microsecond; anything else (infinity, BC) goes to
    # pg8000's own reader.
    from pg8000.converters import TIMESTAMPTZ  # the driver is loaded by now

    dbapi_connection.register_in_adapter(TIMESTAMPTZ, _timestamptz_in)


def _timestamptz_in(text: str) -> Any:
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        from pg8000.converters import timestamptz_in

        return timestamptz_in(text)


def _mark_idle(_dbapi_connection: Any, record: Any) -> None:
    if record is not None:
        record.info["idle_since"] = time.monotonic()


def _ping_if_idle(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
    idle_since = record.info.get("idle_since")
    if idle_since is None or time.monotonic() - idle_since < PING_AFTER_IDLE_SECS:
        return
    try:
        # The simple-query protocol outside a transaction: one round trip, no BEGIN.
        dbapi_connection.execute_simple(";")
    except Exception as exc:
        # The pool discards this connection and checks out (or opens) another.
        raise sa.exc.DisconnectionError(f"pooled connection is dead: {exc}") from exc


def _execute_prepared(cursor: Any, statement: str, parameters: Any, _context: Any) -> bool:
    """Run a parameterised statement as this connection's named prepared statement.
    Answers False (SQLAlchemy then calls the cursor as usual) when the cursor carries
    explicit parameter types, which a prepared statement would have to match."""
    connection = cursor._c
    if cursor._input_oids or not isinstance(parameters, tuple | list):
        return False
    if not connection._in_transaction and not connection.autocommit:
        connection.execute_simple("begin transaction")  # as pg8000's own cursor does
    from pg8000.dbapi import convert_paramstyle  # loaded by now; not at this module's import

    context = _run_prepared(
        connection, statement, parameters, lambda: convert_paramstyle("format", statement, ())[0]
    )
    cursor._context = context
    cursor._row_iter = iter(() if context.rows is None else context.rows)
    return True


def _run_prepared(
    connection: Any, statement: str, parameters: Any, numbered: Callable[[], str]
) -> Any:
    """Execute `statement` (SQLAlchemy's text, `%s` placeholders) as the connection's
    prepared statement for it, preparing `numbered()` (the same text with `$n`) the first
    time, and answer pg8000's result context."""
    from pg8000.converters import make_params

    prepared: OrderedDict[str, tuple[Any, ...]] | None = getattr(
        connection, "_cronledger_prepared", None
    )
    if prepared is None:
        prepared = connection._cronledger_prepared = OrderedDict()
    entry = prepared.get(statement)
    if entry is None:
        text = numbered()
        entry = prepared[statement] = (text, *connection.prepare_statement(text, ()))
        if len(prepared) > PREPARED_PER_CONNECTION:
            _, (_, oldest, *_) = prepared.popitem(last=False)
            connection.close_prepared_statement(oldest)
    else:
        prepared.move_to_end(statement)
    text, name, columns, input_funcs = entry
    try:
        return connection.execute_named(
            name, make_params(connection.py_types, parameters), columns, input_funcs, text
        )
    except Exception as exc:
        details = exc.args[0] if exc.args else None
        if isinstance(details, dict) and details.get("C") in STALE_STATEMENT_STATES:
            prepared.pop(statement, None)
        raise


@dataclass(frozen=True, slots=True)
class DirectStatement:
    """A Core statement compiled once for the engine: its text, where each positional
    parameter comes from, and how each returned column is read."""

    text: str
    driver_text: str
    #: (parameter name, its value when the caller gives none, the type's bind processor)
    binds: tuple[tuple[str, Any, Any], ...]
    #: the type's result processor per returned column (None: the driver's value as is)
    readers: tuple[Any, ...]


class DirectStatements:
    """Single statements sent straight on a pooled pg8000 connection, outside a transaction
    (each is atomic by itself), without SQLAlchemy's execution layer.

    For the few statements every attempt sends (open, settle, claim). Per execution,
    SQLAlchemy's Connection, transaction, execution context and result objects cost about
    as much Python as the driver itself: sending these three this way took the Python of a
    no-op attempt from 0.78 to 0.63 ms of CPU (the lifecycle of `make bench`), and the
    attempt threads of one process share one interpreter lock, so that is throughput. The
    statements are still built with SQLAlchemy
    Core and compiled by its dialect, with the same bind and result processing per type;
    what is skipped is the per-call machinery. Listeners of `before_cursor_execute` still
    see every statement. A connection failure invalidates the connection and raises as
    SQLAlchemy would have (the store turns it into `DatabaseUnavailable`)."""

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine
        self.prepared = event.contains(engine, "do_execute", _execute_prepared)

    def compile(self, statement: sa.Select[Any] | sa.Update) -> DirectStatement:
        dialect = self.engine.dialect
        compiled: Any = statement.compile(dialect=dialect)
        binds = []
        for name in compiled.positiontup or ():
            bind = compiled.binds[name]
            if bind.expanding or bind.literal_execute:
                raise ValueError(f"{name}: a direct statement takes plain parameters only")
            default = None if bind.required else bind.effective_value
            binds.append((name, default, bind.type.dialect_impl(dialect).bind_processor(dialect)))
        readers = tuple(
            column.type.dialect_impl(dialect).result_processor(dialect, None)
            for column in getattr(statement, "exported_columns", ())
        )
        from pg8000.dbapi import convert_paramstyle

        driver_text, _ = convert_paramstyle("format", compiled.string, ())
        return DirectStatement(compiled.string, driver_text, tuple(binds), readers)

    def run(
        self, pooled: Any, statement: DirectStatement, parameters: dict[str, Any]
    ) -> tuple[list[tuple[Any, ...]], int]:
        """The rows the statement returned and the rows it changed, run on `pooled` (the
        engine's `raw_connection()`, which the caller closes)."""
        values = tuple(
            process(value) if process is not None else value
            for name, default, process in statement.binds
            for value in [parameters.get(name, default)]
        )
        dispatch = self.engine.dispatch.before_cursor_execute
        if dispatch:  # listeners get a DB-API cursor, no SQLAlchemy connection or context
            dispatch(None, pooled.cursor(), statement.text, values, None, False)
        try:
            connection = pooled.driver_connection
            if self.prepared:
                context = _run_prepared(
                    connection, statement.text, values, lambda: statement.driver_text
                )
            else:
                context = connection.execute_unnamed(statement.driver_text, values)
        except Exception as exc:
            raise self._failed(pooled, statement, values, exc) from exc
        rows = context.rows or ()
        readers = statement.readers
        if any(readers):
            return [
                tuple(v if read is None else read(v) for read, v in zip(readers, row, strict=True))
                for row in rows
            ], context.row_count
        return [tuple(row) for row in rows], context.row_count

    def _failed(
        self, pooled: Any, statement: DirectStatement, values: Any, exc: Exception
    ) -> BaseException:
        """The exception SQLAlchemy would have raised; the connection is dropped from the
        pool if it is broken (or if the failure was not the driver's)."""
        dialect = self.engine.dialect
        dbapi = dialect.loaded_dbapi
        if not isinstance(exc, dbapi.Error):
            pooled.invalidate(exc)
            return exc
        lost = dialect.is_disconnect(exc, pooled.dbapi_connection, None)
        if lost:
            pooled.invalidate(exc)
        return sa.exc.DBAPIError.instance(
            statement.text, values, exc, dbapi.Error, connection_invalidated=lost, dialect=dialect
        )
