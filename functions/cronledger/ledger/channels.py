"""Channels: schedule definitions, every edit an immutable version.

`cron_channels` holds the current version; `cron_channel_versions` every version ever written,
unchanged, since an occurrence records the version it was planned and run under. Status moves
draft → active ⇄ paused, and anything → archived, which is final; pausing or archiving pauses
the cursor in the same transaction.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from operator import eq
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from cronledger import alerts
from cronledger.errors import Conflict, NotFound
from cronledger.ids import uuid7
from cronledger.ledger.cursors import CursorStore, CursorWrites
from cronledger.ledger.events import Draft, EventStore
from cronledger.ledger.models import (
    CHANNEL_ACTIVE,
    CHANNEL_ARCHIVED,
    CHANNEL_DRAFT,
    CHANNEL_PAUSED,
    Channel,
    Event,
    Page,
    PageRequest,
)
from cronledger.ledger.paging import MAX_PAGE_SIZE, count_matching, given, read_page
from cronledger.ledger.singletons import release_orphaned_slots, release_slots_of
from cronledger.ledger.store import Store
from cronledger.ledger.tables import (
    channel_alerts,
    channel_changes,
    channel_versions,
    channels,
    events,
    occurrences,
    schedule_state,
)

#: For each status, the statuses a channel may move to it from. Same-status is a no-op.
_ALLOWED_FROM = {
    CHANNEL_DRAFT: (CHANNEL_DRAFT,),
    CHANNEL_ACTIVE: (CHANNEL_DRAFT, CHANNEL_ACTIVE, CHANNEL_PAUSED),
    CHANNEL_PAUSED: (CHANNEL_ACTIVE, CHANNEL_PAUSED),
    CHANNEL_ARCHIVED: (CHANNEL_DRAFT, CHANNEL_ACTIVE, CHANNEL_PAUSED, CHANNEL_ARCHIVED),
}

#: The columns a version defines beside its number (`cron_channel_versions`).
_DEFINITION = ("transport_config", "target", "timeout_ms", "labels")

#: The rows that go with a channel besides its occurrences, deleted in this order.
_PURGED_WITH_CHANNEL = (schedule_state, channel_changes, events, channel_alerts, channel_versions)

#: Moves that are events of the channel's history: a pause (with its reason) and a resume.
_TURNS: dict[tuple[str | None, str], str] = {
    (CHANNEL_ACTIVE, CHANNEL_PAUSED): alerts.PAUSED,
    (CHANNEL_PAUSED, CHANNEL_ACTIVE): alerts.RESUMED,
}


class ChannelStore(Store):
    def __init__(self, base: Store, events: EventStore, cursors: CursorStore) -> None:
        super().__init__(base)
        self.events = events
        self.cursors = cursors

    def create_channel(
        self,
        name: str,
        transport_config: dict[str, Any],
        target: dict[str, Any],
        timeout_ms: int,
        status: str = CHANNEL_DRAFT,
        *,
        labels: Mapping[str, str] | None = None,
        dry_run: bool = False,
    ) -> Channel:
        """A new channel at version 1 (created paused: no cursor until resumed). Conflict when
        the name is taken. `dry_run`, here and below: every statement runs and is rolled
        back, answering what would have been written."""
        if status not in (CHANNEL_DRAFT, CHANNEL_ACTIVE, CHANNEL_PAUSED):
            raise ValueError(f"a channel is created draft, active or paused, not {status!r}")
        now = self._sql.now()
        document = _document(transport_config, target, timeout_ms, labels)
        insert = (
            self._sql.insert(channels)
            .values(
                channel_id=str(uuid7()),
                name=name,
                status=status,
                version=1,
                created_at=now,
                updated_at=now,
                **document,
            )
            .on_conflict_do_nothing(index_elements=[channels.c.name])
            .returning(*channels.c)
        )
        with self._write() as conn:
            row = conn.execute(insert).one_or_none()
            if row is None:
                raise Conflict(f"a channel named {name!r} already exists; choose another name")
            return self._keep_version(conn, row, document, dry_run)

    def new_channel_version(
        self,
        channel_id: str,
        transport_config: dict[str, Any],
        target: dict[str, Any],
        timeout_ms: int,
        *,
        labels: Mapping[str, str] | None = None,
        dry_run: bool = False,
    ) -> Channel:
        """Make the definition the channel's next version. NotFound; Conflict if archived."""
        now = self._sql.now()
        document = _document(transport_config, target, timeout_ms, labels)
        bump = (
            sa.update(channels)
            .where(channels.c.channel_id == channel_id)
            .where(channels.c.status != CHANNEL_ARCHIVED)
            .values(version=channels.c.version + 1, updated_at=now, **document)
            .returning(*channels.c)
        )
        with self._write() as conn:
            row = conn.execute(bump).one_or_none()
            if row is not None:
                return self._keep_version(conn, row, document, dry_run)
        self.get_channel(channel_id)  # NotFound, if that is why
        raise Conflict(f"channel {channel_id} is archived; an archived channel cannot be edited")

    def _keep_version(
        self, conn: sa.Connection, row: Any, document: dict[str, Any], dry_run: bool
    ) -> Channel:
        """Keep the version `row` now has for good and note the channel for the next pass;
        `dry_run`: roll it all back."""
        kept = {"channel_id": row.channel_id, "version": row.version, **document}
        conn.execute(sa.insert(channel_versions).values(created_at=self._sql.now(), **kept))
        self.cursors._note_change(conn, row.channel_id)
        if dry_run:
            conn.rollback()
        return Channel(**row._mapping)

    def set_channel_status(
        self, channel_id: str, status: str, *, dry_run: bool = False, reason: str | None = None
    ) -> Channel:
        """Move a channel along its lifecycle with `reason` (None clears the last one: a reason
        is about its status); Conflict for a move it does not allow."""
        if status not in _ALLOWED_FROM:
            raise ValueError(f"unknown channel status {status!r}")
        stmt = (
            sa.update(channels)
            .where(channels.c.channel_id == channel_id)
            .where(channels.c.status.in_(_ALLOWED_FROM[status]))
            .values(status=status, status_reason=reason, updated_at=self._sql.now())
            .returning(*channels.c)
        )
        made: list[Event] = []
        with self._write() as conn:
            before = conn.execute(
                sa.select(channels.c.status)
                .where(channels.c.channel_id == channel_id)
                .with_for_update()
            ).scalar_one_or_none()
            row = conn.execute(stmt).one_or_none()
            if row is not None:
                if status in (CHANNEL_PAUSED, CHANNEL_ARCHIVED):
                    self.cursors._write_cursors_in(conn, CursorWrites(pauses=[channel_id]))
                self.cursors._note_change(conn, channel_id)
                if (kind := _TURNS.get((before, status))) is not None:
                    made = self.events.record(conn, [Draft(kind, channel_id, reason=reason)])
                if dry_run:
                    conn.rollback()
                    made = []
        if row is not None:
            self.events.announce(made)
            return Channel(**row._mapping)
        current = self.get_channel(channel_id)
        raise Conflict(
            f"channel {channel_id} is {current.status!r} and cannot become {status!r}: "
            "draft → active ⇄ paused, anything → archived, and archived is final"
        )

    def get_channel(self, channel_id: str, version: int | None = None) -> Channel:
        """The channel as it is now, or with the definition of an earlier `version`."""
        with self._read() as conn:
            row = conn.execute(
                sa.select(channels).where(channels.c.channel_id == channel_id)
            ).one_or_none()
            if row is None:
                raise NotFound(f"channel {channel_id} not found")
            current = Channel(**row._mapping)
            if version is None or version == current.version:
                return current
            old = conn.execute(
                sa.select(channel_versions)
                .where(channel_versions.c.channel_id == channel_id)
                .where(channel_versions.c.version == version)
            ).one_or_none()
        if old is None:
            raise NotFound(f"channel {channel_id} has no version {version}")
        return _at_version(current, old)

    def list_channel_versions(
        self, channel_id: str, limit: int = 50, offset: int = 0
    ) -> Page[Channel]:
        """Every version of a channel as written, newest first, with its current name and
        status (`updated_at`: when the version was written). NotFound."""
        current = self.get_channel(channel_id)
        limit = min(max(limit, 1), MAX_PAGE_SIZE)
        offset = max(offset, 0)
        mine = channel_versions.c.channel_id == channel_id
        page = (
            sa.select(channel_versions)
            .where(mine)
            .order_by(channel_versions.c.version.desc())
            .limit(limit)
            .offset(offset)
        )
        with self._read() as conn:
            total, _ = count_matching(conn, channel_versions, [mine], exact=True)
            rows = conn.execute(page).all()
        return Page([_at_version(current, row) for row in rows], total, limit, offset)

    def get_channel_by_name(self, name: str) -> Channel:
        with self._read() as conn:
            row = conn.execute(sa.select(channels).where(channels.c.name == name)).one_or_none()
        if row is None:
            raise NotFound(f"no channel named {name!r}")
        return Channel(**row._mapping)

    def list_channels(
        self,
        status: str | None = None,
        limit: int = 50,
        offset: int = 0,
        name: str | None = None,
        *,
        name_prefix: str | None = None,
        labels: Mapping[str, str] | None = None,
        after: str | None = None,
        exact_total: bool = False,
    ) -> Page[Channel]:
        """Newest first by (`created_at`, `channel_id`), a page at a time by key (`paging`);
        `name_prefix` is case-sensitive; `labels`: channels carrying every one of them."""
        conditions = given((eq, channels.c.status, status), (eq, channels.c.name, name))
        if name_prefix:
            # substr, not LIKE: SQLite's LIKE ignores case, and `%` or `_` in a name are literal.
            conditions.append(sa.func.substr(channels.c.name, 1, len(name_prefix)) == name_prefix)
        if labels:
            conditions.append(self._labelled(labels))
        request = PageRequest(limit, offset, after, exact_total)
        order = (channels.c.created_at, channels.c.channel_id)
        with self._read() as conn:
            return read_page(
                conn, channels, conditions, order, request, lambda row: Channel(**row._mapping)
            )

    def _labelled(self, labels: Mapping[str, str]) -> sa.ColumnElement[bool]:
        """The channel carries every one of `labels` (on PostgreSQL: GIN containment)."""
        if self._sql.is_postgres:
            return sa.type_coerce(channels.c.labels, postgresql.JSONB).contains(dict(labels))
        return sa.and_(
            *(channels.c.labels[key].as_string() == value for key, value in labels.items())
        )

    def labelled_channels(self, labels: Mapping[str, str]) -> list[Channel]:
        """Every channel not archived carrying all of `labels` (at least one), oldest first:
        what a bulk status change moves."""
        if not labels:
            raise ValueError("a selector needs at least one label")
        with self._read() as conn:
            rows = conn.execute(
                sa.select(channels)
                .where(self._labelled(labels))
                .where(channels.c.status != CHANNEL_ARCHIVED)
                .order_by(channels.c.created_at, channels.c.channel_id)
            )
            return [Channel(**row._mapping) for row in rows]

    def delete_channel(self, channel_id: str) -> None:
        """Purge a channel with its versions, cursor, occurrences (attempts cascade) and their
        slots, events and alert row, in one transaction. NotFound."""
        with self._write() as conn:
            ids = sa.select(occurrences.c.id).where(occurrences.c.channel_id == channel_id)
            release_slots_of(conn, self._sql, ids)
            conn.execute(sa.delete(occurrences).where(occurrences.c.channel_id == channel_id))
            # A start that committed while the DELETE waited for its row took a slot the
            # release above could not see yet; its occurrence is gone now.
            release_orphaned_slots(conn, self._sql)
            for table in _PURGED_WITH_CHANNEL:
                conn.execute(sa.delete(table).where(table.c.channel_id == channel_id))
            deleted = conn.execute(
                sa.delete(channels).where(channels.c.channel_id == channel_id)
            ).rowcount
            if deleted == 1:
                return
            conn.rollback()
        raise NotFound(f"channel {channel_id} not found")


def _at_version(current: Channel, version: Any) -> Channel:
    """The channel with the definition of an earlier `cron_channel_versions` row."""
    defined = {name: version._mapping[name] for name in _DEFINITION}
    return replace(current, version=version.version, updated_at=version.created_at, **defined)


def _document(
    transport_config: dict[str, Any],
    target: dict[str, Any],
    timeout_ms: int,
    labels: Mapping[str, str] | None,
) -> dict[str, Any]:
    """A version's columns: what the channel's document defines (`_DEFINITION`)."""
    return {
        "transport_config": transport_config,
        "target": target,
        "timeout_ms": timeout_ms,
        "labels": dict(labels or {}),
    }
