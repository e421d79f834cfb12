"""Scale benchmark (issue 28): reconcile passes over 100,000 channels on the local PostgreSQL
(`python -m tests.bench scale`; `CRONLEDGER_BENCH_SCALE_CHANNELS=1000000` for a million).

Channels are seeded by the database itself (`INSERT … SELECT … generate_series`): every one
active, a per-minute schedule in one of a few zones, its cursor an hour ahead, so nothing is
due until a measurement makes some of it due. Printed, each with the load average:
- the idle pass (nothing due, per channel installed);
- the pass with 1% of the channels due, and with all of them due (per due channel), in one
  shard and split into shards on threads (the speed-up);
- a warm all-due pass at 10,000 channels, before the rest are seeded, for the cliff check;
- 10,000 new channels' cursors initialised by one pass;
- the process's peak RSS.
Before each timed pass the tables are vacuumed and analysed, untimed (the suite's server runs
with autovacuum off). Each figure is the median of `RUNS` passes.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import time
from collections.abc import Callable

import sqlalchemy as sa

from cronledger.cron import compile_schedule
from cronledger.ledger import Ledger, Shard
from cronledger.local import DEMO_MODULE
from cronledger.reconcile import PassReport, merged, reconcile_once
from cronledger.schedule_cache import ScheduleCache
from cronledger.settings import Settings
from tests.bench.bench_scheduler import TARGET
from tests.bench.pg import scratch_database

CHANNELS = int(os.environ.get("CRONLEDGER_BENCH_SCALE_CHANNELS", "100000"))
#: `CRONLEDGER_BENCH_SCALE_QUICK=1`: the idle, 1%-due and one all-due pass only (a million
#: channels' full run takes most of an hour on two cores).
QUICK = os.environ.get("CRONLEDGER_BENCH_SCALE_QUICK") == "1"
SMALL = 10_000
NEW_CHANNELS = 10_000
RUNS = 3
SHARDS = (2, 4)
ZONES = ("UTC", "Europe/Paris", "America/New_York", "Asia/Tokyo")
TABLES = "cron_channels, cron_schedule_state, cron_occurrences, cron_channel_changes"
#: Seeding and resetting a million rows outlasts the ledger's statement timeout; a pass must not.
UNBOUNDED = "SET LOCAL statement_timeout = 0"
#: Whenever in the minute a pass runs, the minute's instant is late, not misfired.
GRACE_SECS = 60


def main() -> None:
    with scratch_database("scale") as url:
        # A reset of a million rows may take longer than the socket waits by default.
        ledger = Ledger.connect(url, socket_timeout_secs=None)
        ledger.migrate()
        settings = Settings(
            database_url=url, python_targets=(DEMO_MODULE,), misfire_grace_secs=GRACE_SECS
        )
        cache = ScheduleCache()
        seed(ledger, 0, SMALL)
        warm_small = all_due(ledger, settings, cache, SMALL)
        small_cpu = cpu[0] / SMALL
        say(
            f"all due, {SMALL:,} channels, warm: {warm_small * 1e6:,.0f} µs per channel "
            f"(CPU {small_cpu * 1e6:,.0f} µs)"
        )
        seed(ledger, SMALL, CHANNELS)
        say(f"seeded {CHANNELS:,} channels")
        idle = timed(
            ledger, lambda: run_pass(ledger, settings, cache, 0), lambda: make_due(ledger, 0)
        )
        say(
            f"idle pass, {CHANNELS:,} channels: {idle * 1000:,.1f} ms (CPU "
            f"{cpu[0] * 1000:,.1f} ms; target at 1 M: 50 ms)"
        )
        due = CHANNELS // 100
        some = timed(
            ledger, lambda: run_pass(ledger, settings, cache, due), lambda: make_due(ledger, 100)
        )
        say(
            f"1% due ({due:,} of {CHANNELS:,}): {some * 1000:,.0f} ms (CPU "
            f"{cpu[0] * 1000:,.0f} ms; target at 1 M: 1 s)"
        )
        if QUICK:
            prepared(ledger, lambda: make_due(ledger))
            started, cpu_started = time.perf_counter(), time.process_time()
            run_pass(ledger, settings, cache, CHANNELS)
            wall, spent = time.perf_counter() - started, time.process_time() - cpu_started
            say(
                f"all due, {CHANNELS:,} channels, one shard, once: {wall / CHANNELS * 1e6:,.0f} "
                f"µs per channel (CPU {spent / CHANNELS * 1e6:,.0f} µs)"
            )
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            say(f"peak RSS {peak:,.0f} MB (target 512 MB at 1 M)")
            ledger.dispose()
            return
        warm = all_due(ledger, settings, cache, CHANNELS)
        say(
            f"all due, {CHANNELS:,} channels, one shard: {warm * 1e6:,.0f} µs per channel "
            f"(CPU {cpu[0] / CHANNELS * 1e6:,.0f} µs; target 60; at {SMALL:,}: "
            f"{warm_small * 1e6:,.0f}, CPU {small_cpu * 1e6:,.0f})"
        )
        for count in SHARDS:
            wall = timed(
                ledger,
                lambda: sharded(ledger, settings, cache, CHANNELS, count),  # noqa: B023
                lambda: make_due(ledger, 1),
            )
            say(
                f"all due, {CHANNELS:,} channels, {count} shards on threads: {wall:,.2f} s, "
                f"{wall * 1e6 / CHANNELS * count:,.0f} µs per channel per shard, speed-up "
                f"{warm * CHANNELS / wall:.2f} (CPU {cpu[0] / CHANNELS * 1e6:,.0f} µs per channel)"
            )
        starts = iter(range(CHANNELS, CHANNELS + NEW_CHANNELS * (RUNS + 1), NEW_CHANNELS))
        new = timed(
            ledger,
            lambda: initialise(ledger, settings, cache),
            lambda: new_channels(ledger, next(starts)),
        )
        say(
            f"{NEW_CHANNELS:,} new channels' cursors initialised: {new * 1000:,.0f} ms "
            f"(CPU {cpu[0] * 1000:,.0f} ms; target 1 s)"
        )
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        say(f"peak RSS {peak:,.0f} MB (target 512 MB at 1 M)")
        ledger.dispose()


def say(text: str) -> None:
    print(f"{text} (load average {os.getloadavg()[0]:.1f})", flush=True)


def timed(ledger: Ledger, run: Callable[[], None], prepare: Callable[[], None]) -> float:
    """The median wall time of `RUNS` runs of `run`, each after `prepare` and a vacuum,
    untimed; the median CPU time this process spent in them goes to `cpu`."""
    times, spent = [], []
    for _ in range(RUNS):
        prepared(ledger, prepare)
        started, cpu_started = time.perf_counter(), time.process_time()
        run()
        times.append(time.perf_counter() - started)
        spent.append(time.process_time() - cpu_started)
    cpu[:] = [statistics.median(spent)]
    return statistics.median(times)


#: The CPU time this process spent in the last `timed` measurement (the pass's Python side;
#: the database's own CPU is not in it), a figure the machine's load inflates less.
cpu: list[float] = [0.0]


def prepared(ledger: Ledger, prepare: Callable[[], None]) -> None:
    """Run `prepare` and the vacuum within one minute of the database's clock, so the
    cursors `make_due` put at the minute's instant are still in that minute when the pass
    starts: each due channel has that one instant to write, neither misfired (a summary row
    and a plan of its own) nor a minute behind. A million channels' setup takes long enough
    to cross a minute, so if it did, it is redone from the start of the next one."""
    for _ in range(2):
        minute = ledger.db_now().replace(second=0, microsecond=0)
        prepare()
        vacuum(ledger)
        now = ledger.db_now()
        if now.replace(second=0, microsecond=0) == minute:
            return
        time.sleep(60 - now.second - now.microsecond / 1e6)
    raise RuntimeError("the setup outlasts a minute: its passes would not do the same work")


def vacuum(ledger: Ledger) -> None:
    """Vacuum and analyse, then write out what that and the setup dirtied (a checkpoint), so
    a timed pass does not evict the setup's pages for it."""
    with ledger.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(sa.text("SET statement_timeout = 0"))
        conn.execute(sa.text(f"VACUUM ANALYZE {TABLES}"))
        conn.execute(sa.text("CHECKPOINT"))
        conn.execute(sa.text("RESET statement_timeout"))


