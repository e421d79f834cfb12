"""Schema changes a revision makes while the previous release keeps running (expand/contract:
add only what old code ignores, remove only what no running code reads). On PostgreSQL an index
is built `CONCURRENTLY`, so writes go on; an interrupted build's invalid index, which `IF NOT
EXISTS` would take for a finished one, is dropped and built again. SQLite builds plainly.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa
from alembic import op

from cronledger.ledger.models import DeadlineReached

#: Rows one batch of a backfill updates: each batch short, its locks brief.
BACKFILL_BATCH = 10_000


def create_index_online(
    name: str,
    table: str,
    columns: Sequence[str | sa.TextClause],
    *,
    where: str | None = None,
    **postgresql: Any,
) -> None:
    """Create index `name` on `table` (partial under `where`; a `text` column is an
    expression), idempotent, without blocking writers; `postgresql`: its own options."""
    condition = None if where is None else sa.text(where)
    context = op.get_context()
    if context.dialect.name != "postgresql":
        op.create_index(name, table, list(columns), sqlite_where=condition)
        return
    with _outside_transactions():
        if not context.as_sql and _invalid_index(name):
            op.drop_index(name, table_name=table, postgresql_concurrently=True)
        op.create_index(
            name,
            table,
            list(columns),
            postgresql_where=condition,
            postgresql_concurrently=True,
            if_not_exists=True,
            **postgresql,
        )


def drop_index_online(name: str, table: str) -> None:
    """Drop index `name` of `table` if it exists, without blocking readers or writers."""
    context = op.get_context()
    if context.dialect.name != "postgresql":
        op.drop_index(name, table_name=table, if_exists=True)
        return
    with _outside_transactions():
        op.drop_index(name, table_name=table, postgresql_concurrently=True, if_exists=True)


@contextmanager
def _outside_transactions() -> Iterator[None]:
    """PostgreSQL: statements each committed on its own. pg8000 opens a transaction for
    SQLAlchemy's isolation-level read on entering the autocommit block: it is ended here, or
    what follows would run inside it."""
    context = op.get_context()
    with context.autocommit_block():
        if not context.as_sql:
            op.execute("COMMIT")
        yield


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


def backfill_online(
    table: str, values: str, pending: str, *, key: str = "id", batch: int = BACKFILL_BATCH
) -> int:
    """From a revision: `backfill_in_batches` within the migration's deadline, if any."""
    context = op.get_context()
    until = context.config.attributes.get("until") if context.config is not None else None
    if context.as_sql:  # an offline script: one statement shows what runs
        op.execute(_batch_statement(table, values, pending, key, batch))
        return 0
    if context.dialect.name != "postgresql":
        return backfill_in_batches(op.get_bind(), table, values, pending, key=key, batch=batch)
    with _outside_transactions():
        return backfill_in_batches(
            op.get_bind(), table, values, pending, key=key, batch=batch, until=until
        )


def backfill_in_batches(
    conn: sa.Connection,
    table: str,
    values: str,
    pending: str,
    *,
    key: str = "id",
    batch: int = BACKFILL_BATCH,
    until: float | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> int:
    """`UPDATE table SET values` on the rows `pending` selects, `batch` rows a statement, each
    committed on its own; `pending` excludes rows done, so a run stopped at `until`
    (`DeadlineReached`) resumes there. Answers the rows updated."""
    statement = _batch_statement(table, values, pending, key, batch)
    done = 0
    while True:
        if until is not None and clock() >= until:
            raise DeadlineReached(
                f"backfilling {table} stopped at its deadline after {done} row(s); the next "
                "migration resumes it"
            )
        count = conn.execute(statement).rowcount
        done += count
        if count < batch:
            return done


def _batch_statement(table: str, values: str, pending: str, key: str, batch: int) -> sa.TextClause:
    # Names and conditions come from a revision's own source, never from input.
    return sa.text(
        f"UPDATE {table} SET {values} WHERE {key} IN "
        f"(SELECT {key} FROM {table} WHERE {pending} LIMIT {int(batch)})"
    )
