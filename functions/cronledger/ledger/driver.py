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
per transaction), a quiet close of a connection the server already cut, and
`DirectStatements`, which sends the statements of every attempt without SQLAlchemy's
per-execution machinery.
"""

from __future__ import annotations

import logging
import socket
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event

log = logging.getLogger(__name__)

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


def sqlstate(exc: BaseException) -> str | None:
    """The SQLSTATE of a server error pg8000 raised (`exc` or the driver error SQLAlchemy
    wrapped), or None."""
    original = getattr(exc, "orig", exc)
    details = original.args[0] if getattr(original, "args", None) else None
    return details.get("C") if isinstance(details, dict) else None


def tune_pg8000_engine(engine: sa.Engine, *, prepared_statements: bool = True) -> None:
    """`prepared_statements=False` behind a connection pooler that must stay free to move
    a client between server sessions (RDS Proxy pins a session that prepares one)."""
    event.listen(engine, "connect", _configure_connection)
    event.listen(engine, "checkin", _mark_idle)
    event.listen(engine, "checkout", _on_checkout)
    if prepared_statements:
        event.listen(engine, "do_execute", _execute_prepared)
    _close_cut_connections_quietly(engine.dialect)


def _close_cut_connections_quietly(dialect: Any) -> None:
    """A connection the server cut (`pg_terminate_backend`, a restart, a failover) cannot say
    goodbye: pg8000's close fails writing its Terminate message, though it closes the socket
    all the same, and the pool would log that failure with two tracebacks for every such
    connection, after the statement's own error has already said the database went away."""
    from pg8000.exceptions import InterfaceError  # the driver is loaded with the engine

    def quietly(close: Callable[[Any], None]) -> Callable[[Any], None]:
        def close_quietly(dbapi_connection: Any) -> None:
            try:
                close(dbapi_connection)
            except InterfaceError as exc:
                log.debug("closed a connection the server had cut: %s", exc)

        return close_quietly

    dialect.do_close = quietly(dialect.do_close)
    dialect.do_terminate = quietly(dialect.do_terminate)


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


