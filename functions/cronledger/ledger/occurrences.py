"""Occurrences as records: materialise, read, list, retry, cancel, retain, purge.

Materialisation is insert-if-absent on `(channel_id, scheduled_for)`: a duplicate (a retried
tick, a second reconciler) loses to the row already there, whatever its id. Retry and cancel
are each one conditional UPDATE whose matched row is the answer; a read afterwards only tells
"no such occurrence" (404) from "wrong state" (409).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from operator import eq, ge, le
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from cronledger import alerts
from cronledger.errors import Conflict, NotFound
from cronledger.excerpts import ERROR_MESSAGE_BYTES, truncate_excerpt
from cronledger.instants import require_utc
from cronledger.ledger import attempt_log
from cronledger.ledger.backend import Backend, Batch
from cronledger.ledger.cursors import CursorStore
from cronledger.ledger.events import EventStore, draft
from cronledger.ledger.models import (
    ACTIVE_STATUSES,
    CANCELLED,
    CHANNEL_ACTIVE,
    CHANNEL_ARCHIVED,
    PENDING,
    RETRYABLE_STATUSES,
    SKIPPED_MISFIRE,
    TERMINAL_STATUSES,
    Attempt,
    CursorMove,
    Event,
    NewOccurrence,
    Occurrence,
    OccurrenceFilter,
    Page,
)
from cronledger.ledger.paging import given, read_page
from cronledger.ledger.singletons import release_slots_of
from cronledger.ledger.store import Store
from cronledger.ledger.tables import (
    attempts,
    channels,
    constant,
    occurrence_of,
    occurrences,
    status_is,
)

RETENTION_BATCH = 10_000  # rows per retention DELETE


class OccurrenceStore(Store):
    def __init__(self, base: Store, events: EventStore, cursors: CursorStore) -> None:
        super().__init__(base)
        self.events = events
        self.cursors = cursors

    def insert_occurrence(self, row: NewOccurrence) -> bool:
        """Materialise one occurrence; True when this call created it."""
        return self.insert_occurrences([row]) == 1

    def insert_occurrences(self, rows: Iterable[NewOccurrence]) -> int:
        """Materialise many occurrences, insert-if-absent, in one transaction; answers how
        many rows were inserted."""
        rows = list(rows)
        if not rows:
            return 0
        with self._write(single=True) as conn:
            return _insert_in(conn, self._sql, rows)

    def materialise(
        self, rows: Iterable[NewOccurrence], moves: Iterable[CursorMove]
    ) -> tuple[int, set[str]]:
        """A reconcile pass's writes, all or nothing (PostgreSQL: one statement): each move by
        its own compare-and-set, and the rows of exactly the channels whose cursor moved, so a
        cursor moved meanwhile gets none of this pass's rows. Answers (rows inserted, ids
        moved)."""
        rows, moves = list(rows), list(moves)
        if not moves:
            return 0, set()
        summaries = [row for row in rows if row.status == SKIPPED_MISFIRE]
        # A pass after an outage writes misfire summaries, and their events with them.
        with self._write(single=not summaries) as conn:
            if self._sql.is_postgres:
                moved, lost_moves = self.cursors._moves_statement(moves)
                inserted = sa.select(sa.literal(0))
                if rows:
                    only = sa.select(moved.c.channel_id)
                    inserted = _counted(_insert_statement(self._sql, _new(self._sql, rows), only))
                lost = sa.func.array(lost_moves.scalar_subquery())
                count, lost_ids = conn.execute(sa.select(inserted.scalar_subquery(), lost)).one()
                moved_ids = {m.channel_id for m in moves} - set(lost_ids)
            else:
                moved_ids = self.cursors._advance_in(conn, moves)
                mine = [row for row in rows if row.channel_id in moved_ids]
                count = _insert_in(conn, self._sql, mine) if mine else 0
            made = self._summary_events(conn, summaries)
        self.events.announce(made)
        return int(count), moved_ids

    def _summary_events(self, conn: sa.Connection, summaries: list[NewOccurrence]) -> list[Event]:
        """`occurrence.skipped` for each misfire summary this transaction inserted (a summary
        that lost to a row already there is not found by its fresh id)."""
        if not summaries:
            return []
        by_id = {row.id: row for row in summaries}
        written = conn.execute(
            sa.select(occurrences).where(occurrences.c.id.in_(list(by_id)))
        ).all()
        found = sorted(map(occurrence_of, written), key=lambda o: o.channel_id)
        return self.events.record(
            conn,
            [
                draft(
                    alerts.SKIPPED,
                    o,
                    count=by_id[o.id].skipped_count,
                    oldest_scheduled_for=by_id[o.id].skipped_oldest,
                )
                for o in found
            ],
        )

    def get_occurrence(self, occurrence_id: str) -> Occurrence:
        with self._read() as conn:
            return self._fetch(conn, occurrence_id)

    def attempts_of(self, occurrence_id: str) -> list[Attempt]:
        """The occurrence's attempts, first to last."""
        with self._read() as conn:
            return attempt_log.attempts_of(conn, occurrence_id)

    def list_occurrences(self, filter: OccurrenceFilter | None = None) -> Page[Occurrence]:
        """Newest first by (`scheduled_for`, `id`), a page at a time by key (`paging`): what
        happened recently, whenever each row was written."""
        f = filter or OccurrenceFilter()
        scheduled_for = occurrences.c.scheduled_for
        conditions = given(
            (eq, occurrences.c.channel_id, f.channel_id),
            (eq, occurrences.c.status, f.status),
            (eq, occurrences.c.trigger, f.trigger),
            (ge, scheduled_for, f.since and require_utc(f.since, "since")),
            (le, scheduled_for, f.until and require_utc(f.until, "until")),
        )
        order = (scheduled_for, occurrences.c.id)
        with self._read() as conn:
            return read_page(conn, occurrences, conditions, order, f, occurrence_of)

    def requeue(self, occurrence_id: str) -> Occurrence:
        """Put a failed, cancelled or skipped occurrence of an active channel back to
        `pending`, due now, same id, granted one more attempt if it had used all, never a
        misfire. NotFound; Conflict for another status (`completed` too: running finished
        work again is a trigger) or a channel that is not active."""
        with self._write() as conn:
            row = conn.execute(_requeued(self._sql, occurrence_id)).one_or_none()
            if row is not None:
                return occurrence_of(row)
            current = self._fetch(conn, occurrence_id)
            channel_status = conn.execute(
                sa.select(channels.c.status).where(channels.c.channel_id == current.channel_id)
            ).scalar_one_or_none()
        raise _not_retried(current, channel_status)

    def cancel(
        self, occurrence_id: str, *, by: str | None = None, reason: str | None = None
    ) -> Occurrence:
        """Cancel a pending, claimed or running occurrence, in one transaction: `cancelled`,
        its claim and slot given back, its `occurrence.cancelled` event written. A running
        attempt finds out at its next renewal. NotFound / Conflict."""
        message = f"cancelled by {by or 'an operator'}" + (f": {reason}" if reason else "")

        def cancel(conn: sa.Connection) -> tuple[Occurrence, list[Event]] | None:
            # Singleton first (the lock order). Rolled back below if the cancel loses.
            freed = release_slots_of(conn, self._sql, [occurrence_id])
            row = conn.execute(
                sa.update(occurrences)
                .where(occurrences.c.id == occurrence_id)
                .where(status_is(*ACTIVE_STATUSES))
                .values(
                    status=CANCELLED,
                    claimed_by=None,
                    claimed_until=None,
                    error_message=truncate_excerpt(message, ERROR_MESSAGE_BYTES),
                    completed_at=self._sql.now(),
                    updated_at=self._sql.now(),
                    overdue_at=None,
                )
                .returning(*occurrences.c)
            ).one_or_none()
            if row is None:
                conn.rollback()
                return None
            cancelled = occurrence_of(row)
            attempt_log.end_open(
                conn, self._sql, [occurrence_id], CANCELLED, cancelled.error_message
            )
            held = (cancelled.singleton_key, cancelled.singleton_slot)
            if cancelled.singleton_key is not None and held not in freed:
                # A start of this occurrence committed while the UPDATE above waited for
                # its row: the slot it took was not yet its own when the release ran.
                release_slots_of(conn, self._sql, [occurrence_id])
            return cancelled, self.events.record(conn, [draft(alerts.CANCELLED, cancelled)])

        done = self._atomic(cancel)
        if done is not None:
            self.events.announce(done[1])
            return done[0]
        current = self.get_occurrence(occurrence_id)
        raise Conflict(
            f"occurrence {occurrence_id} is {current.status!r}; only "
            f"{', '.join(ACTIVE_STATUSES)} occurrences can be cancelled"
        )

    def delete_terminal_older_than(
        self, hours: float, *, batch_size: int = RETENTION_BATCH, until: float | None = None
    ) -> int:
        """Retention: delete terminal rows that ended more than `hours` ago (never a live row:
        a backlog is work not yet done, not history); answers how many went. Batches of
        `batch_size`, each committed on its own, so no transaction grows long; it stops at a
        short batch, or after the batch that ends past the monotonic `until`."""
        stmt = _retention_batch(self._sql, hours, batch_size)
        deleted = 0
        while True:
            with self._write(single=True) as conn:
                count = conn.execute(stmt).rowcount
            deleted += count
            if count < batch_size or (until is not None and time.monotonic() >= until):
                return deleted

    def _fetch(self, conn: sa.Connection, occurrence_id: str) -> Occurrence:
        row = conn.execute(
            sa.select(occurrences).where(occurrences.c.id == occurrence_id)
        ).one_or_none()
        if row is None:
            raise NotFound(f"occurrence {occurrence_id} not found")
        return occurrence_of(row)


