"""Shared by the API and command line tests: a scheduler driven one step at a time in the
test's own thread, and channel documents.

The scheduler is the real one (reconcile, claim, execute): only the pacing is the test's, so
an occurrence that "completes" here completed exactly as it would under `cronledger dev`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from cronledger.api import PREFIX
from cronledger.claim import claim_once
from cronledger.execute import Executor
from cronledger.invokers import OneByOne
from cronledger.ledger import Ledger
from cronledger.reconcile import reconcile_once
from cronledger.schedule_cache import ScheduleCache
from cronledger.settings import Settings
from tests.api.http import Answer

#: The `api` fixture: `api(method, path, query=None, body=None)` → an `Answer`.
Api = Callable[..., Answer]

CHANNELS = f"{PREFIX}/channels"
OCCURRENCES = f"{PREFIX}/cron/occurrences"
#: The suite's operator lets python targets call the suite's own functions, and nothing else.
SETTINGS = Settings(python_targets=("tests",))
OK_TARGET = {"type": "python", "callable": "tests.api.jobs:ok"}
FAIL_TARGET = {"type": "python", "callable": "tests.api.jobs:fail"}


class Scheduler(OneByOne):
    """Reconcile, then claim and run every due occurrence to a settled row, synchronously."""

    def __init__(self, ledger: Ledger, settings: Settings = SETTINGS) -> None:
        self.ledger = ledger
        self.settings = settings
        self.cache = ScheduleCache()
        self.executor = Executor(ledger, self.settings, schedules=self.cache)

    def reconcile(self) -> None:
        report = reconcile_once(self.ledger, self.settings, self.cache)
        assert not report.failed, report.failed

    def run_due(self) -> int:
        """Claim what is due and run each attempt here; how many ran."""
        ran = 0
        while True:
            round_ = claim_once(self.ledger, self.settings, self)
            ran += len(round_.dispatched)
            if not round_.dispatched:
                return ran

    def dispatch(self, occurrence_id: str, claimant: str) -> None:
        self.executor.run_attempt(occurrence_id, claimant)

    def until(self, done: Callable[[], bool], timeout: float = 10.0) -> None:
        """Reconcile and run passes (real time: the DB clock decides due-ness) until `done`."""
        deadline = time.monotonic() + timeout
        while not done():
            assert time.monotonic() < deadline, "the scheduler did not get there in time"
            self.reconcile()
            self.run_due()
            time.sleep(0.2)


def channel_document(name: str = "nightly", **overrides: Any) -> dict[str, Any]:
    document: dict[str, Any] = {
        "name": name,
        "transport_config": {"schedule": "0 15 2 * * *", "timezone": "Europe/London"},
        "target": OK_TARGET,
    }
    document.update(overrides)
    return document


def create_channel(api: Api, **overrides: Any) -> dict[str, Any]:
    answer = api("POST", CHANNELS, body=channel_document(**overrides))
    assert answer.status == 201, answer.body
    channel: dict[str, Any] = answer.data
    return channel
