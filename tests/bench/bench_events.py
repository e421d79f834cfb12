"""Events benchmark: what telling costs the lifecycle, and what the overdue watch costs a pass.

Lifecycle: the scheduler benchmark's workers (4 threads, claim → start → no-op → settle on
PostgreSQL) over two sets of channels in one database, alternating run by run so a drifting
machine weighs on both alike: channels with the default alert rules (a completion on a quiet
channel makes no event) and channels told of every completion (each writes and numbers an
`occurrence.completed` event in its settle's transaction). Printed: occurrences per second
of each, their ratio, and the statements a quiet completion sends.

Overdue watch: `detect_overdue` at 10,000 channels that each set `overdue_after_secs`, with a
pending row each not yet overdue, cursors ahead of the clock and a history of completed rows:
the steady state every pass pays. Median of many passes, then one pass that reports 100.
"""

from __future__ import annotations

import os
import statistics
import time
from datetime import timedelta

import sqlalchemy as sa

from cronledger.ledger import CHANNEL_ACTIVE, Ledger, NewOccurrence
from cronledger.ledger.tables import schedule_state
from tests.bench.bench_scheduler import (
    LIFECYCLE_OCCURRENCES,
    TARGET,
    _Threads,
    assert_all_completed,
    seed_due,
)
from tests.bench.pg import scratch_database

RUNS = 3
CHANNELS = 50
WATCHED_CHANNELS = 10_000
WATCH_PASSES = 50
QUIET = {"schedule": "0 * * * * *"}
TOLD = {"schedule": "0 * * * * *", "alerts": {"on": ["completed"]}}


def main() -> None:
    print(f"load average {os.getloadavg()[0]:.2f}", flush=True)
    lifecycle_figures()
    watch_figures()


def lifecycle_figures() -> None:
    with scratch_database("events_lifecycle") as url:
        ledger = Ledger.connect(url)
        ledger.migrate()
        shapes = {
            name: [
                ledger.channels.create_channel(
                    f"{name}-{n}", config, TARGET, 10_000, CHANNEL_ACTIVE
                ).channel_id
                for n in range(CHANNELS)
            ]
            for name, config in (("quiet", QUIET), ("told", TOLD))
        }
        workers = {name: _Threads(url, ids) for name, ids in shapes.items()}
        rates: dict[str, list[float]] = {name: [] for name in shapes}
        try:
            for name, ids in shapes.items():  # untimed: connections, statements, threads
                seed_due(ledger, ids, LIFECYCLE_OCCURRENCES)
                sent = workers[name].warm_up()
                if name == "quiet":
                    statements = sent / LIFECYCLE_OCCURRENCES
            for _ in range(RUNS):
                for name, ids in shapes.items():
                    seed_due(ledger, ids, LIFECYCLE_OCCURRENCES)
                    rate, _ = workers[name].drain()
                    assert_all_completed(ledger, name)
                    rates[name].append(rate)
            with ledger.engine.connect() as conn:
                told_events = conn.execute(
                    sa.text("SELECT count(*) FROM cron_events WHERE kind = 'occurrence.completed'")
                ).scalar_one()
        finally:
            for worker in workers.values():
                worker.close()
            ledger.dispose()
    quiet, told = (statistics.median(rates[name]) for name in ("quiet", "told"))
    expected = LIFECYCLE_OCCURRENCES * (RUNS + 1)
    assert told_events == expected, f"{told_events} completed events, expected {expected}"
    print(
        f"lifecycle, 4 worker threads: default alert rules {quiet:,.0f} occurrences/s "
        f"({statements:.2f} statements each); every completion told {told:,.0f}/s "
        f"(ratio {told / quiet:.2f}; {told_events:,} events written)",
        flush=True,
    )


def watch_figures() -> None:
    with scratch_database("events_watch") as url:
        ledger = Ledger.connect(url)
        ledger.migrate()
        config = {"schedule": "0 0 * * * *", "alerts": {"overdue_after_secs": 3600}}
        with ledger.engine.begin() as conn:
            conn.execute(sa.text("SET LOCAL synchronous_commit = off"))
        ids = [
            ledger.channels.create_channel(
                f"w-{n}", config, TARGET, 10_000, CHANNEL_ACTIVE
            ).channel_id
            for n in range(WATCHED_CHANNELS)
        ]
        now = ledger.db_now()
        with ledger.engine.begin() as conn:
            conn.execute(
                sa.insert(schedule_state),
                [
                    {
                        "channel_id": i,
                        "channel_version": 1,
                        "config_hash": "h",
                        "next_fire_at": now + timedelta(minutes=30),
                        "updated_at": now,
                    }
                    for i in ids
                ],
            )
        rows = [
            NewOccurrence(i, f"w-{n}", 1, now - timedelta(minutes=1), overdue_after_secs=3600)
            for n, i in enumerate(ids)
        ]
        history = [
            NewOccurrence(i, f"w-{n}", 1, now - timedelta(hours=h + 2), status="completed")
            for n, i in enumerate(ids)
            for h in range(5)
        ]
        ledger.occurrences.insert_occurrences(rows + history)
        with ledger.engine.begin() as conn:
            conn.execute(sa.text("ANALYZE"))
        ledger.events.detect_overdue()  # warm
        timings = []
        for _ in range(WATCH_PASSES):
            started = time.perf_counter()
            assert ledger.events.detect_overdue() == []
            timings.append((time.perf_counter() - started) * 1000)
        with ledger.engine.begin() as conn:
            conn.execute(
                sa.text(
                    "UPDATE cron_occurrences SET overdue_at = now() - interval '1 second' "
                    "WHERE id IN (SELECT id FROM cron_occurrences WHERE overdue_at IS NOT NULL "
                    "LIMIT 100)"
                )
            )
        started = time.perf_counter()
        found = ledger.events.detect_overdue()
        reporting = (time.perf_counter() - started) * 1000
        assert len(found) == 100, len(found)
        ledger.dispose()
    print(
        f"overdue watch at {WATCHED_CHANNELS:,} channels ({WATCHED_CHANNELS * 6:,} rows): "
        f"{statistics.median(timings):.2f} ms a pass (median of {WATCH_PASSES}; min "
        f"{min(timings):.2f}, max {max(timings):.2f}; target 5 ms: "
        f"{'ok' if statistics.median(timings) <= 5 else 'OVER'}); a pass reporting 100 "
        f"overdue instants {reporting:.1f} ms",
        flush=True,
    )


if __name__ == "__main__":
    main()
