"""The executor's lease timer runs on its clock: an attempt whose renewals all fail tries once
a heartbeat and stops itself once `renewal_give_up` has passed, writing nothing, before a
peer could take its lease over. On a fake clock the heartbeats pass without being waited."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from cronledger.execute import Executor
from cronledger.ledger import CHANNEL_ACTIVE, RUNNING, DatabaseUnavailable, Ledger, NewOccurrence
from cronledger.settings import Settings
from tests.e2e import targets
from tests.fake_ledger import FakeClock
from tests.ledger.helpers import with_stores


class RenewalsFail:
    """The real ledger, except that every renewal fails as an unreachable database does;
    `tried_at` is the clock's time at each."""

    def __init__(self, ledger: Ledger, clock: FakeClock) -> None:
        self._ledger = ledger
        self._clock = clock
        self.tried_at: list[float] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ledger.attempts, name)

    def renew(self, *args: Any, **kwargs: Any) -> bool:
        self.tried_at.append(self._clock.now)
        raise DatabaseUnavailable("connection refused")


def test_an_attempt_whose_renewals_all_fail_stops_itself_when_the_lease_gives_up(
    sqlite_ledger: Ledger,
) -> None:
    # Given a running target that blocks, on an executor whose renewals all fail
    targets.reset()
    channel = sqlite_ledger.channels.create_channel(
        "blocks",
        {"schedule": "0 0 0 1 1 *"},
        {"type": "python", "callable": "tests.e2e.targets:wait_for_release"},
        600_000,
        CHANNEL_ACTIVE,
    )
    due = NewOccurrence.of(channel, sqlite_ledger.db_now() - timedelta(seconds=1), None)
    assert sqlite_ledger.occurrences.insert_occurrence(due)
    assert sqlite_ledger.attempts.claim("node-a", 1, 60).leased
    # (a grace no load can outlast: the row is never judged late, which would wait first; the
    # target's module allowed, so it blocks rather than being refused at once, which would end
    # the heartbeats whenever its thread got to run)
    settings = Settings(
        claim_lease_secs=60,
        heartbeat_interval_secs=15,
        misfire_grace_secs=3600,
        python_targets=("tests.e2e.targets",),
    )
    clock = FakeClock()
    ledger = RenewalsFail(sqlite_ledger, clock)
    executor = Executor(with_stores(sqlite_ledger, attempts=ledger), settings, clock=clock.clock)
    started = clock.now

    # When it runs the attempt
    try:
        report = executor.run_attempt(due.id, "node-a")
    finally:
        targets.release.set()

    # Then it tried to renew once a heartbeat, and stopped once the lease's give-up (lease
    # less a heartbeat) had passed without a renewal, writing nothing
    assert [at - started for at in ledger.tried_at] == pytest.approx([15, 30, 45], abs=1e-3)
    assert clock.now - started == pytest.approx(settings.renewal_give_up.total_seconds(), abs=1e-3)
    assert report.outcome == "stopped"
    assert report.error == (
        "no successful renewal within the lease; stopped before a peer could take over"
    )
    assert sqlite_ledger.occurrences.get_occurrence(due.id).status == RUNNING
