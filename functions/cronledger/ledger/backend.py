"""Engines, and the only places PostgreSQL and SQLite differ: the clock, the upsert, how a
batch of rows reaches a statement, and how a write transaction begins.

The clock is the database's. PostgreSQL's is `statement_timestamp()`: one value per statement
(it can drive an index scan), moving on within a transaction, never earlier than the call, so
a lease timed from just before the call is never outlived. SQLite's is padded to the six
fractional digits its stored text has, so text comparison is instant comparison.

A batch reaches PostgreSQL as one JSON parameter turned back into typed rows: one statement
text for ten rows or ten thousand, and no giant OR or CASE for the planner. SQLite gets
multi-row VALUES or runs the statement once a row (`Batch`), runs in WAL mode, and a
transaction that writes begins `IMMEDIATE`: it takes the write lock up front rather than fail
upgrading a read lock.

A PostgreSQL connection is bounded in time by `statement_timeout` (a startup parameter, or the
database's default behind RDS Proxy), a socket timeout and a connect timeout (`connecting`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.dialects import postgresql

from cronledger.ledger.connecting import CONNECT_TIMEOUT_SECS, BoundedConnect
from cronledger.ledger.shards import SQLITE_FUNCTION, shard_key
from cronledger.ledger.tables import UtcDateTime, as_utc

if TYPE_CHECKING:
    from sqlalchemy.dialects import sqlite

SQLITE_BUSY_TIMEOUT_SECS = 30.0
SQLITE_NOW_FORMAT = "%Y-%m-%d %H:%M:%f000"  # %f is SS.SSS; pad to microseconds
WRITE_OPTION = "cronledger_write"
#: Connections a PostgreSQL engine keeps open: the local runner's 16 workers and a few more
#: (opening one costs more than the transaction it would serve).
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
    """An engine for `postgresql+pg8000://…` or `sqlite:///file` (the local runner's threads
    share it). PostgreSQL: `?prepared_statements=false` turns them off (`driver`), as behind
    a transaction-pooling PgBouncer; a timeout of None leaves the database's default or
    waits; `password` makes each new connection's password (an IAM token)."""
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
        connect_args = {"timeout": socket_timeout_secs, **engine_options.pop("connect_args", {})}
        startup: dict[str, str] = {}
        if statement_timeout_ms is not None:
            startup["statement_timeout"] = str(statement_timeout_ms)
        if prepared_statements:
            # Planned for the values and the table as they are: a generic plan cached while
            # the table was small would scan it whole once a burst made it large.
            startup["plan_cache_mode"] = "force_custom_plan"
        if startup:
            connect_args["startup_params"] = startup
        engine = sa.create_engine(
            parsed, **{"pool_size": PG_POOL_SIZE, "connect_args": connect_args, **engine_options}
        )
        from cronledger.ledger.driver import tune_pg8000_engine  # pg8000, for PostgreSQL only

        connect = BoundedConnect(connect_timeout_secs, password, prepared_statements)
        tune_pg8000_engine(engine, connect)
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
    dbapi_connection.execute("PRAGMA journal_mode=WAL")
    dbapi_connection.execute("PRAGMA synchronous=NORMAL")
    dbapi_connection.execute("PRAGMA foreign_keys=ON")
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
        """An aggregate: the selected rows as one JSON text, an array of arrays (documents
        nested, instants as ISO 8601 for `instant_of_json`), decoded in C where pg8000
        decodes rows cell by cell in Python."""
        if self.is_postgres:
            rows = sa.func.json_agg(sa.func.json_build_array(*columns))
            return sa.cast(sa.func.coalesce(rows, sa.literal_column("'[]'::json")), sa.Text)
        nested = (sa.func.json(c) if isinstance(c.type, sa.JSON) else c for c in columns)
        return sa.func.json_group_array(sa.func.json_array(*nested), type_=sa.Text)

    def _rows(
        self, name: str, columns: Mapping[str, tuple[sa.types.TypeEngine[Any], Sequence[Any]]]
    ) -> sa.CTE:
        """PostgreSQL (`batch`): rows `name(column, …)` sent as one JSON array of arrays, each
        cell cast back to its type. A column (but the first) whose values are all the same
        travels once, as a parameter of its own."""
        shared = {
            column: values[0]
            for i, (column, (_, values)) in enumerate(columns.items())
            if i and len(values) > 1 and values.count(values[0]) == len(values)
        }
        cells = [
            _instants_text(values) if isinstance(type_, UtcDateTime) else values
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

    def batch(
        self, name: str, columns: Mapping[str, tuple[sa.types.TypeEngine[Any], Sequence[Any]]]
    ) -> Batch:
        """The rows one statement is written for (`Batch`): the given columns (equal lengths,
        instants typed `UtcDateTime`), the first their key."""
        if self.is_postgres:
            rows = self._rows(name, columns)
            return Batch({column: rows.c[column] for column in columns})
        params = {
            column: sa.bindparam(f"{name}_{column}", type_=type_)
            for column, (type_, _) in columns.items()
        }
        names = [param.key for param in params.values()]
        cells = zip(*(values for _, values in columns.values()), strict=True)
        return Batch(params, [dict(zip(names, row, strict=True)) for row in cells])


@dataclass(frozen=True)
class Batch:
    """Rows a statement is written for, a column each (`c`). On PostgreSQL they are a CTE of
    one JSON parameter and the statement runs once; on SQLite they are bound parameters and it
    runs once a row (`params`, for `Connection.execute`)."""

    c: Mapping[str, sa.ColumnElement[Any]]
    params: list[dict[str, Any]] | None = None

    def has(self, column: sa.ColumnElement[Any]) -> sa.ColumnElement[bool]:
        """`column` holds one of the batch's keys (its first column)."""
        key = next(iter(self.c.values()))
        if self.params is None:
            return column.in_(sa.select(key))
        return column == key


def instant_of_json(text: str | None) -> datetime | None:
    """An instant `json_rows` carried, aware UTC."""
    return None if text is None else as_utc(datetime.fromisoformat(text))


def _instants_text(values: Sequence[datetime | None]) -> list[str | None]:
    """Each instant as ISO 8601 text, each distinct one formatted once (a batch repeats them)."""
    text: dict[datetime, str] = {}
    return [None if v is None else text.get(v) or text.setdefault(v, v.isoformat()) for v in values]
