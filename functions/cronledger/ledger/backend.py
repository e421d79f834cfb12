"""Engines, and the only places PostgreSQL and SQLite differ: the clock, the upsert, how a
batch of rows reaches a statement, and how a write transaction begins.

The clock is always the database's. On PostgreSQL, "now" is `statement_timestamp()`: one
value for the whole statement (so it can drive an index scan), yet it moves on between the
statements of one transaction, unlike `now()`, which is frozen at transaction start, and
unlike `clock_timestamp()` it is not re-read row by row. A lease ends at "now" + lease, and
"now" is never earlier than the moment the caller asked, so a holder that times its lease
from just before its call never outlives it, however long the statement then waited.
On SQLite, "now" is `strftime(..., 'now')` (constant within a statement, millisecond
precision) padded to the six fractional digits the stored text uses, so text comparison
is instant comparison.

A batch (a reconcile pass's rows and cursor moves) reaches PostgreSQL as one JSON parameter
that the statement turns back into typed rows (`jsonb_array_elements`): the statement's text,
its parameter count and its compile stay the same for ten rows or ten thousand, no giant OR
or CASE reaches the planner (nor its JIT, which can spend many minutes, deaf to cancellation,
compiling one), and encoding it is one `json.dumps` rather than a bound parameter, and
pg8000's Python, per cell. SQLite gets multi-row VALUES and per-row conditions instead.

Every PostgreSQL connection is bounded in time: the server cancels a statement that runs past
`statement_timeout` (sent as a startup parameter: no SET, no round trip), the socket gives up
on a connection that stays silent for `socket_timeout_secs` (a half-open connection after a
failover would otherwise wait for the function's own timeout), and opening one, handshake
included, takes at most `connect_timeout_secs` (`cronledger.ledger.connecting`).
Either raises `DatabaseUnavailable` (`cronledger.ledger.store`). Behind RDS Proxy, which takes
no startup parameters, the statement timeout comes from the database's own default instead
(`Ledger.make_statement_timeout_default`, which the deploy's migration sets).

SQLite runs in WAL mode with a busy timeout, and every transaction that writes starts with
`BEGIN IMMEDIATE`: it takes the write lock up front instead of upgrading a read lock halfway,
which under concurrent writers fails at once rather than waiting.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.dialects import postgresql

from cronledger.ledger.connecting import CONNECT_TIMEOUT_SECS, BoundedConnect
from cronledger.ledger.shards import SQLITE_FUNCTION, shard_key
from cronledger.ledger.tables import UtcDateTime

if TYPE_CHECKING:
    from sqlalchemy.dialects import sqlite

SQLITE_BUSY_TIMEOUT_SECS = 30.0
SQLITE_NOW_FORMAT = "%Y-%m-%d %H:%M:%f000"  # %f is SS.SSS; pad to microseconds
WRITE_OPTION = "cronledger_write"
#: Connections a PostgreSQL engine keeps open: the local runner's 16 workers and a few more.
PG_POOL_SIZE = 24
#: The database URL's switch for named prepared statements (not passed on to pg8000).
PREPARED_STATEMENTS_QUERY = "prepared_statements"
#: The defaults of `CRONLEDGER_DB_STATEMENT_TIMEOUT_MS` and `…_SOCKET_TIMEOUT_SECS`.
STATEMENT_TIMEOUT_MS = 30_000
SOCKET_TIMEOUT_SECS = 40.0


def create_ledger_engine(
    url: str | sa.URL,
    *,
    prepared_statements: bool = True,
    statement_timeout_ms: int | None = STATEMENT_TIMEOUT_MS,
    socket_timeout_secs: float | None = SOCKET_TIMEOUT_SECS,
    connect_timeout_secs: float = CONNECT_TIMEOUT_SECS,
    password: Callable[[], str] | None = None,
    **engine_options: Any,
) -> sa.Engine:
    """An engine for `postgresql+pg8000://…` or `sqlite:///path` (a file: the local runner's
    threads must share one database, which an in-memory SQLite cannot give them).
    `prepared_statements` (PostgreSQL only; see `cronledger.ledger.driver`): off when the
    URL says `?prepared_statements=false`, as it must behind a transaction-pooling PgBouncer,
    which hands each transaction a different server session. The three timeouts are
    PostgreSQL's (see the module header); `statement_timeout_ms=None` sends none, leaving the
    database's default, and `socket_timeout_secs=None` lets a read wait as long as it takes. `password`, when given, makes the password of each new connection
    (an IAM token, good for minutes)."""
    parsed = sa.make_url(url)
    backend = parsed.get_backend_name()
    if backend == "postgresql":
        if parsed.get_driver_name() != "pg8000":
            raise ValueError(f"use postgresql+pg8000://, not {parsed.drivername}://")
        switch = parsed.query.get(PREPARED_STATEMENTS_QUERY, "true")
        if switch not in ("true", "false"):
            raise ValueError(f"?{PREPARED_STATEMENTS_QUERY}= takes true or false, not {switch!r}")
        prepared_statements = prepared_statements and switch == "true"
        parsed = parsed.difference_update_query([PREPARED_STATEMENTS_QUERY])
        # The pool keeps as many connections as the busiest caller uses at once (the local
        # runner: its workers, two loops and the API), because a connection beyond it is
        # opened and closed around every transaction, and opening one costs more than the
        # transaction (pg8000 builds a TLS context each time). Connections are only opened
        # when needed: a Lambda still holds one or two.
        connect_args = {"timeout": socket_timeout_secs, **engine_options.pop("connect_args", {})}
        startup: dict[str, str] = {}
        if statement_timeout_ms is not None:
            startup["statement_timeout"] = str(statement_timeout_ms)
        if prepared_statements:
            # A prepared statement is planned for the values it runs with and the table as
            # it is now: a generic plan cached while the table was small (a scan of a few
            # pages) would otherwise be reused after a burst made it large, and a start by
            # primary key would read every row. Planning these statements costs far less.
            startup["plan_cache_mode"] = "force_custom_plan"
        if startup:
            connect_args["startup_params"] = startup
        engine = sa.create_engine(
            parsed,
            **{
                "pool_size": PG_POOL_SIZE,
                "connect_args": connect_args,
                **engine_options,
            },
        )
        from cronledger.ledger.driver import tune_pg8000_engine  # pg8000, for PostgreSQL only

        tune_pg8000_engine(engine)
        connect = BoundedConnect(
            connect_timeout_secs, password, prepared_statements=prepared_statements
        )
        event.listen(engine, "do_connect", connect)
        return engine
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
    dbapi_connection.create_function(SQLITE_FUNCTION, 1, shard_key, deterministic=True)


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

    def now_plus_bound(self, name: str) -> sa.ColumnElement[datetime]:
        """The database's now, shifted by the seconds bound to parameter `name` at
        execution: one statement text for every shift (a retry's backoff differs each time)."""
        seconds = sa.bindparam(name, type_=sa.Float())
        if self.is_postgres:
            return self.now() + sa.func.make_interval(0, 0, 0, 0, 0, 0, seconds)
        return sa.func.strftime(
            SQLITE_NOW_FORMAT, "now", sa.func.printf("%+.6f seconds", seconds), type_=UtcDateTime()
        )

    def insert(self, table: sa.Table) -> postgresql.Insert | sqlite.Insert:
        """An INSERT that supports `ON CONFLICT` on this backend."""
        if self.is_postgres:
            return postgresql.insert(table)
        from sqlalchemy.dialects import sqlite  # loaded with a SQLite engine; Lambda has none

        return sqlite.insert(table)

    def json_rows(self, *columns: sa.ColumnElement[Any]) -> sa.ColumnElement[str]:
        """An aggregate: the selected rows as one JSON text, an array of arrays with the
        columns in this order, documents nested as JSON, instants as ISO 8601 text
        (`instant_of_json` reads them), `[]` for no rows. For a read of thousands of rows:
        pg8000 decodes a row cell by cell in Python (about a microsecond each), one JSON
        text in C."""
        if self.is_postgres:
            rows = sa.func.json_agg(sa.func.json_build_array(*columns))
            return sa.cast(sa.func.coalesce(rows, sa.literal_column("'[]'::json")), sa.Text)
        nested = (sa.func.json(c) if isinstance(c.type, sa.JSON) else c for c in columns)
        return sa.func.json_group_array(sa.func.json_array(*nested), type_=sa.Text)

    def rows(
        self, name: str, columns: Mapping[str, tuple[sa.types.TypeEngine[Any], Sequence[Any]]]
    ) -> sa.CTE:
        """PostgreSQL only: rows `name(column, …)` of the given columns (values of one
        length per column), to select from or join against in one statement. They travel
        as one JSON array of arrays, each cell read back by position and cast to its type:
        half the bytes of an array of objects, and half the time to encode. A column (but
        the first) whose values are all the same, as a pass's rows mostly share their instant,
        status and target, travels once, as a parameter of its own, not in every row."""
        if not self.is_postgres:
            raise NotImplementedError("a JSON batch is PostgreSQL's; SQLite batches use VALUES")
        shared = {
            column: values[0]
            for i, (column, (_, values)) in enumerate(columns.items())
            if i and len(values) > 1 and values.count(values[0]) == len(values)
        }
        cells = [
            _instants_text(values) if isinstance(type_, sa.DateTime) else values
            for column, (type_, values) in columns.items()
            if column not in shared
        ]
        document = json.dumps(list(zip(*cells, strict=True)), separators=(",", ":"))
        source = sa.cast(
            sa.bindparam(f"{name}_rows", document, type_=sa.Text()), postgresql.JSONB()
        )
        element = sa.func.jsonb_array_elements(source).table_valued("value").alias(f"{name}_row")
        positions = iter(range(len(cells)))
        return sa.select(
            *(
                sa.cast(
                    sa.bindparam(f"{name}_{column}", shared[column], type_=type_)
                    if column in shared
                    else element.c.value.op("->>")(sa.literal_column(str(next(positions)))),
                    type_,
                ).label(column)
                for column, (type_, _) in columns.items()
            )
        ).cte(name)  # a CTE: a statement may read the rows twice, the document goes once


def instant_of_json(text: str | None) -> datetime | None:
    """An instant `json_rows` carried, aware UTC: PostgreSQL writes it with its offset,
    SQLite as its stored naive UTC text."""
    if text is None:
        return None
    at = datetime.fromisoformat(text)
    return at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)


def _instants_text(values: Sequence[datetime | None]) -> list[str | None]:
    """Each instant as ISO 8601 text. A batch repeats its instants (the channels due at one
    minute share it, and their cursors' moves), so each distinct one is formatted once."""
    text: dict[datetime, str] = {}
    return [None if v is None else text.get(v) or text.setdefault(v, v.isoformat()) for v in values]
