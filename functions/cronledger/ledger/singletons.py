"""Singleton keys (`cron_singletons`): slots, the one waiting contender, and replacement.

A key has slot rows `0..slots-1`. A slot is held by one occurrence under a lease and a
fencing token that climbs on every acquisition; a freed or expired slot keeps its row, so its
next holder still gets a higher token. Under `queue_one` the row at `WAITER_SLOT` holds the
key's one waiting contender under a lease of its own.

Every statement that writes slot rows locks them in (key, slot) order, so two transactions
never wait on each other both ways; a start locks every row it may touch in one read, then
decides in Python (`take_key`). Rows a key lacks are added by a statement of their own,
holding no lock. These functions run in the caller's transaction, which writes singleton
rows before occurrence rows (the lock order, `store.py`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa

from cronledger.ledger import attempt_log
from cronledger.ledger.backend import Backend
from cronledger.ledger.models import CANCELLED, LEASED_STATUSES, Occurrence, SingletonSpec
from cronledger.ledger.tables import occurrence_of, occurrences, singletons, status_rechecked

#: The slot row of a `queue_one` key's waiting contender (never a running holder's).
WAITER_SLOT = -1
#: A slot row's values once freed: it keeps its fencing token, so its next holder's is higher.
FREE = {"occurrence_id": None, "holder": None, "lease_until": None}


@dataclass(frozen=True, slots=True)
class SlotRow:
    """One slot row as locked: who holds it under which token, whether that lease is live
    (by the database's clock), and when its holder started (for `replace`)."""

    key: str
    slot: int
    occurrence_id: str | None
    fencing_token: int
    live: bool
    started_at: datetime | None


def lock_slots(conn: sa.Connection, sql: Backend, key: str, occurrence_id: str) -> list[SlotRow]:
    """Every slot row of `key`, and any row `occurrence_id` holds under another key, in
    (key, slot) order; on PostgreSQL each is locked, in that order, until the transaction
    ends, so what is decided from them still holds when it is written."""
    live = sa.and_(singletons.c.occurrence_id.is_not(None), singletons.c.lease_until >= sql.now())
    stmt = (
        sa.select(
            singletons.c.singleton_key,
            singletons.c.slot,
            singletons.c.occurrence_id,
            singletons.c.fencing_token,
            sa.case((live, sa.true()), else_=sa.false()),
            occurrences.c.started_at,
        )
        .select_from(
            singletons.outerjoin(occurrences, occurrences.c.id == singletons.c.occurrence_id)
        )
        .where(
            sa.or_(
                singletons.c.singleton_key == key,
                singletons.c.occurrence_id == occurrence_id,
            )
        )
        .order_by(singletons.c.singleton_key, singletons.c.slot)
    )
    if sql.is_postgres:
        stmt = stmt.with_for_update(of=singletons)
    return [SlotRow(*row) for row in conn.execute(stmt)]


def take_slot(
    conn: sa.Connection,
    sql: Backend,
    row: SlotRow,
    occurrence_id: str,
    holder: str | None,
    lease_secs: float,
) -> int | None:
    """Hand the slot `row` locked to this occurrence under the next token, if it is still
    at the token it was read with: whoever held it before then matches nothing with its
    renew, settle and release."""
    token = conn.execute(
        sa.update(singletons)
        .where(singletons.c.singleton_key == row.key)
        .where(singletons.c.slot == row.slot)
        .where(singletons.c.fencing_token == row.fencing_token)
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
    renew = sa.update(singletons).where(_held_under(occurrence_id, holder, fencing_token))
    return conn.execute(renew.values(lease_until=sql.now_plus(lease_secs))).rowcount == 1


def release_slot(
    conn: sa.Connection, occurrence_id: str, fencing_token: int, *, holder: str
) -> bool:
    """Free the slot this holder holds for this occurrence under `fencing_token`; a
    superseded holder matches nothing."""
    stmt = sa.update(singletons).where(_held_under(occurrence_id, holder, fencing_token))
    return conn.execute(stmt.values(FREE)).rowcount == 1


def release_slots_of(
    conn: sa.Connection,
    sql: Backend,
    occurrence_ids: Sequence[str] | sa.Select[Any],
    *,
    expired_by: sa.ColumnElement[Any] | None = None,
) -> set[tuple[str, int]]:
    """Free every slot (and waiting place) these occurrences hold; with `expired_by` (the
    database's now), only those whose lease ran out before it. Released, not deleted: the
    row keeps its fencing token, so the slot's next holder still gets a higher one. On
    PostgreSQL the rows are locked in (key, slot) order first, like a start's. Answers the
    (key, slot) of each row freed."""
    chosen = sa.select(singletons.c.singleton_key, singletons.c.slot).where(
        singletons.c.occurrence_id.in_(occurrence_ids)
    )
    if expired_by is not None:
        chosen = chosen.where(singletons.c.lease_until < expired_by)
    return _release_chosen(conn, sql, chosen)


def release_orphaned_slots(conn: sa.Connection, sql: Backend) -> set[tuple[str, int]]:
    """Free every slot (and waiting place) held by an occurrence that no longer exists."""
    gone = sa.not_(
        sa.exists().where(occurrences.c.id == singletons.c.occurrence_id).correlate(singletons)
    )
    chosen = sa.select(singletons.c.singleton_key, singletons.c.slot).where(
        singletons.c.occurrence_id.is_not(None), gone
    )
    return _release_chosen(conn, sql, chosen)


def _release_chosen(
    conn: sa.Connection, sql: Backend, chosen: sa.Select[tuple[str, int]]
) -> set[tuple[str, int]]:
    if sql.is_postgres:
        chosen = chosen.order_by(singletons.c.singleton_key, singletons.c.slot).with_for_update()
    freed = conn.execute(
        sa.update(singletons)
        .where(sa.tuple_(singletons.c.singleton_key, singletons.c.slot).in_(chosen))
        .values(FREE)
        .returning(singletons.c.singleton_key, singletons.c.slot)
    )
    return {(str(key), int(slot)) for key, slot in freed}


def add_key_rows(conn: sa.Connection, sql: Backend, spec: SingletonSpec) -> None:
    """The rows a start under `spec` may take: its slots and, under `queue_one`, the
    waiting place."""
    first = WAITER_SLOT if spec.policy == "queue_one" else 0
    # Token 0, so the first holder gets 1; rows already there, held or not, are left alone.
    rows = [
        {"singleton_key": spec.key, "slot": slot, "fencing_token": 0}
        for slot in range(first, spec.slots)
    ]
    conn.execute(
        sql.insert(singletons)
        .values(rows)
        .on_conflict_do_nothing(index_elements=[singletons.c.singleton_key, singletons.c.slot])
    )


def take_key(
    conn: sa.Connection,
    sql: Backend,
    spec: SingletonSpec,
    occurrence_id: str,
    holder: str,
    lease_secs: float,
    wait_secs: float,
) -> tuple[int, int, Occurrence | None] | str | None:
    """(slot, fencing token, replaced holder) of the slot this occurrence now holds,
    "busy" (give up) or "wait" (it has taken the key's waiting place); None when the key
    lacks a slot row it needs, before anything is written. Every row it may write is
    locked by the one read it starts with."""
    rows = lock_slots(conn, sql, spec.key, occurrence_id)
    of_key = {r.slot: r for r in rows if r.key == spec.key}
    waiter = of_key.get(WAITER_SLOT)
    if spec.policy == "queue_one" and _held_by_another(waiter, occurrence_id):
        return "busy"  # one contender already waits, and goes first when a slot frees
    needed = range(WAITER_SLOT if spec.policy == "queue_one" else 0, spec.slots)
    if any(slot not in of_key for slot in needed):  # see `add_key_rows`
        return None
    if any(r.occurrence_id == occurrence_id for r in rows):
        release_slots_of(conn, sql, [occurrence_id])
    # Holders of slots an edit has since removed still run: until they end, they count
    # against the key's slots like any other holder.
    holders = [r for r in of_key.values() if r.slot >= 0 and _held_by_another(r, occurrence_id)]
    free = [of_key[n] for n in range(spec.slots) if not _held_by_another(of_key[n], occurrence_id)]
    if free and len(holders) < spec.slots:
        token = take_slot(conn, sql, free[0], occurrence_id, holder, lease_secs)
        return "busy" if token is None else (free[0].slot, token, None)
    if spec.policy == "queue_one" and waiter is not None:
        # The place outlives the wait and a claim of the waiter in between.
        place_secs = lease_secs + wait_secs
        placed = take_slot(conn, sql, waiter, occurrence_id, None, place_secs)
        return "busy" if placed is None else "wait"
    if spec.policy == "replace":
        return _replace_oldest(conn, sql, holders, occurrence_id, holder, lease_secs)
    return "busy"


def _replace_oldest(
    conn: sa.Connection,
    sql: Backend,
    holders: list[SlotRow],
    occurrence_id: str,
    holder: str,
    lease_secs: float,
) -> tuple[int, int, Occurrence | None] | str:
    """Cancel the key's live holder that started first ("replaced by <this id>") and take
    its slot under the next token. Its slot row is among those locked already, so it
    cannot change hands meanwhile."""
    if not holders:
        return "busy"
    victim = min(holders, key=_start_order)
    replaced_by = f"replaced by {occurrence_id}"
    token = take_slot(conn, sql, victim, occurrence_id, holder, lease_secs)
    if token is None or victim.occurrence_id is None:
        return "busy"
    cancelled = conn.execute(
        sa.update(occurrences)
        .where(occurrences.c.id == victim.occurrence_id)
        .where(status_rechecked(*LEASED_STATUSES))
        .values(
            status=CANCELLED,
            claimed_until=None,
            error_message=replaced_by,
            completed_at=sql.now(),
            updated_at=sql.now(),
            overdue_at=None,
        )
        .returning(*occurrences.c)
    ).one_or_none()
    if cancelled is None:
        return victim.slot, token, None
    attempt_log.end_open(conn, sql, [victim.occurrence_id], CANCELLED, replaced_by)
    return victim.slot, token, occurrence_of(cancelled)


def _held_under(occurrence_id: str, holder: str, fencing_token: int) -> sa.ColumnElement[bool]:
    """The slot row `holder` holds for the occurrence, if still under `fencing_token`."""
    return sa.and_(
        singletons.c.occurrence_id == occurrence_id,
        singletons.c.holder == holder,
        singletons.c.fencing_token == fencing_token,
    )


def _held_by_another(row: SlotRow | None, occurrence_id: str) -> bool:
    """The slot is held under a live lease, and not by this occurrence."""
    return row is not None and row.live and row.occurrence_id != occurrence_id


def _start_order(row: SlotRow) -> tuple[bool, datetime, int]:
    """Holders by when they started (one with no start recorded last), then by slot."""
    return (row.started_at is None, row.started_at or datetime.min.replace(tzinfo=UTC), row.slot)
