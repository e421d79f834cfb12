"""Cursors: per channel, the next instant not yet materialised (`cron_schedule_state`).

A cursor only moves by compare-and-set on the value the caller planned from, the scheduling
hash it planned under, and while it is not paused, so of two reconcilers that planned the same
pass exactly one advances it (and, through `materialise`, inserts its rows). The value alone is
not enough: an edit's reset can land on the very instant a stale plan starts from, and only the
hash tells the two apart. A pause keeps value and hash: without the third condition a plan read
before the pause would still land rows (lookahead ones too) after it.

A pass reads its work through indexes, never by comparing every channel with its cursor: each
channel write notes the channel in `cron_channel_changes` in its own transaction.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple

import sqlalchemy as sa

from cronledger.instants import require_utc
from cronledger.ledger.backend import Batch, instant_of_json
from cronledger.ledger.models import (
    CHANNEL_ACTIVE,
    PENDING,
    TRIGGER_CRON,
    CursorMove,
    DueChannel,
    ScheduleState,
    ScheduleWork,
)
from cronledger.ledger.shards import WHOLE, Shard
from cronledger.ledger.store import Store
from cronledger.ledger.tables import (
    UtcDateTime,
    channel_changes,
    channels,
    occurrences,
    schedule_state,
    status_is,
)

#: The most cursor moves in one SQLite UPDATE (see `_advance_in`).
MOVE_CHUNK = 250
#: Cursors (or noted changes) one read of a pass answers: the pass pages through more, so
#: what it holds at once stays a page, whatever the number of channels due.
READ_PAGE = 5_000


def _due_channel(row: sa.FromClause) -> tuple[sa.ColumnElement[Any], ...]:
    """What a pass reads of an active channel (`row`: `cron_channels` or a subquery of
    it): `DueChannel`'s fields, in order."""
    return (
        row.c.channel_id,
        row.c.name,
        row.c.version,
        row.c.target,
        sa.cast(row.c.transport_config, sa.Text),
    )


class CursorInit(NamedTuple):
    """A cursor to create or reset: at `next_fire_at` (None: parked), unpaused."""

    channel_id: str
    channel_version: int
    config_hash: str
    next_fire_at: datetime | None


class NotedChange(NamedTuple):
    """A channel write noted for the next pass (`change` tells it from a later one), with
    what the pass compares: the channel, if active, and its cursor, if any."""

    change: int
    work: ScheduleWork


@dataclass
class CursorWrites:
    """What a pass writes of cursors for one page of work (`CursorStore.write_cursors`)."""

    inits: list[CursorInit] = field(default_factory=list)
    #: (channel id, version): the cursor serves this version now, in place.
    adopts: list[tuple[str, int]] = field(default_factory=list)
    pauses: list[str] = field(default_factory=list)
    #: (channel id, change): noted changes these writes bring in line.
    seen: list[tuple[str, int]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.inits or self.adopts or self.pauses or self.seen)


