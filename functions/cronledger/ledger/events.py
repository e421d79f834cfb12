"""Events: an outbox written by the transaction that makes the change it reports.

- `record` runs inside the write transaction that made the change: both commit or neither.
  It locks the channels' alert rows in channel id order, after every other row the
  transaction writes, so two recording transactions cannot wait on each other in a cycle.
- An event to deliver takes its channel's next `sequence` (gapless: moved in the same
  transaction) and a short send lease: the function that made it sends it after the commit,
  and the sweep (`take_outbox`) takes it only once the lease ran out. Delivery is at least
  once, always with the same `event_id`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from operator import eq, ge
from typing import Any

import sqlalchemy as sa

from cronledger import alerts
from cronledger.alerts import AlertState, advance, rules_of
from cronledger.excerpts import ERROR_MESSAGE_BYTES, truncate_excerpt
from cronledger.ids import uuid7
from cronledger.instants import to_rfc3339
from cronledger.ledger.backend import Backend
from cronledger.ledger.models import Event, EventFilter, EventPage, Occurrence, Outbox
from cronledger.ledger.paging import given, keyed_rows
from cronledger.ledger.store import Store
from cronledger.ledger.tables import (
    channel_alerts,
    channels,
    events,
    occurrence_of,
    occurrences,
    schedule_state,
)

#: How long the function that made an event has to send it before the sweep may.
SEND_LEASE_SECS = 30.0
#: The most events one sweep or detection takes at a time.
OUTBOX_BATCH = 100
#: Retries of a delivery that failed back off this much, doubling, up to the cap.
RETRY_FIRST_SECS = 2.0
RETRY_MAX_SECS = 300.0
#: In the outbox: to be delivered, not yet delivered.
_UNDELIVERED = sa.and_(events.c.send_after.is_not(None), events.c.delivered_at.is_(None))


@dataclass(frozen=True, slots=True)
class Draft:
    """An event to record: its kind, the occurrence it is about (None for a channel's), and
    what the row alone does not say."""

    kind: str
    channel_id: str
    occurrence: Occurrence | None = None
    count: int | None = None
    oldest_scheduled_for: datetime | None = None
    reason: str | None = None


def draft(kind: str, occurrence: Occurrence, **fields: Any) -> Draft:
    return Draft(kind, occurrence.channel_id, occurrence, **fields)


class EventStore(Store):
    #: Given a committed write's events to deliver, right after the commit, on its thread.
    on_events: Any = None

    def announce(self, made: Sequence[Event]) -> None:
        deliver = [event for event in made if event.deliver]
        if deliver and self.on_events is not None:
            self.on_events(deliver)

    def record(self, conn: sa.Connection, drafts: Sequence[Draft]) -> list[Event]:
        """Write the events of `drafts` in the caller's transaction, moving each channel's
        alert state; answers them in order."""
        if not drafts:
            return []
        ids = sorted({d.channel_id for d in drafts})
        rows = _alert_rows(conn, self._sql, ids)
        if missing := [i for i in ids if i not in rows]:
            # A channel's first event creates its row (a peer may create it first).
            conn.execute(
                self._sql.insert(channel_alerts)
                .values(
                    [{"channel_id": i, "sequence": 0, "consecutive_failures": 0} for i in missing]
                )
                .on_conflict_do_nothing(index_elements=[channel_alerts.c.channel_id])
            )
            rows |= _alert_rows(conn, self._sql, missing)
        first = {
            i: AlertState(r.sequence, r.consecutive_failures, r.open_alert) for i, r in rows.items()
        }
        states = dict(first)
        rules = {i: rules_of(rows[i].transport_config) for i in ids}
        now: datetime = rows[ids[-1]].now
        made: list[Event] = []
        for d in drafts:
            row, before = rows[d.channel_id], states[d.channel_id]
            after, recorded = advance(before, rules[d.channel_id], d.kind)
            sequence = before.sequence
            for kind, deliver in recorded:
                if deliver:
                    sequence += 1
                made.append(_event(d, kind, sequence if deliver else None, now, row, after))
            states[d.channel_id] = after
        for channel_id in ids:
            if states[channel_id] != first[channel_id]:
                conn.execute(
                    sa.update(channel_alerts)
                    .where(channel_alerts.c.channel_id == channel_id)
                    .values(**asdict(states[channel_id]))
                )
        if made:
            lease = now + timedelta(seconds=SEND_LEASE_SECS)
            conn.execute(sa.insert(events), [_row_of(e, lease) for e in made])
        return made

    # --- the outbox -----------------------------------------------------------------------

    def take_outbox(self, limit: int = OUTBOX_BATCH) -> list[Event]:
        """Lease up to `limit` undelivered events whose lease has run out, oldest first, to
        this sender: each one's next try waits `SEND_LEASE_SECS` (doubling with its tries,
        capped), so a sender that dies with them leaves them to a later sweep, and two sweeps
        never take the same event at once."""
        due = (
            sa.select(events.c.event_id)
            .where(_UNDELIVERED, events.c.send_after <= self._sql.now())
            .order_by(events.c.send_after)
            .limit(limit)
            .with_for_update(skip_locked=True)
        )
        with self._write() as conn:
            taken = conn.execute(
                sa.select(events).where(events.c.event_id.in_(due.scalar_subquery()), _UNDELIVERED)
            ).all()
            for attempts in sorted({row.send_attempts for row in taken}):
                wait = max(SEND_LEASE_SECS, min(RETRY_MAX_SECS, RETRY_FIRST_SECS * 2**attempts))
                ids = [row.event_id for row in taken if row.send_attempts == attempts]
                conn.execute(
                    sa.update(events)
                    .where(events.c.event_id.in_(ids))
                    .values(send_after=self._sql.now_plus(wait), send_attempts=attempts + 1)
                )
        found = [_event_of(row) for row in taken]
        return sorted(found, key=lambda e: (e.at, e.event_id))

    def mark_delivered(self, event_ids: Iterable[str]) -> int:
        """The destination accepted these events: they leave the outbox."""
        ids = list(event_ids)
        if not ids:
            return 0
        with self._write(single=True) as conn:
            return conn.execute(
                sa.update(events)
                .where(events.c.event_id.in_(ids), events.c.delivered_at.is_(None))
                .values(delivered_at=self._sql.now(), last_error=None)
            ).rowcount

    def mark_undelivered(self, failures: dict[str, str]) -> None:
        """The destination refused or could not be reached: note why; the event stays in
        the outbox for the sweep, after its lease."""
        if not failures:
            return
        by_error: dict[str, list[str]] = {}
        for event_id, error in failures.items():
            by_error.setdefault(error, []).append(event_id)
        with self._write() as conn:  # a destination that is down refuses all alike: one write
            for error, ids in by_error.items():
                conn.execute(
                    sa.update(events)
                    .where(events.c.event_id.in_(ids), events.c.delivered_at.is_(None))
                    .values(last_error=truncate_excerpt(error, ERROR_MESSAGE_BYTES))
                )

    def outbox(self) -> Outbox:
        """How many events wait to be delivered, and how long the oldest has waited."""
        waiting = sa.select(sa.func.count(), sa.func.min(events.c.at), self._sql.now())
        with self._read() as conn:
            count, oldest, now = conn.execute(waiting.where(_UNDELIVERED)).one()
        age = None if oldest is None else max(0.0, (now - oldest).total_seconds())
        return Outbox(int(count), age)

    def delete_events_older_than(self, hours: float) -> int:
        """Retention: one bounded batch of events written more than `hours` ago that have
        nothing left to send (delivered, or never to be). One still waiting for its
        destination stays, however old: it is undelivered, not history."""
        done = sa.or_(events.c.send_after.is_(None), events.c.delivered_at.is_not(None))
        old = sa.and_(done, events.c.at < self._sql.now_plus(-hours * 3600))
        batch = sa.select(events.c.event_id).where(old).limit(OUTBOX_BATCH * 10)
        with self._write(single=True) as conn:
            return conn.execute(
                sa.delete(events).where(events.c.event_id.in_(batch.scalar_subquery()))
            ).rowcount

    # --- listing --------------------------------------------------------------------------

    def list_events(self, filter: EventFilter | None = None) -> EventPage:
        """Events newest first by (`at`, `event_id`), a page at a time by key (`paging`)."""
        f = filter or EventFilter()
        stmt = sa.select(events).where(
            *given(
                (eq, events.c.channel_id, f.channel_id),
                (eq, events.c.kind, f.kind and alerts.KINDS.get(f.kind, f.kind)),
                (ge, events.c.at, f.since),
            )
        )
        order = (events.c.at, events.c.event_id)
        with self._read() as conn:
            rows, next_key = keyed_rows(conn, stmt, order, f.limit, f.after)
        return EventPage([_event_of(row) for row in rows], f.limit, next_key)

    def open_alerts(self, channel_ids: Iterable[str] | None = None) -> dict[str, str]:
        """Per channel, the kind of its delivered alert not yet answered by a completed
        occurrence."""
        stmt = sa.select(channel_alerts.c.channel_id, channel_alerts.c.open_alert).where(
            channel_alerts.c.open_alert.is_not(None)
        )
        if channel_ids is not None:
            stmt = stmt.where(channel_alerts.c.channel_id.in_(list(channel_ids)))
        with self._read() as conn:
            return {row.channel_id: row.open_alert for row in conn.execute(stmt)}

    # --- detection ------------------------------------------------------------------------

    def detect_overdue(self, limit: int = OUTBOX_BATCH) -> list[Event]:
        """Report, once each, the instants not completed by their `overdue_at`, and the
        channels whose cursor has fallen behind their schedule by more than their
        `alerts.overdue_after_secs`; answers the events written."""
        made = self._overdue_occurrences(limit) + self._stalled_channels(limit)
        self.announce(made)
        return made

    def _overdue_occurrences(self, limit: int) -> list[Event]:
        now = self._sql.now()
        due = sa.select(occurrences.c.id).where(occurrences.c.overdue_at <= now)
        due = due.order_by(occurrences.c.overdue_at).limit(limit).with_for_update(skip_locked=True)
        with self._write() as conn:
            rows = conn.execute(
                sa.update(occurrences)
                .where(occurrences.c.id.in_(due.scalar_subquery()), occurrences.c.overdue_at <= now)
                .values(overdue_at=None)
                .returning(*occurrences.c)
            ).all()
            found = sorted(map(occurrence_of, rows), key=lambda o: o.channel_id)
            return self.record(conn, [draft(alerts.OVERDUE, o) for o in found])

    def _stalled_channels(self, limit: int) -> list[Event]:
        """Running cursors behind the clock are few (a pass moves each past now), and read
        through their index; the limit of each is checked here, in the channel's rules."""
        now = self._sql.now()
        behind = (
            sa.select(
                schedule_state.c.channel_id,
                schedule_state.c.next_fire_at,
                channels.c.transport_config,
                channel_alerts.c.stalled_at,
                now.label("now"),
            )
            .select_from(
                schedule_state.join(
                    channels, channels.c.channel_id == schedule_state.c.channel_id
                ).outerjoin(
                    channel_alerts, channel_alerts.c.channel_id == schedule_state.c.channel_id
                )
            )
            .where(schedule_state.c.paused_at.is_(None), schedule_state.c.next_fire_at < now)
            .limit(limit * 10)
        )
        flagged = sa.select(channel_alerts.c.channel_id).where(
            channel_alerts.c.stalled_at.is_not(None)
        )
        with self._write() as conn:
            still: set[str] = set()
            stalled: list[tuple[str, datetime]] = []
            for row in conn.execute(behind):
                allowed = rules_of(row.transport_config).overdue_after_secs
                if allowed is None or row.now <= row.next_fire_at + timedelta(seconds=allowed):
                    continue
                still.add(row.channel_id)
                if row.stalled_at is None:
                    stalled.append((row.channel_id, row.next_fire_at))
            _flag_stalled(conn, set(conn.execute(flagged).scalars()) - still, None)
            drafts = [
                Draft(alerts.STALLED, c, oldest_scheduled_for=at) for c, at in sorted(stalled)
            ]
            made = self.record(conn, drafts)
            _flag_stalled(conn, {c for c, _ in stalled}, self._sql.now())
            return made


