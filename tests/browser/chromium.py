"""Headless Chromium for the console's tests and benchmark (Debian's `chromium` and
`chromium-driver`, driven by Selenium), and the ledger they measure the page against.

Nothing here downloads a browser: `CHROMIUM` and `CHROMEDRIVER` are what is installed (None
when it is not, and the tests say so).
"""

from __future__ import annotations

import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from cronledger.ledger import FAILED, Ledger, NewOccurrence
from tests.api.helpers import OK_TARGET

CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")
MISSING = (
    "the browser tests need Debian's chromium and chromium-driver "
    "(apt-get install chromium chromium-driver; .ci/run installs them)"
)
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1500,760",
)
#: The busy ledger: channels, each with this many past occurrences (one in seven failed).
BUSY_CHANNELS, BUSY_ROWS = 10, 1000


def start_chromium(profile: Path) -> Any:
    """A headless Chromium that logs its console and its network requests."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(30)
    return driver


def open_console(driver: Any, url: str, timeout: float = 10) -> int:
    """Load `url`/console and wait until it has drawn the ledger; the milliseconds the browser
    took from navigation to drawn."""
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get("about:blank")
    driver.get_log("browser")  # forget what earlier pages left
    driver.get_log("performance")
    driver.get(f"{url}/console")
    WebDriverWait(driver, timeout, poll_frequency=0.05).until(
        lambda d: d.execute_script("return document.body.dataset.loaded")
    )
    return int(
        driver.execute_script(
            "return Number(document.body.dataset.loaded) - performance.timing.navigationStart"
        )
    )


def seed_busy_ledger(ledger: Ledger) -> None:
    """`BUSY_CHANNELS` channels firing every minute, each with `BUSY_ROWS` past occurrences."""
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    for index in range(BUSY_CHANNELS):
        channel = ledger.channels.create_channel(
            f"busy-{index}", {"schedule": "0 * * * * *"}, OK_TARGET, 5000, "active"
        )
        ledger.occurrences.insert_occurrences(
            NewOccurrence.of(
                channel,
                now - timedelta(minutes=minute + 1),
                None,
                status="completed" if minute % 7 else FAILED,
            )
            for minute in range(BUSY_ROWS)
        )
