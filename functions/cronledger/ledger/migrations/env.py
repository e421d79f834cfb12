"""Alembic environment for the ledger.

`Ledger.migrate()` hands over a connection already inside a transaction (and, on PostgreSQL,
holding the migration advisory lock); run by hand, this opens one from `-x url=…` or
`CRONLEDGER_DATABASE_URL`. The version table is namespaced, since the ledger may share its
database with other applications.
"""

from __future__ import annotations

import os

import sqlalchemy as sa
from alembic import context

from cronledger.ledger.backend import create_ledger_engine
from cronledger.ledger.tables import metadata

VERSION_TABLE = "cronledger_alembic_version"


def _migrate(connection: sa.Connection) -> None:
    context.configure(connection=connection, target_metadata=metadata, version_table=VERSION_TABLE)
    with context.begin_transaction():
        context.run_migrations()


def _run() -> None:
    if context.is_offline_mode():
        raise SystemExit("offline (--sql) migrations are not supported; pass a database URL")
    connection = context.config.attributes.get("connection")
    if connection is not None:
        _migrate(connection)
        return
    url = context.get_x_argument(as_dictionary=True).get("url") or os.environ.get(
        "CRONLEDGER_DATABASE_URL"
    )
    if not url:
        raise SystemExit("say which database: -x url=… or CRONLEDGER_DATABASE_URL")
    engine = create_ledger_engine(url)
    try:
        with engine.connect() as conn:
            _migrate(conn)
            conn.commit()
    finally:
        engine.dispose()


_run()
