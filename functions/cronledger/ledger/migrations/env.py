"""Alembic environment for the ledger.

Each revision runs in a transaction of its own (`transaction_per_migration`), so a revision
that builds an index `CONCURRENTLY` (which PostgreSQL refuses inside a transaction block) can
leave it for an autocommit block, and a run stopped halfway resumes after the last revision
that committed. `Ledger.migrate()` hands over a connection outside any transaction (on
PostgreSQL, holding the session's migration advisory lock); one already inside a transaction
keeps it, which only revisions without an autocommit block accept. Run by hand, this opens a
connection from `-x url=…` or `CRONLEDGER_DATABASE_URL`. Offline (`--sql`), it writes the
PostgreSQL script a revision range would run, which the tests lint.

Every PostgreSQL session that migrates waits at most `LOCK_TIMEOUT` for a table lock: DDL
queued behind a long transaction would otherwise hold every later reader and writer of that
table behind it. A revision that times out is rolled back whole and tried again
(`Ledger.migrate`). The version table is namespaced, since the ledger may share its database
with other applications.
"""

from __future__ import annotations

import os
from typing import Any

import sqlalchemy as sa
from alembic import context

from cronledger.ledger.backend import create_ledger_engine
from cronledger.ledger.migration import VERSION_TABLE
from cronledger.ledger.tables import metadata

LOCK_TIMEOUT = "5s"


def _options() -> dict[str, Any]:
    return {
        "target_metadata": metadata,
        "version_table": VERSION_TABLE,
        "transaction_per_migration": True,
    }


def _migrate(connection: sa.Connection) -> None:
    if connection.dialect.name == "postgresql":
        external = connection.in_transaction()
        connection.execute(sa.text(f"SET lock_timeout = '{LOCK_TIMEOUT}'"))
        if not external:  # leave the connection as it came: outside a transaction
            connection.commit()
    context.configure(connection=connection, **_options())
    with context.begin_transaction():
        context.run_migrations()


def _write_script() -> None:
    context.configure(
        url=sa.URL.create("postgresql+pg8000"),
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
        **_options(),
    )
    context.execute(f"SET lock_timeout = '{LOCK_TIMEOUT}'")
    # As `Ledger.migrate` without a deadline: an index build may outlast any other statement.
    context.execute("SET statement_timeout = 0")
    with context.begin_transaction():
        context.run_migrations()


def _run() -> None:
    if context.is_offline_mode():
        _write_script()
        return
    connection = context.config.attributes.get("connection")
    if connection is not None:
        _migrate(connection)
        return
    url = context.get_x_argument(as_dictionary=True).get("url") or os.environ.get(
        "CRONLEDGER_DATABASE_URL"
    )
    if not url:
        raise SystemExit("say which database: -x url=… or CRONLEDGER_DATABASE_URL")
    engine = create_ledger_engine(url, statement_timeout_ms=None)
    try:
        with engine.connect() as conn:
            _migrate(conn)
            conn.commit()
    finally:
        engine.dispose()


_run()