def seed(ledger: Ledger, start: int, end: int, *, with_cursors: bool = True) -> None:
    """Channels `start` to `end` (exclusive), active, each per minute in one of `ZONES`, with
    their cursor an hour ahead (or none, as new channels); written by the database."""
    for n, zone in enumerate(ZONES):
        config = json.dumps({"schedule": "0 * * * * *", "timezone": zone})
        document = {"config": config, "target": json.dumps(TARGET)}
        selected = f"FROM generate_series({start}, {end - 1}) g WHERE mod(g, {len(ZONES)}) = {n}"
        with ledger.engine.begin() as conn:
            conn.execute(sa.text(UNBOUNDED))
            conn.execute(
                sa.text(
                    "INSERT INTO cron_channels (channel_id, name, status, version, "
                    "transport_config, target, timeout_ms, created_at, updated_at) "
                    "SELECT 'ch-' || lpad(g::text, 8, '0'), 'bench-' || g, 'active', 1, "
                    "CAST(:config AS jsonb), CAST(:target AS jsonb), 10000, now(), now() "
                    + selected
                ),
                document,
            )
            conn.execute(
                sa.text(
                    "INSERT INTO cron_channel_versions (channel_id, version, transport_config, "
                    "target, timeout_ms, created_at) SELECT 'ch-' || lpad(g::text, 8, '0'), 1, "
                    "CAST(:config AS jsonb), CAST(:target AS jsonb), 10000, now() " + selected
                ),
                document,
            )
            if with_cursors:
                config_hash = compile_schedule(json.loads(config), "bench").config_hash
                conn.execute(
                    sa.text(
                        "INSERT INTO cron_schedule_state (channel_id, channel_version, "
                        "config_hash, next_fire_at, updated_at) SELECT 'ch-' || "
                        "lpad(g::text, 8, '0'), 1, :hash, now() + interval '1 hour', now() "
                        + selected
                    ),
                    {"hash": config_hash},
                )
            elif has_notes(conn):
                conn.execute(
                    sa.text(
                        "INSERT INTO cron_channel_changes (channel_id, change) "
                        "SELECT 'ch-' || lpad(g::text, 8, '0'), 1 " + selected
                    )
                )
    if with_cursors:
        with ledger.engine.begin() as conn:
            if has_notes(conn):
                conn.execute(sa.text("DELETE FROM cron_channel_changes"))


