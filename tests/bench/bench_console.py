"""How long the web console takes to draw with 10,000 occurrences in the ledger (issue: under a
second), measured by headless Chromium from navigation to drawn, against the API as `cronledger
dev` serves it, on SQLite and on PostgreSQL: a fresh server's first page, then the median and
the slowest of the next ones. The machine's load average is printed beside the figures.

Needs Debian's chromium and chromium-driver; without them it says so and measures nothing.
"""

from __future__ import annotations

import os
import statistics
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from cronledger.api import create_app, handle_event
from cronledger.ledger import Ledger
from cronledger.local_gateway import serve_api
from tests.api.helpers import SETTINGS
from tests.bench.pg import scratch_database
from tests.browser import chromium

LOADS = 10


def main() -> None:
    if not (chromium.CHROMIUM and chromium.CHROMEDRIVER):
        print(f"console: not measured: {chromium.MISSING}")
        return
    with tempfile.TemporaryDirectory() as scratch:
        driver = chromium.start_chromium(Path(scratch) / "profile")
        try:
            with scratch_database("console") as url:
                measure(driver, "PostgreSQL", url)
            measure(driver, "SQLite", f"sqlite:///{Path(scratch) / 'ledger.db'}")
        finally:
            driver.quit()


def measure(driver: Any, backend: str, url: str) -> None:
    ledger = Ledger.connect(url)
    ledger.migrate()
    chromium.seed_busy_ledger(ledger)
    with served(ledger) as base:
        first = chromium.open_console(driver, base, timeout=60)
        again = sorted(chromium.open_console(driver, base, timeout=60) for _ in range(LOADS))
        driver.get("about:blank")  # the page refreshes itself: stop it before the server goes
    ledger.dispose()
    occurrences = chromium.BUSY_CHANNELS * chromium.BUSY_ROWS
    print(
        f"console drawn with {occurrences:,} occurrences ({backend}): first page "
        f"{first} ms, then median {statistics.median(again):.0f} ms, slowest {again[-1]} ms "
        f"({LOADS} loads; load average {os.getloadavg()[0]:.1f})",
        flush=True,
    )


@contextmanager
def served(ledger: Ledger) -> Iterator[str]:
    app = create_app(ledger, SETTINGS)
    server = serve_api(lambda event, context: handle_event(app, event, context), "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


if __name__ == "__main__":
    main()
