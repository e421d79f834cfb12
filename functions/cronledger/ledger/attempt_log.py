"""The attempt log: every attempt of an occurrence on record, written with the attempt itself.

- An attempt's row is inserted by the transaction that moves its occurrence to `running`,
  from what that UPDATE returned (on PostgreSQL, a CTE of the INSERT: one statement), so a
  start that loses leaves no row.
- Its end is written by whatever ends the attempt, in the same transaction (a settle, a
  cancel or replace, a claim finding the lease ran out), matching only the occurrence's open
  row: one attempt runs at a time, so a second end writes nothing.
- Rows go with their occurrence: the foreign key cascades its delete.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from cronledger.ledger.backend import Backend
from cronledger.ledger.models import Attempt
from cronledger.ledger.tables import attempts, occurrences

#: Each column of an attempt's row, and what the running UPDATE returns for it, in order.
_LOGGED = {
    "occurrence_id": occurrences.c.id,
    "number": occurrences.c.attempt,
    "claimant": occurrences.c.claimed_by,
    "started_at": occurrences.c.started_at,
    "fencing_token": occurrences.c.fencing_token,
}


def logged_start(sql: Backend, running: sa.Update) -> sa.Insert | sa.Update:
    """PostgreSQL: `running` (an UPDATE to `running`, without RETURNING) as a CTE of the
    INSERT of its attempt's row, answering the start time. SQLite cannot put an UPDATE in a
    CTE: `running` itself, returning what `run_logged_start` inserts."""
    if not sql.is_postgres:
        return running.returning(*_LOGGED.values())
    started, insert = started_and_logged(running)
    return insert.add_cte(started).returning(attempts.c.started_at)


def run_logged_start(
    conn: sa.Connection, sql: Backend, statement: sa.Insert | sa.Update, parameters: dict[str, Any]
) -> datetime | None:
    """Run a `logged_start` statement: the start time, or None when the start matched
    nothing (and nothing was written)."""
    if sql.is_postgres:
        started: datetime | None = conn.execute(statement, parameters).scalar_one_or_none()
        return started
    row = conn.execute(statement, parameters).one_or_none()
    if row is None:
        return None
    conn.execute(sa.insert(attempts).values(dict(zip(_LOGGED, row, strict=True))))
    return row.started_at  # type: ignore[no-any-return]


def started_and_logged(running: sa.Update) -> tuple[sa.CTE, sa.Insert]:
    """PostgreSQL only: `running` as the CTE `started` (returning `_LOGGED`), and the INSERT
    of its attempt's row from it."""
    started = running.returning(*_LOGGED.values()).cte("started")
    return started, sa.insert(attempts).from_select(list(_LOGGED), sa.select(*started.c))


def ending(sql: Backend, of: sa.ColumnElement[bool], **values: Any) -> sa.Update:
    """The end of the open attempt of each occurrence `of` matches (on `attempts`), with
    `values` (its outcome, error, detail)."""
    open_rows = sa.and_(of, attempts.c.ended_at.is_(None))
    return sa.update(attempts).where(open_rows).values(ended_at=sql.now(), **values)


def end_statement(sql: Backend) -> sa.Update:
    """The end of occurrence `p_id`'s open attempt: `p_status`, `p_error`, `p_detail`."""
    return ending(
        sql,
        attempts.c.occurrence_id == sa.bindparam("p_id", type_=sa.String),
        outcome=sa.bindparam("p_status", type_=sa.String),
        error_message=sa.bindparam("p_error", type_=sa.Text),
        error_detail=sa.bindparam("p_detail", type_=sa.Text),
    )


def end_open(
    conn: sa.Connection,
    sql: Backend,
    occurrence_ids: Sequence[str],
    outcome: str,
    error: str | None = None,
) -> None:
    """End the open attempt of each of these occurrences (a cancel, a replace, a claim that
    found their leases expired), all with the same outcome and error."""
    if occurrence_ids:
        of = attempts.c.occurrence_id.in_(list(occurrence_ids))
        conn.execute(ending(sql, of, outcome=outcome, error_message=error))


def attempts_of(conn: sa.Connection, occurrence_id: str) -> list[Attempt]:
    """The occurrence's attempts, first to last."""
    rows = conn.execute(
        sa.select(attempts)
        .where(attempts.c.occurrence_id == occurrence_id)
        .order_by(attempts.c.number)
    ).all()
    return [Attempt(*row) for row in rows]