def has_notes(conn: sa.Connection) -> bool:
    """Whether the ledger notes channel changes (this code) or compares every channel with
    its cursor (the code before it), so the bench runs against either."""
    return sa.inspect(conn).has_table("cron_channel_changes")


#: Whether a cursor is among the `fraction` made due.
DUE = ":fraction > 0 AND mod(right(channel_id, 8)::int, :fraction) = 0"


def make_due(ledger: Ledger, fraction: int = 1) -> None:
    """Every `fraction`-th channel's cursor at this minute's instant (none for 0), the rest an
    hour ahead, and no occurrences yet. Only the cursors that must move are written, as
    between two real passes: the rest are already an hour ahead."""
    with ledger.engine.begin() as conn:
        conn.execute(sa.text(UNBOUNDED))
        conn.execute(sa.text("TRUNCATE cron_attempts, cron_occurrences"))
        conn.execute(
            sa.text(
                f"UPDATE cron_schedule_state SET next_fire_at = CASE WHEN {DUE} "
                "THEN date_trunc('minute', statement_timestamp()) "
                "ELSE date_trunc('minute', statement_timestamp()) + interval '1 hour' END "
                f"WHERE {DUE} OR next_fire_at < statement_timestamp() + interval '30 minutes'"
            ),
            {"fraction": fraction},
        )


def run_pass(ledger: Ledger, settings: Settings, cache: ScheduleCache, expect: int) -> None:
    check(reconcile_once(ledger, settings, cache), expect)


def check(report: PassReport, expect: int) -> None:
    """The pass advanced `expect` cursors and wrote one row for each (`prepared`)."""
    assert not report.failed, list(report.failed.items())[:3]
    assert report.advanced == expect, (report.advanced, expect)
    assert report.inserted == expect, ("rows", report.inserted, expect)


def all_due(ledger: Ledger, settings: Settings, cache: ScheduleCache, count: int) -> float:
    """Per due channel: the median all-due pass, warm (one untimed pass first)."""
    make_due(ledger)
    reconcile_once(ledger, settings, cache)
    wall = timed(ledger, lambda: run_pass(ledger, settings, cache, count), lambda: make_due(ledger))
    return wall / count


def sharded(
    ledger: Ledger, settings: Settings, cache: ScheduleCache, count: int, shards: int
) -> None:
    """An all-due pass split into `shards` on threads of this process."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(shards) as pool:
        reports = list(
            pool.map(
                lambda shard: reconcile_once(ledger, settings, cache, shard), Shard.split(shards)
            )
        )
    check(merged(reports), count)


def new_channels(ledger: Ledger, start: int) -> None:
    """`NEW_CHANNELS` channels without a cursor, and nothing else due."""
    make_due(ledger, 0)
    seed(ledger, start, start + NEW_CHANNELS, with_cursors=False)


def initialise(ledger: Ledger, settings: Settings, cache: ScheduleCache) -> None:
    report = reconcile_once(ledger, settings, cache)
    assert (report.initialised, report.advanced) == (NEW_CHANNELS, 0), report


if __name__ == "__main__":
    main()