def _alert_rows(conn: sa.Connection, sql: Backend, ids: list[str]) -> dict[str, Any]:
    """The channels' alert rows with their names and documents, locked, in channel id
    order (the lock order)."""
    read = (
        sa.select(
            channel_alerts.c.channel_id,
            channel_alerts.c.sequence,
            channel_alerts.c.consecutive_failures,
            channel_alerts.c.open_alert,
            channels.c.name,
            channels.c.transport_config,
            sql.now().label("now"),
        )
        .select_from(
            channel_alerts.outerjoin(channels, channels.c.channel_id == channel_alerts.c.channel_id)
        )
        .where(channel_alerts.c.channel_id.in_(ids))
        .order_by(channel_alerts.c.channel_id)
        .with_for_update(of=channel_alerts)  # SQLite: no FOR UPDATE, one writer anyway
    )
    return {row.channel_id: row for row in conn.execute(read)}


def _flag_stalled(conn: sa.Connection, ids: set[str], since: Any) -> None:
    """Set (or clear, with None) when the channels' cursors were found stalled."""
    if ids:
        conn.execute(
            sa.update(channel_alerts)
            .where(channel_alerts.c.channel_id.in_(sorted(ids)))
            .values(stalled_at=since)
        )


def _event(
    d: Draft, kind: str, sequence: int | None, now: datetime, channel: Any, state: AlertState
) -> Event:
    """The event as a receiver gets it: what happened, where, and where to look, with no
    secret (the error is the excerpt the ledger keeps). `channel`: its alert row."""
    o = d.occurrence
    document = channel.transport_config or {}
    event_id = str(uuid7())
    api, console = (
        (f"/api/v1/admin/cron/occurrences/{o.id}", f"/#occurrence={o.id}")
        if o is not None
        else (f"/api/v1/admin/channels/{d.channel_id}", f"/#channel={d.channel_id}")
    )
    # `o and …`: the occurrence's fields, None on a channel's event.
    body: dict[str, Any] = {
        "event_id": event_id,
        "sequence": sequence,
        "kind": kind,
        "at": to_rfc3339(now),
        "channel_id": d.channel_id,
        "channel_name": (o and o.channel_name) or channel.name,
        "timezone": document.get("timezone", "UTC"),
        "occurrence_id": o and o.id,
        "scheduled_for": o and to_rfc3339(o.scheduled_for),
        "due_at": o and to_rfc3339(o.due_at),
        "trigger": o and o.trigger,
        "attempt": o and o.attempt,
        "max_attempts": o and o.allowed_attempts,
        "status": o and o.status,
        "error": None if kind == alerts.RECOVERED else o and o.error_message,
        "count": d.count,
        "consecutive_failures": state.consecutive_failures,
        "links": {"api": api, "console": console},
    }
    if d.oldest_scheduled_for is not None:
        body["oldest_scheduled_for"] = to_rfc3339(d.oldest_scheduled_for)
    if d.reason is not None:
        body["reason"] = d.reason
    if o is not None:
        body["singleton_key"] = o.singleton_key
    return Event(event_id, d.channel_id, sequence, kind, now, body["occurrence_id"], body)


def _event_of(row: Any) -> Event:
    """An event from its row (every column but `send_after`)."""
    fields = {k: v for k, v in row._mapping.items() if k != "send_after"}
    return Event(**fields | {"document": json.loads(row.document)})


def _row_of(event: Event, lease: datetime) -> dict[str, Any]:
    """An event's row: under a send lease only if it is to be delivered."""
    document = json.dumps(event.document, separators=(",", ":"))
    return asdict(event) | {"document": document, "send_after": lease if event.deliver else None}
