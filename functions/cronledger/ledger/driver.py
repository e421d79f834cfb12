"""What the PostgreSQL engine does to pg8000 so a statement costs one round trip.

pg8000's DB-API cursor sends every parameterised statement as an unnamed statement: Parse
(wait), Describe (wait), Bind + Execute (wait), three round trips, after rescanning the
statement's text in Python, character by character, to turn `%s` into `$1`. SQLAlchemy sends
the same few statement texts over and over (its compiled cache), so here each connection
keeps them as *named prepared statements*, converted and parsed once: every later execution
is a single Bind + Execute message and one round trip. This is what libpq-based drivers and
asyncpg do too. It lives here, behind SQLAlchemy's `do_execute` hook, because it reaches into
pg8000's cursor (pinned to 1.31 in pyproject.toml; a test checks the hook is still taken).

Also here: TCP_NODELAY, a faster `timestamptz` reader, and a liveness check on checkout only
for a connection that sat idle (a ping on every checkout was a round trip, plus its BEGIN,
per transaction).
"""

from __future__ import annotations

import socket
import time
from collections import OrderedDict
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
    from pg8000.converters import make_params  # loaded by now; not at this module's import

    prepared: OrderedDict[str, tuple[Any, ...]] | None = getattr(
        connection, "_cronledger_prepared", None
    )
    if prepared is None:
        prepared = connection._cronledger_prepared = OrderedDict()
    if not connection._in_transaction and not connection.autocommit:
        connection.execute_simple("begin transaction")  # as pg8000's own cursor does
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
        context = connection.execute_named(
            name, make_params(connection.py_types, parameters), columns, input_funcs, text
        )
    except Exception as exc:
        details = exc.args[0] if exc.args else None
        if isinstance(details, dict) and details.get("C") in STALE_STATEMENT_STATES:
            prepared.pop(statement, None)
        raise
    cursor._context = context
    cursor._row_iter = iter(() if context.rows is None else context.rows)
    return True
