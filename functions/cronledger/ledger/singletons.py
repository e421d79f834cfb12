"""Singleton keys (`cron_singletons`): slots, the one waiting contender, and replacement.

A key has slot rows `0..slots-1`. A slot is held by one occurrence under a lease and a
fencing token that climbs on every acquisition; a released or expired slot keeps its row, so
its next holder still gets a higher token. Under `queue_one` the row at `WAITER_SLOT` holds
the key's one waiting contender under a lease of its own: taking that place is the same
conditional upsert as taking a slot, so two contenders can never both wait.

These functions run inside the caller's transaction, which writes singleton rows before any
occurrence row (the lock order, `store.py`); each is one conditional statement whose answer
is what it matched.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from cronledger.ledger.backend import Backend
from cronledger.ledger.tables import occurrences, singletons

#: The slot row of a `queue_one` key's waiting contender (never a running holder's).
WAITER_SLOT = -1


def acquire_slot(
    conn: sa.Connection,
    sql: Backend,
    key: str,
    slots: int,
    occurrence_id: str,
    holder: str,
    lease_secs: float,
) -> tuple[int, int] | None:
    """(slot, fencing token) of the first slot this occurrence can hold, or None. One upsert
    per slot: a slot never used is inserted with token 1; a released or abandoned one (its
    lease ran out) is taken with the next token; a live holder's is left alone (the upsert's
    condition fails and nothing comes back)."""
    for slot in range(slots):
        token = _take(conn, sql, key, slot, occurrence_id, holder, lease_secs)
        if token is not None:
            return slot, token
    return None


def take_waiter_place(
    conn: sa.Connection, sql: Backend, key: str, occurrence_id: str, lease_secs: float
) -> bool:
    """Make this occurrence the key's waiting contender, unless another one waits under a
    live lease."""
    return _take(conn, sql, key, WAITER_SLOT, occurrence_id, None, lease_secs) is not None


def waiter_of(conn: sa.Connection, sql: Backend, key: str) -> str | None:
    """The occurrence waiting on `key` under a live lease, if any. On PostgreSQL the row is
    locked until the transaction ends, so the answer holds while the caller acts on it."""
    stmt = (
        sa.select(singletons.c.occurrence_id)
        .where(singletons.c.singleton_key == key)
        .where(singletons.c.slot == WAITER_SLOT)
        .where(singletons.c.occurrence_id.is_not(None))
        .where(singletons.c.lease_until >= sql.now())
    )
    if sql.is_postgres:
        stmt = stmt.with_for_update()
    found: str | None = conn.execute(stmt).scalar_one_or_none()
    return found


def oldest_holder(conn: sa.Connection, sql: Backend, key: str) -> tuple[int, str, int] | None:
    """(slot, occurrence id, fencing token) of the live holder of `key` that started first,
    its slot row locked on PostgreSQL; None when no slot is held live."""
    stmt = (
        sa.select(singletons.c.slot, singletons.c.occurrence_id, singletons.c.fencing_token)
        .join(occurrences, occurrences.c.id == singletons.c.occurrence_id)
        .where(singletons.c.singleton_key == key)
        .where(singletons.c.slot >= 0)
        .where(singletons.c.lease_until >= sql.now())
        .order_by(occurrences.c.started_at, singletons.c.slot)
        .limit(1)
    )
    if sql.is_postgres:
        stmt = stmt.with_for_update(of=singletons)
    row = conn.execute(stmt).one_or_none()
    return None if row is None else (int(row[0]), str(row[1]), int(row[2]))


def take_slot_from(
    conn: sa.Connection,
    sql: Backend,
    key: str,
    slot: int,
    fencing_token: int,
    occurrence_id: str,
    holder: str,
    lease_secs: float,
) -> int | None:
    """Hand a held slot to this occurrence under the next token, if it is still held under
    `fencing_token`: the previous holder's renew, settle and release then match nothing."""
    token = conn.execute(
        sa.update(singletons)
        .where(singletons.c.singleton_key == key)
        .where(singletons.c.slot == slot)
        .where(singletons.c.fencing_token == fencing_token)
        .values(
            occurrence_id=occurrence_id,
            holder=holder,
            fencing_token=singletons.c.fencing_token + 1,
            lease_until=sql.now_plus(lease_secs),
        )
        .returning(singletons.c.fencing_token)
    ).scalar_one_or_none()
    return None if token is None else int(token)


def renew_slot(
    conn: sa.Connection,
    sql: Backend,
    occurrence_id: str,
    holder: str,
    fencing_token: int,
    lease_secs: float,
) -> bool:
    return (
        conn.execute(
            sa.update(singletons)
            .where(singletons.c.occurrence_id == occurrence_id)
            .where(singletons.c.holder == holder)
            .where(singletons.c.fencing_token == fencing_token)
            .values(lease_until=sql.now_plus(lease_secs))
        ).rowcount
        == 1
    )


def release_slot(
    conn: sa.Connection,
    occurrence_id: str,
    fencing_token: int,
    *,
    holder: str | None = None,
    key: str | None = None,
) -> bool:
    stmt = (
        sa.update(singletons)
        .where(singletons.c.occurrence_id == occurrence_id)
        .where(singletons.c.fencing_token == fencing_token)
        .values(occurrence_id=None, holder=None, lease_until=None)
    )
    if holder is not None:
        stmt = stmt.where(singletons.c.holder == holder)
    if key is not None:
        stmt = stmt.where(singletons.c.singleton_key == key)
    return conn.execute(stmt).rowcount == 1


def release_slots_of(
    conn: sa.Connection,
    occurrence_ids: Sequence[str] | sa.Select[Any],
    *,
    expired_by: sa.ColumnElement[Any] | None = None,
) -> None:
    """Free every slot (and waiting place) these occurrences hold; with `expired_by` (the
    database's now), only those whose lease ran out before it. Released, not deleted: the
    row keeps its fencing token, so the slot's next holder still gets a higher one."""
    stmt = (
        sa.update(singletons)
        .where(singletons.c.occurrence_id.in_(occurrence_ids))
        .values(occurrence_id=None, holder=None, lease_until=None)
    )
    if expired_by is not None:
        stmt = stmt.where(singletons.c.lease_until < expired_by)
    conn.execute(stmt)


def _take(
    conn: sa.Connection,
    sql: Backend,
    key: str,
    slot: int,
    occurrence_id: str,
    holder: str | None,
    lease_secs: float,
) -> int | None:
    lease_until = sql.now_plus(lease_secs)
    take = sql.insert(singletons).values(
        singleton_key=key,
        slot=slot,
        occurrence_id=occurrence_id,
        holder=holder,
        fencing_token=1,
        lease_until=lease_until,
    )
    token = conn.execute(
        take.on_conflict_do_update(
            index_elements=[singletons.c.singleton_key, singletons.c.slot],
            set_={
                "occurrence_id": occurrence_id,
                "holder": holder,
                "fencing_token": singletons.c.fencing_token + 1,
                "lease_until": lease_until,
            },
            where=sa.or_(
                singletons.c.occurrence_id.is_(None),
                singletons.c.lease_until < sql.now(),
            ),
        ).returning(singletons.c.fencing_token)
    ).scalar_one_or_none()
    return None if token is None else int(token)
