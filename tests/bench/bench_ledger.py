"""Ledger benchmark: how fast the claim leases due rows on the local PostgreSQL, next to what
pgbench's TPC-B does on the same server, so the figure means something on any machine.

Claim: 20,000 due rows drained with batch 100 by 1 and then 4 concurrent claimers (separate
processes, as separate Lambda invocations would be); every row must be claimed exactly once.
pgbench: `-i -s 10`, then 4 clients for 15 s. Each runs in a scratch database of its own,
dropped afterwards (tests/bench/pg.py).
"""

from __future__ import annotations

import multiprocessing
import time
from datetime import timedelta
from typing import Any

import sqlalchemy as sa

from cronledger.ledger import CLAIMED, Ledger, NewOccurrence
from cronledger.ledger.tables import occurrences
from tests.bench.pg import PGBENCH_CLIENTS, PGBENCH_SCALE, pgbench, scratch_database

ROWS = 20_000
BATCH = 100
LEASE_SECS = 600.0
PGBENCH_SECS = 15


def main() -> None:
    rates: dict[int, float] = {}
    with scratch_database("claims") as url:
        ledger = Ledger.connect(url)
        ledger.migrate()
        for claimers in (1, 4):
            seed(ledger)
            rates[claimers] = drain(url, claimers)
            leased = count_claimed(ledger)
            assert leased == ROWS, f"{leased} of {ROWS} rows leased"
            print(
                f"claim throughput, {claimers} claimer(s), batch {BATCH}, {ROWS:,} due rows: "
                f"{rates[claimers]:,.0f} rows leased/s",
                flush=True,
            )
        ledger.dispose()
    with scratch_database("pgbench") as url:
        tps = pgbench(url, PGBENCH_SECS)
    print(
        f"pgbench TPC-B, scale {PGBENCH_SCALE}, {PGBENCH_CLIENTS} clients, {PGBENCH_SECS} s: "
        f"{tps:,.0f} tps"
    )
    for claimers, rate in rates.items():
        print(f"ratio, {claimers} claimer(s) rows leased/s ÷ pgbench tps: {rate / tps:.2f}")


def seed(ledger: Ledger) -> None:
    with ledger.engine.begin() as conn:
        conn.execute(sa.delete(occurrences))
    now = ledger.db_now()
    ledger.occurrences.insert_occurrences(
        NewOccurrence(
            channel_id=f"ch-{i % 50}",
            channel_name="bench",
            channel_version=1,
            scheduled_for=now - timedelta(seconds=ROWS - i),
        )
        for i in range(ROWS)
    )
    with ledger.engine.begin() as conn:
        conn.execute(sa.text("ANALYZE cron_occurrences"))


def drain(url: str, claimers: int) -> float:
    """Rows leased per second of wall time, from the moment every claimer is ready."""
    context = multiprocessing.get_context("spawn")
    ready = context.Barrier(claimers)
    results = context.Queue()
    workers = [
        context.Process(target=_claimer, args=(url, f"bench-{n}", ready, results))
        for n in range(claimers)
    ]
    for worker in workers:
        worker.start()
    spans = [results.get(timeout=600) for _ in workers]
    for worker in workers:
        worker.join()
    claimed = sum(count for count, _, _ in spans)
    assert claimed == ROWS, f"claimers reported {claimed} rows, expected {ROWS}"
    started = min(start for _, start, _ in spans)
    finished = max(end for _, _, end in spans)
    return claimed / (finished - started)


def _claimer(url: str, claimant: str, ready: Any, results: Any) -> None:
    ledger = Ledger.connect(url)
    ledger.db_now()  # connect before the clock starts
    ready.wait()
    started = time.perf_counter()
    count = 0
    while batch := ledger.attempts.claim(claimant, BATCH, LEASE_SECS).leased:
        count += len(batch)
    results.put((count, started, time.perf_counter()))
    ledger.dispose()


def count_claimed(ledger: Ledger) -> int:
    with ledger.engine.connect() as conn:
        query = sa.select(sa.func.count()).where(occurrences.c.status == CLAIMED)
        return int(conn.execute(query).scalar_one())


if __name__ == "__main__":
    main()
