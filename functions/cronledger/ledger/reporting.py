"""Reads for the status view, `/health` and the claim loop's budget, and the job heartbeats
(`cron_job_runs`). Ages and lease liveness are measured on the database clock.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

import sqlalchemy as sa

from cronledger.ledger.models import LEASED_STATUSES, PENDING, Backlog, ChannelActivity, Occurrence
from cronledger.ledger.store import Store
from cronledger.ledger.tables import job_runs, occurrence_of, occurrences, singletons, status_is


class ReportingStore(Store):
    def channel_activity(
        self, channel_ids: Collection[str], singleton_keys: Collection[str]
    ) -> ChannelActivity:
        """Per channel its newest *due* row (one materialised ahead is no "last run") and its
        `pending` count, and per key the slots a live lease holds: three reads in all."""
        ids, keys = list(channel_ids), list(singleton_keys)
        pending = (
            sa.select(occurrences.c.channel_id, sa.func.count())
            .where(occurrences.c.channel_id.in_(ids), status_is(PENDING))
            .group_by(occurrences.c.channel_id)
        )
        with self._read() as conn:
            latest = self._latest_due(conn, ids) if ids else {}
            counts = {cid: int(n) for cid, n in conn.execute(pending)} if ids else {}
            slots = self._held(conn, keys) if keys else {}
        return ChannelActivity(latest, counts, slots)

    def _latest_due(self, conn: sa.Connection, ids: list[str]) -> dict[str, Occurrence]:
        """Per channel its newest due row, through the (channel_id, scheduled_for) index."""
        # The ids as rows (a UNION ALL: SQLite cannot name a VALUES list's columns).
        wanted = sa.union_all(
            *(
                sa.select(sa.literal(channel_id, sa.String).label("channel_id"))
                for channel_id in ids
            )
        ).subquery("wanted")
        latest_id = (
            sa.select(occurrences.c.id)
            .where(occurrences.c.channel_id == wanted.c.channel_id)
            .where(occurrences.c.scheduled_for <= self._sql.now())
            .order_by(occurrences.c.scheduled_for.desc())
            .limit(1)
            .correlate(wanted)
            .scalar_subquery()
        )
        recent = occurrences.alias("recent")
        stmt = sa.select(recent).where(recent.c.id.in_(sa.select(latest_id).select_from(wanted)))
        found = map(occurrence_of, conn.execute(stmt))
        return {occurrence.channel_id: occurrence for occurrence in found}

    def _held(self, conn: sa.Connection, keys: list[str]) -> dict[str, int]:
        """Per singleton key, how many of its slots a live lease holds (absent: none)."""
        stmt = (
            sa.select(singletons.c.singleton_key, sa.func.count())
            .where(singletons.c.singleton_key.in_(keys))
            .where(singletons.c.slot >= 0)  # not a queue_one key's waiting place
            .where(singletons.c.occurrence_id.is_not(None))
            .where(singletons.c.lease_until >= self._sql.now())
            .group_by(singletons.c.singleton_key)
        )
        return {key: int(n) for key, n in conn.execute(stmt)}

    def in_flight_count(self, at_most: int | None = None) -> int:
        """Leased rows whose lease is live (an expired one is reclaimable), counted only up to
        `at_most` when given: the claim asks only whether there is room."""

        def count() -> sa.Select[int]:
            live = sa.select(sa.literal(1).label("one")).where(
                status_is(*LEASED_STATUSES), occurrences.c.claimed_until >= self._sql.now()
            )
            if at_most is not None:
                live = live.limit(sa.bindparam("p_at_most", type_=sa.Integer()))
            return sa.select(sa.func.count()).select_from(live.subquery())

        parameters = {} if at_most is None else {"p_at_most": max(at_most, 0)}
        rows, _ = self._run(("in_flight", at_most is not None), count, parameters, write=False)
        return int(rows[0][0])

    def backlog(self) -> Backlog:
        """The pending count and the oldest due row's age, with the clock read, in one read."""
        now = self._sql.now()
        stmt = sa.select(
            now,
            sa.select(sa.func.count())
            .select_from(occurrences)
            .where(status_is(PENDING))
            .scalar_subquery(),
            sa.select(sa.func.min(occurrences.c.due_at))
            .where(status_is(PENDING), occurrences.c.due_at <= now)
            .scalar_subquery(),
        )
        with self._read() as conn:
            db_now, count, oldest = conn.execute(stmt).one()
        age = None if oldest is None else max((db_now - oldest).total_seconds(), 0.0)
        return Backlog(db_now, int(count), age)

    def seconds_until_next_due(self) -> float | None:
        """Seconds until the next row is claimable (its `due_at` or lease end; 0 if one is),
        or None when there is nothing: what a claim loop sleeps rather than poll."""
        now = self._sql.now()
        stmt = sa.select(
            sa.select(sa.func.min(occurrences.c.due_at))
            .where(status_is(PENDING))
            .scalar_subquery(),
            # One minimum per status, each the first entry of the leased index (one over both
            # would read every lease in flight).
            *(
                sa.select(sa.func.min(occurrences.c.claimed_until))
                .where(status_is(status))
                .scalar_subquery()
                for status in LEASED_STATUSES
            ),
            now,
        )
        with self._read() as conn:
            next_pending, *next_expiries, db_now = conn.execute(stmt).one()
        candidates = [at for at in (next_pending, *next_expiries) if at is not None]
        if not candidates:
            return None
        wait: float = (min(candidates) - db_now).total_seconds()
        return max(wait, 0.0)

    def record_job_ok(self, job: str) -> None:
        """`job` (`reconcile`, `claim`) just completed a pass."""
        now = self._sql.now()
        stmt = (
            self._sql.insert(job_runs)
            .values(job=job, last_ok_at=now)
            .on_conflict_do_update(index_elements=[job_runs.c.job], set_={"last_ok_at": now})
        )
        with self._write(single=True) as conn:
            conn.execute(stmt)

    def job_heartbeats(self) -> dict[str, datetime]:
        with self._read() as conn:
            return dict(conn.execute(sa.select(job_runs.c.job, job_runs.c.last_ok_at)).all())
