"""Start benchmark: what starting an attempt costs with 100 rows in flight and with 50,000,
the statistics taken before the burst (autovacuum off, as when a burst lands between two of
its runs), and what the claim's two reads of the in-flight work cost at 100,000 in flight.

Printed: the start's median and 90th percentile at each size and their ratio (target: within
±50%), and the medians of `in_flight_count` (bounded by `max_in_flight`, as the claim asks it,
and unbounded) and `seconds_until_next_due`, with the load average.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from datetime import timedelta

from cronledger.ledger import Ledger, NewOccurrence, Occurrence
from cronledger.settings import Settings
from tests.bench.pg import scratch_database

STARTS = 100
BURST = 50_000
MOST_IN_FLIGHT = 100_000
LEASE_SECS = 600.0
READS = 50


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
        before = timed_starts(ledger, quiet)
        # A burst lands: fifty thousand more in flight, and no ANALYZE since
        busy = claimed(ledger, BURST + STARTS, "burst")[:STARTS]
        after = timed_starts(ledger, busy)
        report("start, 100 in flight", before)
        report(f"start, {BURST:,} in flight (statistics from before)", after)
        ratio = statistics.median(after) / statistics.median(before)
        verdict = "ok" if 0.5 <= ratio <= 1.5 else "OUTSIDE"
        print(f"start cost ratio {BURST:,} / 100 in flight: {ratio:.2f} (target ±50%: {verdict})")
        claimed(ledger, MOST_IN_FLIGHT - BURST - 2 * STARTS, "more")
        limit = Settings().max_in_flight
        in_flight = ledger.in_flight_count()
        report(
            f"in_flight_count(at_most={limit}), {in_flight:,} in flight",
            timed(lambda: ledger.in_flight_count(at_most=limit)),
        )
        report(f"in_flight_count(), {in_flight:,} in flight", timed(ledger.in_flight_count))
        report(
            f"seconds_until_next_due, {in_flight:,} in flight",
            timed(ledger.seconds_until_next_due),
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
        ledger.insert_occurrences(rows[start : start + 10_000])
    leased: list[Occurrence] = []
    while len(leased) < count:
        leased += ledger.claim(claimant, min(1000, count - len(leased)), LEASE_SECS).leased
    return leased


def timed_starts(ledger: Ledger, leased: list[Occurrence]) -> list[float]:
    """Seconds each start took, one occurrence after another."""
    took = []
    for occurrence in leased:
        started = time.perf_counter()
        outcome = ledger.start_attempt(occurrence, occurrence.claimed_by or "", 1, None, 600)
        took.append(time.perf_counter() - started)
        assert outcome.started, outcome
    return took


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
