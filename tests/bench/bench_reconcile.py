"""Reconcile benchmark (issues 4 and 12): one pass over 100, 1,000 and 10,000 due channels on
the local PostgreSQL, in a scratch database (tests/bench/pg.py); target: 10,000 in at most 1 s.

Every channel fires each minute at second 0, with its rows jittered over 30 s, and its cursor
is at the latest such instant, so the pass writes one row per channel (its due time hashed)
and advances every cursor. The pass finds that instant late, not misfired, as a timely pass
does, wherever in the minute it runs: the misfire grace is the minute (with the default 5 s,
a pass more than 5 s into the minute would plan a misfire instead, a figure that would
depend on the second it ran at; bench_schedule.py times the planning after outages). "warm" is a long-lived process's pass (schedules already
compiled); "cold" is a pass that compiles every schedule (fresh schedule cache and shared
calendars), on a pooled connection whose statements are already prepared: the cost of
compiling, not of a whole process start. The statement count is what SQLAlchemy sent during
the pass: a batched pass is a fixed handful, whatever the number of channels.

Before each pass the tables it reads and writes are vacuumed and analysed, untimed. The
suite's server runs with autovacuum off, so without it every pass would find the dead rows
of all the passes and cursor resets before it (a table many times its live size) and
planner statistics taken before the channels were seeded (the read then loops over an index
instead of hashing): what a served ledger's autovacuum, on by default, keeps from happening.
Each figure is the median of several runs (three; two for the cold pass).
"""

from __future__ import annotations

import os
import statistics
import time
from collections import Counter
from typing import Any

import sqlalchemy as sa

from cronledger.cron import compile_schedule
from cronledger.cron.config import _croniter_refusal
from cronledger.cron.walk import calendar
from cronledger.ids import uuid7
from cronledger.ledger import CHANNEL_ACTIVE, Ledger
from cronledger.ledger.tables import channel_versions, channels, occurrences, schedule_state
from cronledger.local import DEMO_MODULE
from cronledger.reconcile import reconcile_once
from cronledger.schedule_cache import ScheduleCache
from cronledger.settings import Settings
from tests.bench.bench_scheduler import EVERY_MINUTE, TARGET, counting_statements
from tests.bench.pg import scratch_database

RUNS = 3
#: A cold pass over 10,000 channels compiles 10,000 schedules: twice is enough.
COLD_RUNS = 2
COUNTS = (100, 1_000, 10_000)
TARGET_SECS = 1.0
#: The figures are taken with jitter on: each row's due time is hashed.
JITTERED_MINUTE = {**EVERY_MINUTE, "jitter_secs": 30}
#: What a pass touches, vacuumed and analysed before it.
TABLES = "cron_channels, cron_schedule_state, cron_occurrences"
#: Whenever in the minute a pass runs, the minute's instant is late, not misfired.
GRACE_SECS = 60


def main() -> None:
    with scratch_database("reconcile") as url:
        ledger = Ledger.connect(url)
        ledger.migrate()
        settings = Settings(
            database_url=url, python_targets=(DEMO_MODULE,), misfire_grace_secs=GRACE_SECS
        )
        for count in COUNTS:
            add_channels(ledger, count, JITTERED_MINUTE)
            statements: Counter[str] = Counter()
            cold = [cold_pass(ledger, settings, count) for _ in range(COLD_RUNS)]
            cache = ScheduleCache()
            timed_pass(ledger, settings, cache, count)  # compile once, as a long-lived process has
            warm = [timed_pass(ledger, settings, cache, count, statements) for _ in range(RUNS)]
            median_warm = statistics.median(warm)
            verdict = ""
            if count == max(COUNTS):
                ok = median_warm <= TARGET_SECS
                verdict = f" (target {TARGET_SECS:.0f} s: {'ok' if ok else 'OVER'})"
            print(
                f"reconcile pass, {count:,} due channels (jitter_secs 30): warm "
                f"{median_warm * 1000:,.0f} ms"
                f"{verdict}, cold {statistics.median(cold) * 1000:,.0f} ms; "
                f"{describe(statements)} per pass (load average {os.getloadavg()[0]:.1f})",
                flush=True,
            )
        ledger.dispose()


def cold_pass(ledger: Ledger, settings: Settings, count: int) -> float:
    """A pass with nothing compiled, not even the shared calendars or croniter's verdicts."""
    calendar.cache_clear()
    _croniter_refusal.cache_clear()
    return timed_pass(ledger, settings, ScheduleCache(), count)


def add_channels(ledger: Ledger, total: int, transport_config: dict[str, Any]) -> None:
    """Grow the channels to `total`, each active with a cursor (as a reconcile pass that
    met it would have left it), written in bulk: seeding is not what is measured."""
    with ledger.engine.begin() as conn:
        have = int(conn.execute(sa.select(sa.func.count()).select_from(channels)).scalar_one())
        if have >= total:
            return
        now = ledger.db_now()
        config_hash = compile_schedule(transport_config, "bench").config_hash
        ids = [str(uuid7()) for _ in range(total - have)]
        document = {"transport_config": transport_config, "target": TARGET, "timeout_ms": 10_000}
        conn.execute(
            sa.insert(channels),
            [
                {
                    "channel_id": channel_id,
                    "name": f"bench-{have + n:05d}",
                    "status": CHANNEL_ACTIVE,
                    "version": 1,
                    "created_at": now,
                    "updated_at": now,
                    **document,
                }
                for n, channel_id in enumerate(ids)
            ],
        )
        conn.execute(
            sa.insert(channel_versions),
            [{"channel_id": i, "version": 1, "created_at": now, **document} for i in ids],
        )
        conn.execute(
            sa.insert(schedule_state),
            [
                {
                    "channel_id": i,
                    "channel_version": 1,
                    "config_hash": config_hash,
                    "next_fire_at": now,
                    "updated_at": now,
                }
                for i in ids
            ],
        )


def timed_pass(
    ledger: Ledger,
    settings: Settings,
    cache: ScheduleCache,
    count: int,
    statements: Counter[str] | None = None,
) -> float:
    """Make every channel due (cursor at this minute's instant, no rows yet), run one pass
    (adding the statements it sent to `statements`), check it wrote every channel's row and
    moved every cursor, and answer its wall time."""
    with ledger.engine.begin() as conn:
        conn.execute(sa.text("TRUNCATE cron_attempts, cron_occurrences"))
        conn.execute(
            sa.update(schedule_state).values(
                next_fire_at=sa.func.date_trunc("minute", sa.func.statement_timestamp())
            )
        )
    with ledger.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(sa.text(f"VACUUM ANALYZE {TABLES}"))
    with counting_statements(ledger.engine) as sent:
        started = time.perf_counter()
        report = reconcile_once(ledger, settings, cache)
        elapsed = time.perf_counter() - started
    if statements is not None:
        statements.update(sent)
    assert not report.failed, report.failed
    # A pass that straddles the minute also writes the new minute's row: two for a channel.
    assert report.advanced == count and count <= report.inserted <= 2 * count, report
    with ledger.engine.connect() as conn:
        jittered = conn.execute(
            sa.select(sa.func.count())
            .select_from(occurrences)
            .where(occurrences.c.due_at > occurrences.c.scheduled_for)
        ).scalar_one()
    assert jittered >= 0.9 * count, f"only {jittered} of {count} rows were jittered"
    return elapsed


def describe(statements: Counter[str]) -> str:
    runs = sum(statements.values()) / RUNS
    parts = ", ".join(f"{n / RUNS:g} {word}" for word, n in sorted(statements.items()))
    return f"{runs:g} statements ({parts})"


if __name__ == "__main__":
    main()