def _insert_in(conn: sa.Connection, sql: Backend, rows: list[NewOccurrence]) -> int:
    """The rows, insert-if-absent, inside the caller's transaction (one statement on
    PostgreSQL); answers how many were inserted."""
    given = _new(sql, rows)
    return int(conn.execute(_insert_statement(sql, given), given.params).rowcount)


def _insert_statement(
    sql: Backend, given: Batch, only: sa.Select[tuple[str]] | None = None
) -> sa.Insert:
    """The `given` rows (`_new`), insert-if-absent. `only`: the channel ids whose rows go
    in."""
    now = sql.now()
    chosen = sa.select(
        *given.c.values(),
        sa.literal(0),
        # A row born terminal (a misfire summary) ended when it was written.
        sa.case(
            (given.c["status"].in_(list(map(constant, ACTIVE_STATUSES))), sa.null()), else_=now
        ),
        now,
        now,
        sa.false(),
    )
    if only is not None:
        chosen = chosen.where(given.c["channel_id"].in_(only))
    fixed = ["attempt", "completed_at", "created_at", "updated_at", "misfire_judged"]
    insert = sql.insert(occurrences).from_select([*given.c, *fixed], chosen)
    identity = [occurrences.c.channel_id, occurrences.c.scheduled_for]
    return insert.on_conflict_do_nothing(index_elements=identity)


