"""Paging benchmark: the API's lists on a big ledger, through the real route handlers.

Seeded in SQL (as `bench_retention` seeds it): 2,000,000 occurrences, and 100,000 active
channels. Printed, each the median of `READS` reads: `GET /cron/occurrences` first page, a
page by `next` a million rows in, a `status=failed` page and a `trigger=manual` page past a
key, the first page at offset 10,000, and `GET /cron/status` first page and a page by `next`,
with the load average. Target: 50 ms each.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from typing import Any

from cronledger.api import PREFIX, create_app
from cronledger.ledger import Ledger
from cronledger.settings import Settings
from tests.api.http import call
from tests.bench.bench_retention import seed
from tests.bench.pg import scratch_database

CHANNELS = 100_000
READS = 15
TARGET_MS = 50.0


def main() -> None:
    with scratch_database("paging") as url:
        ledger = Ledger.connect(url)
        ledger.migrate()
        seed(url)
        seed_channels(ledger)
        app = create_app(ledger, Settings())

        def get(path: str, **query: Any) -> dict[str, Any]:
            answer = call(app, "GET", f"{PREFIX}{path}", query)
            assert answer.status == 200, answer.body
            body: dict[str, Any] = answer.body
            return body

        deep = get("/cron/occurrences", limit=1, offset=10_000)["next"]
        for _ in range(99):  # a key a million rows in: each step skips 10,000
            deep = get("/cron/occurrences", limit=1000, after=deep)["next"]
        reads: dict[str, Callable[[], object]] = {
            "occurrences, first page": lambda: get("/cron/occurrences"),
            "occurrences, a page by next ~1,000,000 rows in": lambda: get(
                "/cron/occurrences", after=deep
            ),
            "occurrences, status=failed past that key": lambda: get(
                "/cron/occurrences", status="failed", after=deep
            ),
            "occurrences, trigger=manual past that key": lambda: get(
                "/cron/occurrences", trigger="manual", after=deep
            ),
            "occurrences, offset 10,000": lambda: get("/cron/occurrences", offset=10_000),
            f"cron/status, first page of {CHANNELS:,} channels": lambda: get("/cron/status"),
        }
        second = get("/cron/status")["next"]
        reads["cron/status, the page by next"] = lambda: get("/cron/status", after=second)
        for what, read in reads.items():
            took = timed(read)
            verdict = "ok" if took <= TARGET_MS else "OVER"
            print(
                f"{what}: median {took:.1f} ms (target {TARGET_MS:.0f}: {verdict}; load "
                f"{os.getloadavg()[0]:.1f})",
                flush=True,
            )
        ledger.dispose()


def seed_channels(ledger: Ledger) -> None:
    with ledger.engine.begin() as conn:
        conn.exec_driver_sql("SET LOCAL statement_timeout = 0")
        conn.exec_driver_sql(
            f"""
            INSERT INTO cron_channels (channel_id, name, status, version, transport_config,
                target, timeout_ms, created_at, updated_at)
            SELECT 'c-' || lpad(n::text, 7, '0'), 'team-' || mod(n, 100) || '-job-' || n,
                'active', 1, '{{"schedule": "0 0 9 * * *", "timezone": "Europe/Paris"}}',
                '{{"type": "python", "callable": "cronledger.demo:hello"}}', 30000,
                now() - make_interval(secs => {CHANNELS} - n), now()
            FROM generate_series(1, {CHANNELS}) AS n
            """
        )
    with ledger.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql("VACUUM ANALYZE cron_channels")


def timed(read: Callable[[], object]) -> float:
    """Median milliseconds of `READS` reads."""
    took = []
    for _ in range(READS):
        started = time.perf_counter()
        read()
        took.append(time.perf_counter() - started)
    return statistics.median(took) * 1000


if __name__ == "__main__":
    main()
