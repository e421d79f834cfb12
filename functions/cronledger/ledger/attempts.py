"""Attempts: claim, start, renew, settle, release.

Every write here is conditional on ownership and its affected-row count is the answer;
nothing trusts an earlier read.
- A claim leases `pending` rows whose `due_at` has come (the instant, plus jitter or a retry's
  backoff), or `claimed`/`running` rows whose lease has expired (crash recovery), oldest due
  first, `attempt + 1`. PostgreSQL locks the chosen
  rows with `FOR UPDATE SKIP LOCKED` so concurrent claimers never wait on, or share, a row;
  SQLite runs the same `UPDATE … RETURNING` inside an immediate transaction.
- Starting takes the singleton slot and moves the occurrence `claimed → running` in one
  transaction: there is no instant at which an occurrence runs without holding its key.
- A slot acquisition bumps the slot's fencing token. Renew, settle and release are
  conditional on (occurrence, holder, token), so a superseded holder writes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from cronledger.excerpts import ERROR_MESSAGE_BYTES, truncate_excerpt
from cronledger.ledger.backend import Backend
from cronledger.ledger.models import (
    CLAIMED,
    LEASED_STATUSES,
    PENDING,
    RUNNING,
    SETTLED_STATUSES,
    SKIPPED_SINGLETON,
    AttemptStart,
    Occurrence,
    SingletonSpec,
)
from cronledger.ledger.store import Store
from cronledger.ledger.tables import occurrences, singletons, status_is


class AttemptStore(Store):
    def claim_due(self, claimant: str, limit: int, lease_secs: float) -> list[Occurrence]:
        """Lease up to `limit` claimable occurrences to `claimant`, oldest due first."""
        if limit <= 0:
            return []
        rows, _ = self._run(
            ("claim", lease_secs),
            lambda: self._claim_statement(lease_secs),
            {"p_claimant": claimant, "p_limit": limit},
        )
        claimed = [occurrence_of(row) for row in rows]
        # RETURNING promises no order; the caller gets the oldest due first.
        return sorted(claimed, key=lambda o: (o.due_at, o.scheduled_for, o.id))

    def _claim_statement(self, lease_secs: float) -> sa.Update:
        now = self._sql.now()
        limit = sa.bindparam("p_limit", type_=sa.Integer)
        # Two arms, each an index range scan that stops at the limit, rather than one OR
        # that would read the whole backlog on every claim: due `pending` rows, and
        # leases that ran out. Each arm locks its own rows, skipping another claimer's.
        pending = self._claimable(sa.and_(status_is(PENDING), occurrences.c.due_at <= now), limit)
        expired = self._claimable(
            sa.and_(status_is(*LEASED_STATUSES), occurrences.c.claimed_until < now), limit
        )
        both = sa.union_all(
            sa.select(pending.c.id, pending.c.due_at),
            sa.select(expired.c.id, expired.c.due_at),
        ).subquery()
        due = sa.select(both.c.id).order_by(both.c.due_at).limit(limit)
        return (
            sa.update(occurrences)
            .where(occurrences.c.id.in_(due.scalar_subquery()))
            .values(
                status=CLAIMED,
                claimed_by=param(occurrences.c.claimed_by, "p_claimant"),
                claimed_until=self._sql.now_plus(lease_secs),
                attempt=occurrences.c.attempt + 1,
                updated_at=now,
            )
            .returning(*occurrences.c)
        )

    def _claimable(
        self, condition: sa.ColumnElement[bool], limit: sa.BindParameter[int]
    ) -> sa.Subquery:
        arm = (
            sa.select(occurrences.c.id, occurrences.c.due_at)
            .where(condition)
            .order_by(occurrences.c.due_at)
            .limit(limit)
        )
        if self._sql.is_postgres:
            arm = arm.with_for_update(skip_locked=True)
        return arm.subquery()

    def start_attempt(
        self,
        occurrence: Occurrence | str,
        claimant: str,
        executing_version: int,
        singleton: SingletonSpec | None,
        lease_secs: float,
        *,
        trace_id: str | None = None,
    ) -> AttemptStart:
        """Take a slot of the singleton key (under `forbid`) and move the occurrence to
        `running`, in one transaction. A slot this occurrence still holds from an earlier attempt
        is given back (under `allow`, pass the `Occurrence` as read after the claim: one that
        shows no `singleton_key` holds none), then slots `0..slots-1` are tried in order: a
        free or expired one is taken, a missing one is inserted; every acquisition gets the
        slot's next fencing token, so the earlier attempt's writes stop matching. `trace_id`,
        when given, is recorded in the same write, so a run that dies is visible as started
        with its trace."""
        occurrence_id = occurrence if isinstance(occurrence, str) else occurrence.id
        # An earlier attempt of this occurrence (a crashed one, now re-claimed) may still
        # hold a slot: give it back first, so one occurrence never holds two. Under `allow`,
        # an occurrence read after its claim with no `singleton_key` holds none (a slot is
        # only taken together with it), so the statement is spared and the start is one
        # statement. Under `forbid` it always runs: a duplicate delivery that read the row
        # before its twin started must find its own slot free again, reach the conditional
        # UPDATE below and come out `lost`, not `singleton_busy`.
        release = (
            singleton is not None
            or isinstance(occurrence, str)
            or occurrence.singleton_key is not None
        )
        with self._write(single=not release) as conn:
            slot: int | None = None
            token: int | None = None
            if release:
                release_slots_of(conn, [occurrence_id])
            if singleton is not None:
                acquired = self._acquire_slot(conn, singleton, occurrence_id, claimant, lease_secs)
                if acquired is None:
                    conn.rollback()
                    return AttemptStart("singleton_busy")
                slot, token = acquired
            started_at = conn.execute(
                self._start_statement(lease_secs),
                {
                    "p_id": occurrence_id,
                    "p_claimant": claimant,
                    "p_version": executing_version,
                    "p_key": singleton.key if singleton else None,
                    "p_slot": slot,
                    "p_token": token,
                    "p_trace": trace_id,
                },
            ).scalar_one_or_none()
            if started_at is None:
                # Our lease ran out and a peer re-claimed it, or it was cancelled: the slot
                # taken above is rolled back with everything else.
                conn.rollback()
                return AttemptStart("lost")
        return AttemptStart("started", fencing_token=token, slot=slot, started_at=started_at)

    def renew(
        self, occurrence_id: str, claimant: str, fencing_token: int | None, lease_secs: float
    ) -> bool:
        """Extend a running attempt's claim and (with a token) its singleton slot, both or
        neither. False: ownership is lost and the attempt must stop without writing."""
        with self._write(single=fencing_token is None) as conn:
            if fencing_token is not None and not self._renew_slot(
                conn, occurrence_id, claimant, fencing_token, lease_secs
            ):
                conn.rollback()
                return False
            renewed = conn.execute(
                sa.update(occurrences)
                .where(occurrences.c.id == occurrence_id)
                .where(occurrences.c.claimed_by == claimant)
                .where(occurrences.c.status == RUNNING)
                .values(
                    claimed_until=self._sql.now_plus(lease_secs),
                    updated_at=self._sql.now(),
                )
            ).rowcount
            if renewed != 1:
                conn.rollback()
                return False
        return True

    def settle(
        self,
        occurrence_id: str,
        claimant: str,
        status: str,
        *,
        fencing_token: int | None = None,
        error_message: str | None = None,
        result: str | None = None,
        trace_id: str | None = None,
    ) -> bool:
        """Write the end of an attempt (`completed`, `failed`, `skipped_singleton`) and drop
        its lease, releasing its singleton slot in the same transaction. Conditional on the
        claimant still owning the occurrence and, with a token, the slot. False: a superseded
        holder, and nothing was written."""
        if status not in SETTLED_STATUSES:
            raise ValueError(f"cannot settle as {status!r}; use one of {SETTLED_STATUSES}")
        parameters = {
            "p_id": occurrence_id,
            "p_claimant": claimant,
            "p_status": status,
            "p_error": truncate_excerpt(error_message, ERROR_MESSAGE_BYTES),
            "p_result": truncate_excerpt(result),
            "p_trace": trace_id,
        }
        if fencing_token is None:
            return self._run("settle", self._settle_statement, parameters)[1] == 1
        with self._write() as conn:
            if not self._release_slot(conn, occurrence_id, fencing_token, holder=claimant):
                conn.rollback()
                return False
            settle = self._statement("settle", self._settle_statement)
            if conn.execute(settle, parameters).rowcount != 1:
                conn.rollback()
                return False
        return True

    def settle_skipped(self, occurrence_id: str, claimant: str, reason: str) -> bool:
        """Record `skipped_singleton` for a claimed occurrence whose key was busy."""
        return self.settle(occurrence_id, claimant, SKIPPED_SINGLETON, error_message=reason)

    def release_claim(self, occurrence_id: str, claimant: str) -> bool:
        """Hand a claimed, not yet started occurrence back to `pending`. The claim's attempt
        is given back too: a deferral is not an attempt."""
        stmt = (
            sa.update(occurrences)
            .where(occurrences.c.id == occurrence_id)
            .where(occurrences.c.claimed_by == claimant)
            .where(occurrences.c.status == CLAIMED)
            .values(
                status=PENDING,
                claimed_by=None,
                claimed_until=None,
                attempt=occurrences.c.attempt - 1,
                updated_at=self._sql.now(),
            )
        )
        with self._write(single=True) as conn:
            return conn.execute(stmt).rowcount == 1

    def release_singleton(self, key: str, occurrence_id: str, fencing_token: int) -> bool:
        """Free the slot of `key` this occurrence holds under `fencing_token`; a superseded
        holder matches nothing, so it cannot free the new holder's slot."""
        with self._write(single=True) as conn:
            return self._release_slot(conn, occurrence_id, fencing_token, key=key)

    def set_trace_id(self, occurrence_id: str, claimant: str, trace_id: str) -> bool:
        """Record the attempt's trace before its target runs, so a run that dies is visible
        as started. Conditional on ownership like every attempt write."""
        stmt = (
            sa.update(occurrences)
            .where(occurrences.c.id == occurrence_id)
            .where(occurrences.c.claimed_by == claimant)
            .where(status_is(*LEASED_STATUSES))
            .values(trace_id=trace_id, updated_at=self._sql.now())
        )
        with self._write(single=True) as conn:
            return conn.execute(stmt).rowcount == 1

    def _start_statement(self, lease_secs: float) -> sa.Update:
        """claimed → running, with the slot (if any) and trace id (kept when not given)."""

        def build() -> sa.Update:
            return running_update(
                self._sql,
                lease_secs,
                executing_version=param(occurrences.c.executing_version, "p_version"),
                singleton_key=param(occurrences.c.singleton_key, "p_key"),
                singleton_slot=param(occurrences.c.singleton_slot, "p_slot"),
                fencing_token=param(occurrences.c.fencing_token, "p_token"),
                trace_id=sa.func.coalesce(
                    param(occurrences.c.trace_id, "p_trace"), occurrences.c.trace_id
                ),
            ).returning(occurrences.c.started_at)

        return self._statement(("start", lease_secs), build)

    def _settle_statement(self) -> sa.Update:
        """A leased occurrence's end, conditional on its claimant; drops the lease."""

        return (
            sa.update(occurrences)
            .where(occurrences.c.id == param(occurrences.c.id, "p_id"))
            .where(occurrences.c.claimed_by == param(occurrences.c.claimed_by, "p_claimant"))
            .where(status_is(*LEASED_STATUSES))
            .values(
                status=param(occurrences.c.status, "p_status"),
                claimed_until=None,
                error_message=param(occurrences.c.error_message, "p_error"),
                result=param(occurrences.c.result, "p_result"),
                trace_id=sa.func.coalesce(
                    param(occurrences.c.trace_id, "p_trace"), occurrences.c.trace_id
                ),
                completed_at=self._sql.now(),
                updated_at=self._sql.now(),
            )
        )

    def _acquire_slot(
        self,
        conn: sa.Connection,
        singleton: SingletonSpec,
        occurrence_id: str,
        holder: str,
        lease_secs: float,
    ) -> tuple[int, int] | None:
        """(slot, fencing token) of the first slot this occurrence can hold, or None. One
        upsert per slot: a slot never used is inserted with token 1; a released or abandoned
        one (its lease ran out) is taken with the next token; a live holder's is left alone
        (the upsert's condition fails and nothing comes back)."""
        lease_until = self._sql.now_plus(lease_secs)
        for slot in range(singleton.slots):
            take = self._sql.insert(singletons).values(
                singleton_key=singleton.key,
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
                        singletons.c.lease_until < self._sql.now(),
                    ),
                ).returning(singletons.c.fencing_token)
            ).scalar_one_or_none()
            if token is not None:
                return slot, int(token)
        return None

    def _renew_slot(
        self,
        conn: sa.Connection,
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
                .values(lease_until=self._sql.now_plus(lease_secs))
            ).rowcount
            == 1
        )

    def _release_slot(
        self,
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


def running_update(sql: Backend, lease_secs: float, **values: Any) -> sa.Update:
    """claimed → running of occurrence `p_id` under claimant `p_claimant`, with what every
    start writes; `values` adds the rest (version, slot, trace)."""
    return (
        sa.update(occurrences)
        .where(occurrences.c.id == param(occurrences.c.id, "p_id"))
        .where(occurrences.c.claimed_by == param(occurrences.c.claimed_by, "p_claimant"))
        .where(status_is(CLAIMED))
        .values(
            status=RUNNING,
            started_at=sql.now(),
            claimed_until=sql.now_plus(lease_secs),
            updated_at=sql.now(),
            **values,
        )
    )


def occurrence_of(row: Sequence[Any]) -> Occurrence:
    """An occurrence from its table's columns, in table order (the model's fields are in
    that order: tests/ledger/test_schema.py checks)."""
    return Occurrence(*row)


def param(column: sa.Column[Any], name: str) -> sa.BindParameter[Any]:
    """A value bound at execution, typed as `column`."""
    return sa.bindparam(name, type_=column.type)


def release_slots_of(conn: sa.Connection, occurrence_ids: Sequence[str] | sa.Select[Any]) -> None:
    """Free every singleton slot these occurrences hold. Released, not deleted: the row keeps
    its fencing token, so the slot's next holder still gets a higher one."""
    conn.execute(
        sa.update(singletons)
        .where(singletons.c.occurrence_id.in_(occurrence_ids))
        .values(occurrence_id=None, holder=None, lease_until=None)
    )
