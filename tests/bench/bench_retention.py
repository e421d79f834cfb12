"""Retention benchmark: how fast the retention delete trims a 2,000,000-row ledger, whether
each batch costs the same at the start and at the end (O(batch), not O(table)), and what it
does to the claim's latency meanwhile.

Seeded in SQL: 2,000,000 occurrences (each with one attempt on record), 90% of them terminal
and past the window, the rest recent history, plus a backlog of due `pending` rows for the
claim. Printed: rows deleted per second over `RUN_SECS` of back-to-back batches
(`delete_terminal_older_than` with its deadline, as the reconcile pass calls it), the median
time of the first and of the last ten batches, and the claim's p50/p99 (claims of 20 rows,
one after another) before and while retention runs, with the load average. Target: 20,000
rows/s, and the claim's p99 within twice its figure without retention.
"""

from __future__ import annotations

import os
import statistics
import threading
import time

import sqlalchemy as sa

from cronledger.ledger import Ledger
from cronledger.ledger.occurrences import RETENTION_BATCH
from tests.bench.pg import scratch_database

ROWS = 2_000_000
EXPIRED_SHARE = 0.9
BACKLOG = 40_000
RETENTION_HOURS = 24
RUN_SECS = 20.0
CLAIM_SECS = 8.0
SEED_CHUNK = 250_000
TARGET_ROWS_PER_SEC = 20_000.0


def main() -> None:
    with scratch_database("retention") as url:
        ledger = Ledger.connect(url)
        ledger.migrate()
        started = time.perf_counter()
        seed(url)
        print(f"seeded {ROWS:,} occurrences in {time.perf_counter() - started:.0f} s", flush=True)
        quiet = claim_latencies(ledger, CLAIM_SECS)
        batches: list[float] = []
        busy: list[float] = []
        claimer = threading.Thread(target=lambda: busy.extend(claim_latencies(ledger, RUN_SECS)))
        claimer.start()
        deleted, elapsed = trim(ledger, batches)
        claimer.join()
        ledger.dispose()
    rate = deleted / elapsed
    verdict = "ok" if rate >= TARGET_ROWS_PER_SEC else "UNDER"
    load = os.getloadavg()[0]
    print(
        f"retention, {ROWS:,}-row table, batches of {RETENTION_BATCH:,}: {deleted:,} rows in "
        f"{elapsed:.1f} s = {rate:,.0f} rows/s (target {TARGET_ROWS_PER_SEC:,.0f}: {verdict}; "
        f"load {load:.1f})"
    )
    print(
        f"retention batch: first ten median {statistics.median(batches[:10]) * 1000:.1f} ms, "
        f"last ten median {statistics.median(batches[-10:]) * 1000:.1f} ms "
        f"({len(batches)} batches)"
    )
    for label, took in (("without retention", quiet), ("while retention runs", busy)):
        p99 = statistics.quantiles(took, n=100)[-1]
        print(
            f"claim of 20, {label}: p50 {statistics.median(took) * 1000:.1f} ms, "
            f"p99 {p99 * 1000:.1f} ms ({len(took)} claims)"
        )
    ratio = statistics.quantiles(busy, n=100)[-1] / statistics.quantiles(quiet, n=100)[-1]
    print(
        f"claim p99 ratio while retention runs: {ratio:.2f} (target ≤ 2: "
        f"{'ok' if ratio <= 2 else 'OVER'})"
    )


def seed(url: str) -> None:
    """The history and the backlog, written by the database itself, a chunk a statement, on
    a connection without the ledger's timeouts."""
    expired = int(ROWS * EXPIRED_SHARE)
    engine = sa.create_engine(url, connect_args={"timeout": None})
    ago = (
        f"(make_interval(secs => ({ROWS} - n) / 10.0) + interval '48 hours' * (n < {expired})::int)"
    )
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        for first in range(1, ROWS + 1, SEED_CHUNK):
            last = min(first + SEED_CHUNK - 1, ROWS)
            conn.exec_driver_sql(
                f"""
                INSERT INTO cron_occurrences (id, channel_id, channel_name, channel_version,
                    trigger, scheduled_for, status, attempt, claimed_by, created_at,
                    updated_at, due_at, max_attempts, misfire_judged, completed_at, started_at)
                SELECT 'h-' || lpad(n::text, 8, '0'), 'ch-' || mod(n, 1000), 'bench', 1,
                    CASE WHEN mod(n, 10) = 0 THEN 'manual' ELSE 'cron' END, now() - {ago},
                    CASE WHEN mod(n, 17) = 0 THEN 'failed' ELSE 'completed' END, 1, 'node',
                    now(), now(), now() - {ago}, 3, true, now() - {ago}, now() - {ago}
                FROM generate_series({first}, {last}) AS n
                """
            )
            conn.exec_driver_sql(
                f"""
                INSERT INTO cron_attempts (occurrence_id, number, claimant, started_at,
                    ended_at, outcome)
                SELECT 'h-' || lpad(n::text, 8, '0'), 1, 'node', now() - {ago}, now() - {ago},
                    'completed'
                FROM generate_series({first}, {last}) AS n
                """
            )
        conn.exec_driver_sql(
            f"""
            INSERT INTO cron_occurrences (id, channel_id, channel_name, channel_version,
                trigger, scheduled_for, status, attempt, created_at, updated_at, due_at,
                max_attempts, misfire_judged)
            SELECT 'p-' || lpad(n::text, 8, '0'), 'due-' || n, 'bench', 1, 'cron',
                now() - make_interval(secs => n), 'pending', 0, now(), now(),
                now() - make_interval(secs => n), 3, true
            FROM generate_series(1, {BACKLOG}) AS n
            """
        )
        conn.exec_driver_sql("VACUUM ANALYZE cron_occurrences")
        conn.exec_driver_sql("VACUUM ANALYZE cron_attempts")
    engine.dispose()


def trim(ledger: Ledger, batches: list[float]) -> tuple[int, float]:
    """Back-to-back runs of one batch each for `RUN_SECS`: rows deleted, seconds taken; each
    batch's time into `batches`."""
    deleted = 0
    started = time.perf_counter()
    while time.perf_counter() - started < RUN_SECS:
        before = time.perf_counter()
        # A deadline already reached: exactly one batch, as the last of a pass's budget.
        count = ledger.occurrences.delete_terminal_older_than(
            RETENTION_HOURS, until=time.monotonic()
        )
        batches.append(time.perf_counter() - before)
        deleted += count
        if count < RETENTION_BATCH:
            break
    return deleted, time.perf_counter() - started


def claim_latencies(ledger: Ledger, secs: float) -> list[float]:
    """Seconds each claim of 20 due rows took, one after another for `secs`."""
    took = []
    until = time.perf_counter() + secs
    while time.perf_counter() < until:
        before = time.perf_counter()
        ledger.attempts.claim("bench", 20, 600)
        took.append(time.perf_counter() - before)
    return took


if __name__ == "__main__":
    main()
