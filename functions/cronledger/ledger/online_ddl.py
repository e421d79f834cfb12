"""Schema changes a revision makes while the previous release's code keeps running on the same
database (expand/contract: a revision only adds what old code ignores, and removes only what
no running code reads).

An index on a table in use is built `CONCURRENTLY` on PostgreSQL: a plain `CREATE INDEX`
blocks every write to the table until the build ends. PostgreSQL refuses that inside a
transaction block, so it runs in an autocommit block of its own (the revision's earlier
statements commit first; `transaction_per_migration` keeps a revision's steps in order). A
concurrent build that was interrupted leaves an invalid index behind, which `IF NOT EXISTS`
would take for a finished one: it is dropped and built again. SQLite has no concurrent build
and a single writer; it builds the index plainly in the revision's transaction.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op


def create_index_online(
    name: str, table: str, columns: Sequence[str], *, where: str | None = None
) -> None:
    """Create index `name` on `table` (partial when `where` is given) without blocking the
    table's writers on PostgreSQL; idempotent, so a migration interrupted here resumes."""
    condition = None if where is None else sa.text(where)
    context = op.get_context()
    if context.dialect.name != "postgresql":
        op.create_index(name, table, list(columns), sqlite_where=condition)
        return
    with context.autocommit_block():
        if not context.as_sql:
            # Entering the block, SQLAlchemy reads the isolation level to restore later, and
            # pg8000 opens a transaction to run that read before autocommit is switched on:
            # the build would be inside it. End it (a warning, not an error, when none is).
            op.execute("COMMIT")
            if _invalid_index(name):
                op.drop_index(name, table_name=table, postgresql_concurrently=True)
        op.create_index(
            name,
            table,
            list(columns),
            postgresql_where=condition,
            postgresql_concurrently=True,
            if_not_exists=True,
        )


def _invalid_index(name: str) -> bool:
    """Whether an index of this name exists but a concurrent build of it never finished."""
    found = (
        op.get_bind()
        .execute(
            sa.text(
                "SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
                "WHERE c.relname = :name AND pg_catalog.pg_table_is_visible(c.oid)"
            ),
            {"name": name},
        )
        .scalar_one_or_none()
    )
    return found is False