def _new(sql: Backend, rows: list[NewOccurrence]) -> Batch:
    """The rows as a batch of the columns they give, typed as the table types them (the others
    are fixed on insert)."""
    given: dict[str, list[Any]] = {
        "id": [r.id for r in rows],
        "channel_id": [r.channel_id for r in rows],
        "channel_name": [r.channel_name for r in rows],
        "channel_version": [r.channel_version for r in rows],
        "target_ref": [r.target_ref for r in rows],
        "trigger": [r.trigger for r in rows],
        "scheduled_for": [require_utc(r.scheduled_for, "scheduled_for") for r in rows],
        "status": [r.status for r in rows],
        "error_message": [r.error_message for r in rows],
        "due_at": [require_utc(r.due, "due_at") for r in rows],
        "max_attempts": [r.max_attempts for r in rows],
        "overdue_at": [r.overdue_at for r in rows],
        "waits_for_key": [r.waits_for_key for r in rows],
    }
    return sql.batch("new", {name: (occurrences.c[name].type, v) for name, v in given.items()})


def _counted(insert: sa.Insert) -> sa.Select[Any]:
    """PostgreSQL: the rows `insert` inserted, counted in the database: ten thousand ids need
    not cross the wire to be counted."""
    inserted = insert.returning(occurrences.c.id).cte("inserted")
    return sa.select(sa.func.count()).select_from(inserted)