def _on_checkout(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
    if dbapi_connection._in_transaction:
        # Something left a transaction open (a `connect` listener that ran SQL, say). The
        # statements handed this connection run in autocommit, so they would run inside it
        # and the pool's rollback on check-in would undo them while their callers count
        # them written: end it first (committing what that something did).
        dbapi_connection.commit()
    _ping_if_idle(dbapi_connection, record)


def _ping_if_idle(dbapi_connection: Any, record: Any) -> None:
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
    context = _run_prepared(connection, statement, parameters)
    cursor._context = context
    cursor._row_iter = iter(() if context.rows is None else context.rows)
    return True


def _run_prepared(connection: Any, statement: str, parameters: Any) -> Any:
    """Execute `statement` (SQLAlchemy's text, `%s` placeholders) as the connection's
    prepared statement for it, prepared the first time, and answer pg8000's result."""
    from pg8000.converters import make_params  # loaded by now; not at this module's import

    prepared: OrderedDict[str, tuple[Any, ...]] | None = getattr(
        connection, "_cronledger_prepared", None
    )
    if prepared is None:
        prepared = connection._cronledger_prepared = OrderedDict()
    entry = prepared.get(statement)
    if entry is None:
        from pg8000.dbapi import convert_paramstyle

        text, _ = convert_paramstyle("format", statement, ())
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
        if sqlstate(exc) in STALE_STATEMENT_STATES:
            prepared.pop(statement, None)
        raise


#: A bind parameter the caller must give (it has no value of its own in the statement).
_REQUIRED = object()


#: Engine events around a statement's execution: with a listener for any of them, the
#: statement goes through SQLAlchemy.
_EXECUTION_EVENTS = (
    "engine_connect",
    "before_execute",
    "after_execute",
    "before_cursor_execute",
    "after_cursor_execute",
    "begin",
    "commit",
    "rollback",
)


@dataclass(frozen=True, slots=True)
class DirectStatement:
    """A Core statement compiled once for the engine: its text, where each positional
    parameter comes from, and how each returned column is read."""

    text: str
    #: (parameter name, its value when the caller gives none or `_REQUIRED`, bind processor)
    binds: tuple[tuple[str, Any, Any], ...]
    #: (column position, the type's result processor) for each column that has one
    readers: tuple[tuple[int, Any], ...]


class DirectStatements:
    """Single statements sent straight on a pooled pg8000 connection as its prepared
    statements, outside a transaction (each is atomic by itself and committed as it ends),
    without SQLAlchemy's execution layer.

    For the few statements every attempt sends (claim and its in-flight count, open,
    settle). Per execution,
    SQLAlchemy's Connection, transaction, execution context and result objects cost about
    as much Python as the driver itself: sending these this way took the Python of a no-op
    attempt from 0.78 to 0.63 ms of CPU (the lifecycle of `make bench`), and the attempt
    threads of one process share one interpreter lock, so that is throughput. The
    statements are still built with SQLAlchemy Core and compiled by its dialect, with the
    same bind and result processing per type (result types are read without the driver's
    type code, which none of the ledger's column types needs); what is skipped is the
    per-call machinery. A lost connection is handled as SQLAlchemy handles it: dropped,
    with every pooled connection older than it, and raised as SQLAlchemy would raise it.

    `for_engine` gives None (use SQLAlchemy) when the engine has no prepared statements
    (behind RDS Proxy; there SQLAlchemy's cursor is also what X-Ray traces)."""

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine

    @classmethod
    def for_engine(cls, engine: sa.Engine) -> DirectStatements | None:
        if engine.dialect.name != "postgresql":
            return None
        return cls(engine) if _execute_prepared in engine.dialect.dispatch.do_execute else None

    def observed(self) -> bool:
        """Whether a listener watches executions now: an engine event around execution, or
        a dialect event beyond this module's `do_execute`. The statement then goes through
        SQLAlchemy, which gives listeners the connection and context they expect. (Not
        SQLAlchemy's own `_has_events`: it stays set once any listener was ever added.)"""
        dialect = self.engine.dialect.dispatch
        if dialect.handle_error or dialect.do_setinputsizes or len(dialect.do_execute) > 1:
            return True
        dispatch = self.engine.dispatch
        return any(getattr(dispatch, name) for name in _EXECUTION_EVENTS)

    def compile(self, statement: sa.Select[Any] | sa.Update) -> DirectStatement:
        dialect = self.engine.dialect
        compiled: Any = statement.compile(dialect=dialect)
        binds = []
        for name in compiled.positiontup or ():
            bind = compiled.binds[name]
            if bind.expanding or bind.literal_execute or bind.callable is not None:
                raise ValueError(f"{name}: a direct statement takes plain parameters only")
            default = _REQUIRED if bind.required else bind.effective_value
            binds.append((name, default, bind.type.dialect_impl(dialect).bind_processor(dialect)))
        readers = tuple(
            (position, read)
            for position, column in enumerate(getattr(statement, "exported_columns", ()))
            for read in [column.type.dialect_impl(dialect).result_processor(dialect, None)]
            if read is not None
        )
        return DirectStatement(compiled.string, tuple(binds), readers)

    def run(
        self, pooled: Any, statement: DirectStatement, parameters: dict[str, Any]
    ) -> tuple[list[list[Any]], int]:
        """The rows the statement returned and the row count the server reported for it
        (rows changed by a write, rows returned by a read), run on `pooled` (the engine's
        `raw_connection()`, which the caller closes)."""
        values = []
        for name, default, process in statement.binds:
            value = parameters.get(name, default)
            if value is _REQUIRED:
                raise sa.exc.ArgumentError(f"a value is required for bind parameter {name!r}")
            values.append(value if process is None else process(value))
        connection = pooled.driver_connection
        try:
            context = _run_prepared(connection, statement.text, values)
        except OSError as exc:  # the socket itself failed (pg8000 lets some through)
            self.engine.pool._invalidate(pooled, exc)
            raise
        except Exception as exc:
            if not isinstance(exc, self.engine.dialect.loaded_dbapi.Error):
                pooled.invalidate(exc)
                raise
            raise self._translated(pooled, statement, values, exc) from exc
        except BaseException as exc:  # interrupted mid-message: the connection is unusable
            pooled.invalidate(exc)
            raise
        rows = [list(row) for row in context.rows or ()]
        for row in rows:
            for position, read in statement.readers:
                row[position] = read(row[position])
        return rows, context.row_count

    def _translated(
        self, pooled: Any, statement: DirectStatement, values: Any, exc: Exception
    ) -> sa.exc.StatementError:
        """The exception SQLAlchemy would have raised. A lost connection is dropped, and so
        is every pooled connection opened before it (they likely went with it: a restart or
        failover), as SQLAlchemy's own execution path does."""
        dialect = self.engine.dialect
        lost = dialect.is_disconnect(exc, pooled.dbapi_connection, None)  # type: ignore[arg-type]
        if lost:
            self.engine.pool._invalidate(pooled, exc)
        return sa.exc.DBAPIError.instance(
            statement.text,
            values,
            exc,
            Exception,  # `exc` is the driver's own `Error`: checked by the caller
            hide_parameters=self.engine.hide_parameters,
            connection_invalidated=lost,
            dialect=dialect,
        )
