"""Misfires judged at start (docs/guarantees.md#misfire-at-start): a late cron row runs only if
its channel's policy would have kept it, however early it was written.

A late row is judged first, as a reconcile pass would have: all of the channel's unjudged late
rows at once (`catch_up` keeps the oldest N of the whole set), under `MisfireRule.keep`; kept
rows are marked judged, dropped ones become `skipped_misfire`. The judgment locks the channel's
cursor row, serialising it with reconcile; a cursor still behind the late window means rows
are yet to be planned, so it waits (`behind`). Every write is conditional on the row still
being live and unjudged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import sqlalchemy as sa

from cronledger import alerts
from cronledger.ledger.backend import Backend
from cronledger.ledger.events import EventStore, draft
from cronledger.ledger.models import (
    CLAIMED,
    PENDING,
    SKIPPED_MISFIRE,
    TRIGGER_CRON,
    Event,
    MisfireRule,
    Occurrence,
)
from cronledger.ledger.store import Store
from cronledger.ledger.tables import constant, occurrences, schedule_state, status_is


@dataclass(frozen=True, slots=True)
class Judgment:
    """For the occurrence asked about: `run` (kept), `skipped` (dropped), `behind` (reconcile
    has not caught up with the late window; ask again shortly) or `lost` (no longer this
    claimant's). `dropped`: rows this judgment skipped, the asker's own included."""

    verdict: Literal["run", "skipped", "behind", "lost"]
    dropped: int = 0


def misfire_due(sql: Backend, grace_secs: float) -> sa.ColumnElement[bool]:
    """A cron row the misfire rule has yet to judge, due more than the grace before the
    database's now."""
    return sa.and_(
        occurrences.c.trigger == constant(TRIGGER_CRON),
        sa.not_(occurrences.c.misfire_judged),
        occurrences.c.due_at < sql.now_plus(-grace_secs),
    )


class MisfireStore(Store):
    def __init__(self, base: Store, events: EventStore) -> None:
        super().__init__(base)
        self.events = events

    def judge_misfires(
        self, occurrence_id: str, claimant: str, channel_id: str, rule: MisfireRule
    ) -> Judgment:
        """Judge every late, unjudged cron row of `channel_id` under `rule`, in one
        transaction, and answer for `occurrence_id` (claimed by `claimant`)."""
        made: list[Event] = []
        with self._write() as conn:
            if self._cursor_behind(conn, channel_id, rule.grace_secs):
                return Judgment("behind")
            ids = self._late_rows(conn, channel_id, rule.grace_secs)
            kept = rule.keep(len(ids))
            keep_ids = [ids[i] for i in kept]
            drop_ids = [i for n, i in enumerate(ids) if n not in kept]
            if keep_ids:
                conn.execute(
                    _unjudged(keep_ids).values(misfire_judged=True, updated_at=self._sql.now())
                )
            reason = (
                f"missed: not started within the misfire grace ({rule.grace_secs:g} s) of "
                f'its due time; judged at start under misfire_policy "{rule.policy}", '
                f"which runs {len(keep_ids)} of the channel's {len(ids)} late occurrence(s)"
            )
            skipped = self._skip(conn, drop_ids, reason) if drop_ids else []
            if skipped:
                # One event for the judgment, carried by the newest instant it dropped.
                ordered = sorted(skipped, key=lambda o: o.scheduled_for)
                event = draft(
                    alerts.SKIPPED,
                    ordered[-1],
                    count=len(skipped),
                    oldest_scheduled_for=ordered[0].scheduled_for,
                )
                made = self.events.record(conn, [event])
            mine = conn.execute(
                sa.select(
                    occurrences.c.status, occurrences.c.claimed_by, occurrences.c.misfire_judged
                ).where(occurrences.c.id == occurrence_id)
            ).one_or_none()
        self.events.announce(made)
        if mine is not None and mine.status == SKIPPED_MISFIRE:
            return Judgment("skipped", len(skipped))
        if mine is not None and (mine.status, mine.claimed_by) == (CLAIMED, claimant):
            return Judgment("run" if mine.misfire_judged else "lost", len(skipped))
        return Judgment("lost", len(skipped))

    def _late_rows(self, conn: sa.Connection, channel_id: str, grace_secs: float) -> list[str]:
        """The ids of the channel's late, unjudged cron rows, oldest first."""
        of_channel = sa.and_(
            occurrences.c.channel_id == channel_id, misfire_due(self._sql, grace_secs)
        )
        # One arm per status, so each reads its partial index: the channel's unjudged
        # pending rows, and the claimed rows (the few in flight).
        late = sa.or_(*(sa.and_(status_is(status), of_channel) for status in (PENDING, CLAIMED)))
        oldest_first = occurrences.c.scheduled_for, occurrences.c.id
        return list(
            conn.execute(sa.select(occurrences.c.id).where(late).order_by(*oldest_first)).scalars()
        )

    def _skip(self, conn: sa.Connection, ids: list[str], reason: str) -> list[Occurrence]:
        """`skipped_misfire` of each of these rows still unjudged: those it skipped."""
        skipped = conn.execute(
            _unjudged(ids)
            .values(
                status=SKIPPED_MISFIRE,
                claimed_until=None,
                error_message=reason,
                completed_at=self._sql.now(),
                updated_at=self._sql.now(),
            )
            .returning(*occurrences.c)
        )
        return [Occurrence(*row) for row in skipped]

    def _cursor_behind(self, conn: sa.Connection, channel_id: str, grace_secs: float) -> bool:
        """Lock the channel's cursor and tell whether reconcile has yet to plan instants older
        than the grace (a paused cursor never back-fills: it is not behind)."""
        behind = sa.and_(
            schedule_state.c.paused_at.is_(None),
            schedule_state.c.next_fire_at < self._sql.now_plus(-grace_secs),
        )
        # SQLite renders no FOR UPDATE: its transaction already holds the one write lock.
        stmt = sa.select(behind).where(schedule_state.c.channel_id == channel_id).with_for_update()
        return bool(conn.execute(stmt).scalar_one_or_none())


def _unjudged(ids: list[str]) -> sa.Update:
    """An UPDATE of those of these rows still live and unjudged."""
    live = status_is(PENDING, CLAIMED)
    return sa.update(occurrences).where(
        occurrences.c.id.in_(ids), sa.and_(live, sa.not_(occurrences.c.misfire_judged))
    )
