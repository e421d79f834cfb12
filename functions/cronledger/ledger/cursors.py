"""Cursors: per channel, the next instant not yet materialised (`cron_schedule_state`).

A cursor only moves by compare-and-set on the value the caller planned from and the
scheduling hash it planned under, and only while it is not paused, so of two reconcilers
that planned the same pass exactly one advances it (and, through `materialise`, inserts its
rows); the loser re-plans next pass and finds nothing left to do. The value alone is not
enough: an edit's reset can land on the very instant a stale plan starts from, and only the
hash then tells the two schedules apart. A pause keeps the cursor's value and hash: without
the third condition a plan read before the pause would still win, and land rows (lookahead
ones too) after it.

Resetting or pausing a cursor also removes the channel's not-yet-due `pending` cron rows in
the same transaction: a lookahead pass may have materialised them under the schedule that
is being replaced or paused, and they must not fire.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from cronledger.instants import require_utc
from cronledger.ledger.backend import instant_of_json
from cronledger.ledger.events import EventStore
from cronledger.ledger.models import (
    CHANNEL_ACTIVE,
    PENDING,
    TRIGGER_CRON,
    CursorMove,
    DueChannel,
    ScheduleState,
    ScheduleWork,
)
from cronledger.ledger.tables import UtcDateTime, channels, occurrences, schedule_state, status_is

#: The most cursor moves in one SQLite UPDATE (see `_advance_in`).
MOVE_CHUNK = 250


class CursorStore(EventStore):
    def schedule_states(self, channel_ids: Collection[str] | None = None) -> list[ScheduleState]:
        """Every cursor (or those of `channel_ids`), in channel id order."""
        stmt = sa.select(schedule_state).order_by(schedule_state.c.channel_id)
        if channel_ids is not None:
            stmt = stmt.where(schedule_state.c.channel_id.in_(list(channel_ids)))
        with self._read() as conn:
            return [ScheduleState(**row._mapping) for row in conn.execute(stmt)]

    def schedules_needing_work(self, horizon: datetime) -> list[ScheduleWork]:
        """What a reconcile pass must look at, and nothing else, so an idle pass is one read:
        active channels whose cursor is missing, paused, behind the channel's version, or
        due by `horizon`; and unpaused cursors whose channel is gone or no longer active."""
        joined = channels.outerjoin(
            schedule_state, schedule_state.c.channel_id == channels.c.channel_id
        )
        due_channel = (  # `DueChannel`'s fields, in order
            channels.c.channel_id,
            channels.c.name,
            channels.c.version,
            channels.c.target,
            sa.cast(channels.c.transport_config, sa.Text),
        )
        active = (
            sa.select(self._sql.json_rows(*due_channel, *schedule_state.c))
            .select_from(joined)
            .where(channels.c.status == CHANNEL_ACTIVE)
            .where(
                sa.or_(
                    schedule_state.c.channel_id.is_(None),
                    schedule_state.c.paused_at.is_not(None),
                    schedule_state.c.channel_version != channels.c.version,
                    schedule_state.c.next_fire_at <= require_utc(horizon, "horizon"),
                )
            )
        )
        orphaned = (
            sa.select(schedule_state)
            .select_from(
                schedule_state.outerjoin(
                    channels, channels.c.channel_id == schedule_state.c.channel_id
                )
            )
            .where(schedule_state.c.paused_at.is_(None))
            .where(sa.or_(channels.c.channel_id.is_(None), channels.c.status != CHANNEL_ACTIVE))
        )
        work: list[ScheduleWork] = []
        split = len(due_channel)
        with self._read() as conn:
            # ScheduleState in its table's column order (tests/ledger/test_schema.py checks).
            for found in json.loads(conn.execute(active).scalar_one()):
                channel = DueChannel(*found[:split])
                state = None
                if found[split] is not None:  # the cursor's channel_id: it has one
                    state = _state_of_json(found[split:])
                work.append(ScheduleWork(channel.channel_id, channel, state))
            for row in conn.execute(orphaned):
                work.append(ScheduleWork(row.channel_id, None, ScheduleState(*row)))
        return sorted(work, key=lambda w: w.channel_id)

    def adopt_channel_version(self, channel_id: str, version: int) -> bool:
        """Record that the cursor serves `version` now, keeping its place in time: an edit
        that left the scheduling hash alone must not move when the channel next runs."""
        stmt = (
            sa.update(schedule_state)
            .where(schedule_state.c.channel_id == channel_id)
            .where(schedule_state.c.channel_version < version)
            .values(channel_version=version, updated_at=self._sql.now())
        )
        with self._write(single=True) as conn:
            return conn.execute(stmt).rowcount == 1

    def upsert_cursor(
        self,
        channel_id: str,
        channel_version: int,
        config_hash: str,
        next_fire_at: datetime | None,
    ) -> None:
        """Create or reset a channel's cursor and clear its pause, in one write, so a
        reactivated channel cannot come back still paused."""
        values = {
            "channel_version": channel_version,
            "config_hash": config_hash,
            "next_fire_at": _optional_utc(next_fire_at),
            "paused_at": None,
            "updated_at": self._sql.now(),
        }
        upsert = (
            self._sql.insert(schedule_state)
            .values(channel_id=channel_id, **values)
            .on_conflict_do_update(index_elements=[schedule_state.c.channel_id], set_=values)
        )
        with self._write() as conn:
            conn.execute(upsert)
            self._drop_future_cron_rows(conn, channel_id)

    def pause_cursor(self, channel_id: str) -> None:
        """Stop a channel producing occurrences; its history stays. Idempotent: an already
        paused cursor keeps the instant it was first paused at."""
        with self._write() as conn:
            self._pause_cursor(conn, channel_id)

    def _advance_in(self, conn: sa.Connection, moves: list[CursorMove]) -> set[str]:
        """The moves as UPDATEs with a condition per move, inside the caller's transaction:
        SQLite's batch, and a single move anywhere (PostgreSQL's batches join a JSON parameter
        instead, `_moves_statement`). SQLite parses a chain of ORs as a tree as deep as the
        chain and refuses one deeper than 1,000, so a batch goes `MOVE_CHUNK` moves at a time."""
        moved: set[str] = set()
        for start in range(0, len(moves), MOVE_CHUNK):
            chunk = moves[start : start + MOVE_CHUNK]
            new_value: sa.ColumnElement[datetime | None] = sa.case(
                {m.channel_id: sa.literal(_optional_utc(m.to), UtcDateTime()) for m in chunk},
                value=schedule_state.c.channel_id,
            )
            matches = [
                sa.and_(
                    schedule_state.c.channel_id == m.channel_id,
                    schedule_state.c.next_fire_at == require_utc(m.from_, "from_"),
                    schedule_state.c.config_hash == m.config_hash,
                    schedule_state.c.paused_at.is_(None),
                )
                for m in chunk
            ]
            stmt = (
                sa.update(schedule_state)
                .where(sa.or_(*matches))
                .values(next_fire_at=new_value, updated_at=self._sql.now())
                .returning(schedule_state.c.channel_id)
            )
            moved.update(conn.execute(stmt).scalars())
        return moved

    def _moves_statement(self, moves: list[CursorMove]) -> tuple[sa.CTE, sa.CTE]:
        """PostgreSQL: the moves as rows (one JSON parameter, so the statement does not grow
        with the batch), and the compare-and-set UPDATE of every cursor still where its move
        starts, under the hash it was planned under, answering the channel ids it moved."""
        instant = sa.DateTime(timezone=True)
        move = self._sql.rows(
            "move",
            {
                "channel_id": (sa.String(), moves_of(moves)),
                "from_": (instant, [require_utc(m.from_, "from_") for m in moves]),
                "to_": (instant, [_optional_utc(m.to) for m in moves]),
                "config_hash": (sa.String(), [m.config_hash for m in moves]),
            },
        )
        moved = (
            sa.update(schedule_state)
            .where(schedule_state.c.channel_id == move.c.channel_id)
            .where(schedule_state.c.next_fire_at == move.c.from_)
            .where(schedule_state.c.config_hash == move.c.config_hash)
            .where(schedule_state.c.paused_at.is_(None))
            .values(next_fire_at=move.c.to_, updated_at=self._sql.now())
            .returning(schedule_state.c.channel_id)
            .cte("moved")
        )
        return move, moved

    def _pause_cursor(self, conn: sa.Connection, channel_id: str) -> None:
        conn.execute(
            sa.update(schedule_state)
            .where(schedule_state.c.channel_id == channel_id)
            .where(schedule_state.c.paused_at.is_(None))
            .values(paused_at=self._sql.now(), updated_at=self._sql.now())
        )
        self._drop_future_cron_rows(conn, channel_id)

    def _drop_future_cron_rows(self, conn: sa.Connection, channel_id: str) -> None:
        """Rows written ahead and not yet due. A retry waiting out its backoff, or a queued
        contender, is also `pending` and due later, but it is work already admitted (and
        marked so): it stays."""
        conn.execute(
            sa.delete(occurrences)
            .where(occurrences.c.channel_id == channel_id)
            .where(status_is(PENDING))
            .where(occurrences.c.trigger == TRIGGER_CRON)
            .where(occurrences.c.misfire_judged.is_(False))
            .where(occurrences.c.due_at > self._sql.now())
        )


#: Which of a cursor's columns are instants, by position.
_INSTANTS = frozenset(i for i, c in enumerate(schedule_state.c) if isinstance(c.type, UtcDateTime))


def _state_of_json(values: list[Any]) -> ScheduleState:
    cells: list[Any] = [instant_of_json(v) if i in _INSTANTS else v for i, v in enumerate(values)]
    return ScheduleState(*cells)


def moves_of(moves: list[CursorMove]) -> list[str]:
    return [move.channel_id for move in moves]


def lost_moves(move: sa.CTE, moved: sa.CTE) -> sa.Select[tuple[str]]:
    """The channels whose move did not happen. Only these come back: usually none, where
    every winner would be ten thousand rows to read."""
    return sa.select(move.c.channel_id).where(
        move.c.channel_id.not_in(sa.select(moved.c.channel_id))
    )


def _optional_utc(value: datetime | None) -> datetime | None:
    return None if value is None else require_utc(value)