class CursorStore(Store):
    def schedule_states(self, channel_ids: Collection[str] | None = None) -> list[ScheduleState]:
        """Every cursor (or those of `channel_ids`), in channel id order."""
        stmt = sa.select(schedule_state).order_by(schedule_state.c.channel_id)
        if channel_ids is not None:
            stmt = stmt.where(schedule_state.c.channel_id.in_(list(channel_ids)))
        with self._read() as conn:
            return [ScheduleState(**row._mapping) for row in conn.execute(stmt)]

    def due_cursors(
        self,
        horizon: datetime,
        shard: Shard = WHOLE,
        *,
        after: tuple[datetime, str] | None = None,
        limit: int = READ_PAGE,
    ) -> list[ScheduleWork]:
        """One page of the running cursors due by `horizon` in `shard`, by (next instant,
        channel id) after `after`, each with its channel (None when the channel is gone or not
        active: the cursor is to be paused). Read through the index on running cursors by
        next instant, so a pass with nothing due reads nothing, however many channels there
        are; a pass pages on from the last cursor of the page before (`page_end`)."""
        due = (
            sa.select(schedule_state)
            .where(schedule_state.c.paused_at.is_(None))
            .where(schedule_state.c.next_fire_at <= require_utc(horizon, "horizon"))
            .where(shard.condition(schedule_state.c.channel_id, postgres=self._sql.is_postgres))
            .order_by(schedule_state.c.next_fire_at, schedule_state.c.channel_id)
            .limit(limit)
        )
        if after is not None:
            due = due.where(
                sa.tuple_(schedule_state.c.next_fire_at, schedule_state.c.channel_id)
                > sa.tuple_(sa.literal(after[0], UtcDateTime()), sa.literal(after[1]))
            )
        page = due.subquery("due")
        channel_row, joined = self._active_channel_of(page)
        stmt = sa.select(self._sql.json_rows(*_due_channel(channel_row), *page.c)).select_from(
            joined
        )
        split = len(_due_channel(channels))
        with self._read() as conn:
            found = json.loads(conn.execute(stmt).scalar_one())
        work = []
        for values in found:
            state = _state_of_json(values[split:])
            channel = DueChannel(*values[:split]) if values[0] is not None else None
            work.append(ScheduleWork(state.channel_id, channel, state))
        return work

    def noted_changes(
        self, shard: Shard = WHOLE, *, after: str | None = None, limit: int = READ_PAGE
    ) -> list[NotedChange]:
        """One page of the channel changes noted in `shard` (by channel id, after `after`),
        each with the channel if it is active and its cursor if it has one."""
        noted = (
            sa.select(channel_changes)
            .where(shard.condition(channel_changes.c.channel_id, postgres=self._sql.is_postgres))
            .order_by(channel_changes.c.channel_id)
            .limit(limit)
        )
        if after is not None:
            noted = noted.where(channel_changes.c.channel_id > after)
        page = noted.subquery("noted")
        channel_row, with_channel = self._active_channel_of(page)
        state_row, joined = self._row_of(schedule_state, page, with_channel)
        stmt = sa.select(
            self._sql.json_rows(
                page.c.channel_id, page.c.change, *_due_channel(channel_row), *state_row.c
            )
        ).select_from(joined)
        split = 2 + len(_due_channel(channels))
        with self._read() as conn:
            found = json.loads(conn.execute(stmt).scalar_one())
        changes = []
        for values in found:
            channel = DueChannel(*values[2:split]) if values[2] is not None else None
            state = _state_of_json(values[split:]) if values[split] is not None else None
            changes.append(NotedChange(values[1], ScheduleWork(values[0], channel, state)))
        return changes

    def _active_channel_of(self, page: sa.Subquery) -> tuple[sa.FromClause, sa.FromClause]:
        """`page` with each of its channels, if active (a NULL row if not)."""
        return self._row_of(channels, page, page, channels.c.status == CHANNEL_ACTIVE)

    def _row_of(
        self,
        table: sa.Table,
        page: sa.Subquery,
        joined: sa.FromClause,
        *conditions: sa.ColumnElement[bool],
    ) -> tuple[sa.FromClause, sa.FromClause]:
        """`joined` with `table`'s row of each of the page's channels, by primary key. On
        PostgreSQL through a LATERAL subquery it cannot flatten: a page of thousands joined
        plainly is hashed against a scan of the whole table, a cost that grows with the
        channels installed rather than with the page."""
        match = table.c.channel_id == page.c.channel_id
        if not self._sql.is_postgres:
            return table, joined.outerjoin(table, sa.and_(match, *conditions))
        row = sa.select(table).where(match, *conditions).limit(1).lateral(f"{table.name}_row")
        return row, joined.outerjoin(row, sa.true())

    def due_count(self, lookahead_secs: float, *, bound: int) -> int:
        """How many running cursors fall due within `lookahead_secs` of now, with the changes
        noted, counted up to `bound`: what a coordinator sizes a pass's shards by (two index
        ranges, not the tables)."""
        due = (
            sa.select(schedule_state.c.channel_id)
            .where(schedule_state.c.paused_at.is_(None))
            .where(schedule_state.c.next_fire_at <= self._sql.now_plus(lookahead_secs))
            .limit(bound)
            .subquery()
        )
        noted = sa.select(channel_changes.c.channel_id).limit(bound).subquery()
        stmt = sa.select(
            sa.select(sa.func.count()).select_from(due).scalar_subquery(),
            sa.select(sa.func.count()).select_from(noted).scalar_subquery(),
        )
        with self._read() as conn:
            cursors, changes = conn.execute(stmt).one()
        return min(int(cursors) + int(changes), bound)

    def write_cursors(self, writes: CursorWrites) -> None:
        """A page's cursor writes, in one transaction, one statement for each kind: the
        cursors to (re)initialise (created or reset and unpaused in one write, so a
        reactivated channel cannot come back still paused), the versions to adopt (in place:
        an edit that left the scheduling hash alone must not move when the channel next runs;
        never back to an older version), the cursors to pause (an already paused one keeps
        the instant it was first paused at), and the noted changes these bring in line,
        forgotten only if no write has noted another since they were read. Resets and pauses
        drop the channel's not-yet-due cron rows: written ahead under the schedule they end,
        they must not fire."""
        if writes:
            with self._write() as conn:
                self._write_cursors_in(conn, writes)

    def _write_cursors_in(self, conn: sa.Connection, writes: CursorWrites) -> None:
        """`write_cursors`, inside the caller's transaction."""
        now = self._sql.now()
        if writes.inits:
            given: dict[str, list[Any]] = {
                "channel_id": [i.channel_id for i in writes.inits],
                "channel_version": [i.channel_version for i in writes.inits],
                "config_hash": [i.config_hash for i in writes.inits],
                "next_fire_at": [_optional_utc(i.next_fire_at) for i in writes.inits],
            }
            columns = {name: (schedule_state.c[name].type, v) for name, v in given.items()}
            init = self._sql.batch("init", columns)
            upsert = self._sql.insert(schedule_state).from_select(
                [*init.c, "paused_at", "updated_at"], sa.select(*init.c.values(), sa.null(), now)
            )
            conn.execute(_replacing(upsert, now), init.params)
        if writes.adopts:
            adopt = self._by_channel("adopt", "version", sa.Integer(), writes.adopts)
            conn.execute(
                sa.update(schedule_state)
                .where(schedule_state.c.channel_id == adopt.c["channel_id"])
                .where(schedule_state.c.channel_version < adopt.c["version"])
                .values(channel_version=adopt.c["version"], updated_at=now),
                adopt.params,
            )
        if writes.pauses:
            pause = self._sql.batch("pause", {"channel_id": (sa.String(), writes.pauses)})
            conn.execute(
                sa.update(schedule_state)
                .where(pause.has(schedule_state.c.channel_id))
                .where(schedule_state.c.paused_at.is_(None))
                .values(paused_at=now, updated_at=now),
                pause.params,
            )
        if dropped := [i.channel_id for i in writes.inits] + writes.pauses:
            drop = self._sql.batch("dropped", {"channel_id": (sa.String(), dropped)})
            conn.execute(
                _future_cron_rows(now).where(drop.has(occurrences.c.channel_id)), drop.params
            )
        if writes.seen:
            seen = self._by_channel("seen", "change", sa.BigInteger(), writes.seen)
            conn.execute(
                sa.delete(channel_changes)
                .where(channel_changes.c.channel_id == seen.c["channel_id"])
                .where(channel_changes.c.change == seen.c["change"]),
                seen.params,
            )

    def _by_channel(
        self, name: str, column: str, type_: sa.types.TypeEngine[Any], pairs: list[tuple[str, Any]]
    ) -> Batch:
        """A batch `name(channel_id, column)` of (channel id, value) pairs."""
        ids, values = [p[0] for p in pairs], [p[1] for p in pairs]
        return self._sql.batch(name, {"channel_id": (sa.String(), ids), column: (type_, values)})

    def note_drifted_channels(self) -> int:
        """Note every channel whose cursor disagrees with it (active without a running cursor
        for its version, or running while not active): what a writer that notes nothing (a
        release from before the notes, during a rolling upgrade) leaves behind is found by
        this sweep instead of never. One statement over every channel; run now and then."""
        state = schedule_state
        joined = channels.outerjoin(state, state.c.channel_id == channels.c.channel_id)
        active = channels.c.status == CHANNEL_ACTIVE
        drifted = sa.or_(
            sa.and_(
                active,
                sa.or_(
                    state.c.channel_id.is_(None),
                    state.c.paused_at.is_not(None),
                    state.c.channel_version < channels.c.version,
                ),
            ),
            sa.and_(~active, state.c.channel_id.is_not(None), state.c.paused_at.is_(None)),
        )
        found = sa.select(channels.c.channel_id, sa.literal(1, sa.BigInteger)).select_from(joined)
        note = self._sql.insert(channel_changes).from_select(
            ["channel_id", "change"], found.where(drifted)
        )
        with self._write() as conn:
            return int(conn.execute(_noting(note)).rowcount or 0)

    def _note_change(self, conn: sa.Connection, channel_id: str) -> None:
        """Inside a channel write's transaction: the next pass looks at this channel's
        cursor (and a pass reading an earlier note will not forget this one)."""
        conn.execute(
            _noting(self._sql.insert(channel_changes).values(channel_id=channel_id, change=1))
        )

    def _advance_in(self, conn: sa.Connection, moves: list[CursorMove]) -> set[str]:
        """SQLite: the moves as UPDATEs with a condition per move, inside the caller's
        transaction (PostgreSQL's join a JSON parameter instead, `_moves_statement`). SQLite
        parses a chain of ORs as a tree as deep as the chain and refuses one deeper than 1,000,
        so a batch goes `MOVE_CHUNK` moves at a time."""
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

    def _moves_statement(self, moves: list[CursorMove]) -> tuple[sa.CTE, sa.Select[tuple[str]]]:
        """PostgreSQL: the compare-and-set UPDATE of every cursor still where its move starts,
        under the hash it was planned under, answering the channel ids it moved; and the
        channels whose move did not happen. Only these come back: usually none, where every
        winner would be ten thousand rows to read. The moves are rows of one JSON parameter,
        so the statement does not grow with the batch."""
        instant = UtcDateTime()
        move = self._sql.batch(
            "move",
            {
                "channel_id": (sa.String(), [m.channel_id for m in moves]),
                "from_": (instant, [require_utc(m.from_, "from_") for m in moves]),
                "to_": (instant, [_optional_utc(m.to) for m in moves]),
                "config_hash": (sa.String(), [m.config_hash for m in moves]),
            },
        )
        moved = (
            sa.update(schedule_state)
            .where(schedule_state.c.channel_id == move.c["channel_id"])
            .where(schedule_state.c.next_fire_at == move.c["from_"])
            .where(schedule_state.c.config_hash == move.c["config_hash"])
            .where(schedule_state.c.paused_at.is_(None))
            .values(next_fire_at=move.c["to_"], updated_at=self._sql.now())
            .returning(schedule_state.c.channel_id)
            .cte("moved")
        )
        lost = sa.select(move.c["channel_id"]).where(
            move.c["channel_id"].not_in(sa.select(moved.c.channel_id))
        )
        return moved, lost


