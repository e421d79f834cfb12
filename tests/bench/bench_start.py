"""Start benchmark: what starting an attempt costs with 100 rows in flight and with 50,000,
the statistics taken before the burst (autovacuum off, as when a burst lands between two of
its runs), and what the claim's two reads of the in-flight work cost at 100,000 in flight.

Printed: the start's median and 90th percentile at each size and their ratio (target: within
±50%); the start statement's own execution in the database and the index its plan reaches the
row by (explained and rolled back: a loaded machine's commits blur the first figure, never
the second); and the medians of `in_flight_count`
(bounded by `max_in_flight`, as the claim asks it, and unbounded) and `seconds_until_next_due`,
with the load average.
"""

from __future__ import annotations

import os
import re
import statistics
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import sqlalchemy as sa

from cronledger.ledger import Ledger, NewOccurrence, Occurrence
from cronledger.settings import Settings
from tests.bench.pg import scratch_database
from tests.ledger.helpers import start_attempt

STARTS = 100
BURST = 50_000
MOST_IN_FLIGHT = 100_000
LEASE_SECS = 600.0
READS = 50
#: Starts whose statement is explained (and rolled back) at each size.
PLANNED = 20


def main() -> None:
    with scratch_database("start") as url:
        ledger = Ledger.connect(url)
        ledger.migrate()
        with ledger.engine.begin() as conn:
            conn.exec_driver_sql("ALTER TABLE cron_occurrences SET (autovacuum_enabled = false)")
        # Statistics taken while little is in flight, as between bursts
        quiet = claimed(ledger, STARTS, "quiet")
        with ledger.engine.begin() as conn:
            conn.exec_driver_sql("ANALYZE cron_occurrences")
        quiet_plan = planned_starts(ledger, quiet[-PLANNED:])
        before = timed_starts(ledger, quiet[:-PLANNED])
        # A burst lands: fifty thousand more in flight, and no ANALYZE since
        busy = claimed(ledger, BURST + STARTS, "burst")[:STARTS]
        busy_plan = planned_starts(ledger, busy[-PLANNED:])
        after = timed_starts(ledger, busy[:-PLANNED])
        report("start, 100 in flight", before)
        report(f"start, {BURST:,} in flight (statistics from before)", after)
        for label, (ms, index) in (("100", quiet_plan), (f"{BURST:,}", busy_plan)):
            print(
                f"start statement in the database, {label} in flight: median {ms:.3f} ms, "
                f"reached by {index}"
            )
        ratio = statistics.median(after) / statistics.median(before)
        verdict = "ok" if 0.5 <= ratio <= 1.5 else "OUTSIDE"
        print(f"start cost ratio {BURST:,} / 100 in flight: {ratio:.2f} (target ±50%: {verdict})")
        claimed(ledger, MOST_IN_FLIGHT - BURST - 2 * STARTS, "more")
        limit = Settings().max_in_flight
        in_flight = ledger.reporting.in_flight_count()
        report(
            f"in_flight_count(at_most={limit}), {in_flight:,} in flight",
            timed(lambda: ledger.reporting.in_flight_count(at_most=limit)),
        )
        report(
            f"in_flight_count(), {in_flight:,} in flight", timed(ledger.reporting.in_flight_count)
        )
        report(
            f"seconds_until_next_due, {in_flight:,} in flight",
            timed(ledger.reporting.seconds_until_next_due),
        )
        ledger.dispose()


def claimed(ledger: Ledger, count: int, claimant: str) -> list[Occurrence]:
    """`count` rows due a minute ago, claimed under `claimant`."""
    now = ledger.db_now()
    rows = [
        NewOccurrence(f"{claimant}-{n % 500}", "start", 1, now - timedelta(minutes=1, seconds=n))
        for n in range(count)
    ]
    for start in range(0, count, 10_000):
        ledger.occurrences.insert_occurrences(rows[start : start + 10_000])
    leased: list[Occurrence] = []
    while len(leased) < count:
        leased += ledger.attempts.claim(claimant, min(1000, count - len(leased)), LEASE_SECS).leased
    return leased


def timed_starts(ledger: Ledger, leased: list[Occurrence]) -> list[float]:
    """Seconds each start took, one occurrence after another."""
    took = []
    for occurrence in leased:
        started = time.perf_counter()
        outcome = start_attempt(ledger, occurrence, occurrence.claimed_by or "", 1, None, 600)
        took.append(time.perf_counter() - started)
        assert outcome.started, outcome
    return took


def planned_starts(ledger: Ledger, leased: list[Occurrence]) -> tuple[float, str]:
    """The start statement's median execution time (ms) over `leased` and the indexes it
    reached its row by, each explained in a transaction rolled back (and then started for
    real, so that the next one is a different row)."""
    plans: list[str] = []

    def explain(conn: Any, cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        if "UPDATE cron_occurrences" in statement:
            cursor.execute("BEGIN")
            cursor.execute("EXPLAIN (ANALYZE) " + statement, parameters)
            plans.append("\n".join(line for (line,) in cursor.fetchall()))
            cursor.execute("ROLLBACK")

    sa.event.listen(ledger.engine, "before_cursor_execute", explain)
    try:
        for occurrence in leased:
            claimant = occurrence.claimed_by or ""
            assert start_attempt(ledger, occurrence, claimant, 1, None, 600).started
    finally:
        sa.event.remove(ledger.engine, "before_cursor_execute", explain)
    times = [float(re.findall(r"Execution Time: ([0-9.]+) ms", plan)[0]) for plan in plans]
    indexes = {
        found.group(1) if found else "a scan of the table"
        for found in (re.search(r"Index Scan using (\w+) on cron_occurrences", p) for p in plans)
    }
    return statistics.median(times), ", ".join(sorted(indexes))


def timed(read: Callable[[], object]) -> list[float]:
    took = []
    for _ in range(READS):
        started = time.perf_counter()
        read()
        took.append(time.perf_counter() - started)
    return took


def report(what: str, took: list[float]) -> None:
    p90 = statistics.quantiles(took, n=10)[-1]
    print(
        f"{what}: median {statistics.median(took) * 1000:.2f} ms, p90 {p90 * 1000:.2f} ms "
        f"(load {os.getloadavg()[0]:.1f})",
        flush=True,
    )


if __name__ == "__main__":
    main()