def _requeued(sql: Backend, occurrence_id: str) -> sa.Update:
    """`requeue`'s one conditional UPDATE: the row, if retryable and its channel active."""
    channel_active = (
        sa.select(channels.c.channel_id)
        .where(channels.c.channel_id == occurrences.c.channel_id)
        .where(channels.c.status == CHANNEL_ACTIVE)
        .exists()
    )
    return (
        sa.update(occurrences)
        .where(occurrences.c.id == occurrence_id)
        .where(status_is(*RETRYABLE_STATUSES))
        .where(channel_active)
        .values(
            status=PENDING,
            claimed_by=None,
            claimed_until=None,
            singleton_key=None,
            singleton_slot=None,
            fencing_token=None,
            trace_id=None,
            error_message=None,
            result=None,
            started_at=None,
            completed_at=None,
            due_at=sql.now(),
            max_attempts=sa.case(
                (
                    occurrences.c.max_attempts > occurrences.c.attempt,
                    occurrences.c.max_attempts,
                ),
                else_=occurrences.c.attempt + 1,
            ),
            misfire_judged=True,
            updated_at=sql.now(),
        )
        .returning(*occurrences.c)
    )


def _not_retried(current: Occurrence, channel_status: str | None) -> Conflict:
    """Why a retry matched no row: the occurrence's status, or its channel's."""
    if current.status not in RETRYABLE_STATUSES:
        return Conflict(
            f"occurrence {current.id} is {current.status!r} and cannot be retried; retry "
            f"applies to {', '.join(RETRYABLE_STATUSES)}. To run the schedule again now, "
            "trigger the channel."
        )
    if channel_status is None:
        return Conflict(
            f"occurrence {current.id} cannot be retried: its channel "
            f"{current.channel_id} no longer exists"
        )
    # Archived is final: never point at re-activating it.
    remedy = (
        "archived is final; create a new channel to run this schedule"
        if channel_status == CHANNEL_ARCHIVED
        else 'activate it first (PATCH …/status with {"status": "active"})'
    )
    return Conflict(
        f"occurrence {current.id} cannot be retried: its channel {current.channel_name!r} "
        f"is {channel_status}, not active; {remedy}"
    )


def _retention_batch(sql: Backend, hours: float, batch_size: int) -> sa.Delete:
    """The `batch_size` oldest terminal rows past the window, read from the index of
    terminal rows (a batch costs what it deletes), deleted by primary key with their
    attempts (on PostgreSQL by the same statement, before the cascade would)."""
    expired = sa.and_(
        status_is(*TERMINAL_STATUSES),
        occurrences.c.completed_at < sql.now_plus(-hours * 3600),
    )
    batch = (
        sa.select(occurrences.c.id)
        .where(expired)
        .order_by(occurrences.c.completed_at)
        .limit(batch_size)
    )
    if sql.is_postgres:
        # The ids as an array computed once, so the planner cannot drive the delete from
        # the window's condition (every expired row); the lock re-checks the condition,
        # so a row a retry made pending since the read is not chosen.
        locked = batch.with_for_update(skip_locked=True).scalar_subquery()
        doomed = sa.select(sa.func.array(locked).label("ids")).cte("doomed")
        ids = sa.any_(
            sa.cast(sa.select(doomed.c.ids).scalar_subquery(), postgresql.ARRAY(sa.String))
        )
        their_attempts = sa.delete(attempts).where(attempts.c.occurrence_id == ids)
        return (
            sa.delete(occurrences)
            .where(occurrences.c.id == ids)
            .add_cte(their_attempts.cte("their_attempts"))
        )
    # SQLite's single writer: nothing changes between the read and the delete.
    return sa.delete(occurrences).where(occurrences.c.id.in_(batch.scalar_subquery()))