def _future_cron_rows(now: sa.ColumnElement[datetime]) -> sa.Delete:
    """Rows written ahead and not yet due. A retry waiting out its backoff, or a queued
    contender, is also `pending` and due later, but it is work already admitted (and
    marked so): it stays."""
    return (
        sa.delete(occurrences)
        .where(status_is(PENDING))
        .where(occurrences.c.trigger == TRIGGER_CRON)
        .where(occurrences.c.misfire_judged.is_(False))
        .where(occurrences.c.due_at > now)
    )


#: A page's cursors mostly share their instants: each distinct one is parsed once.
_instant_of_json = functools.lru_cache(maxsize=1024)(instant_of_json)


def _replacing(upsert: Any, now: sa.ColumnElement[Any]) -> Any:
    """`upsert` (PostgreSQL's or SQLite's INSERT) replacing the cursor it meets: version, hash
    and instant, unpaused."""
    return upsert.on_conflict_do_update(
        index_elements=[schedule_state.c.channel_id],
        set_={
            "channel_version": upsert.excluded.channel_version,
            "config_hash": upsert.excluded.config_hash,
            "next_fire_at": upsert.excluded.next_fire_at,
            "paused_at": None,
            "updated_at": now,
        },
    )


def _noting(note: Any) -> Any:
    """`note` (an INSERT of notes) bumping the note a channel already has, so a pass that read
    the earlier one will not forget this one."""
    return note.on_conflict_do_update(
        index_elements=[channel_changes.c.channel_id],
        set_={"change": channel_changes.c.change + 1},
    )


def _state_of_json(values: list[Any]) -> ScheduleState:
    """A cursor `json_rows` carried: its table's columns, in the table's order (which is
    `ScheduleState`'s)."""
    channel_id, version, config_hash, *instants = values
    next_fire_at, paused_at, updated_at = map(_instant_of_json, instants)
    assert updated_at is not None  # a NOT NULL column
    return ScheduleState(channel_id, version, config_hash, next_fire_at, paused_at, updated_at)


def page_end(page: list[ScheduleWork]) -> tuple[datetime, str]:
    """Where the page of due cursors after `page` starts (`due_cursors`' `after`): the
    greatest (next instant, channel id) in it."""
    return max(map(_due_position, page))


def _due_position(work: ScheduleWork) -> tuple[datetime, str]:
    assert work.state is not None and work.state.next_fire_at is not None
    return work.state.next_fire_at, work.channel_id


def _optional_utc(value: datetime | None) -> datetime | None:
    return None if value is None else require_utc(value)
