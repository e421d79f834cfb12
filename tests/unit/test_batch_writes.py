"""How a batch's ends are grouped: a group is written once no target of the batch can still
join it, once it is full, or when its wait runs out, and at once when an end's lease margin
would otherwise pass; a group whose write keeps failing is tried again, whole, until the
lease's give-up, and then the batch raises the error; a write that fails for good fails its
own attempts only, while the others run to their ends."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import pytest

from cronledger import execute
from cronledger.execute import Executor
from cronledger.ledger import (
    CHANNEL_ACTIVE,
    COMPLETED,
    RUNNING,
    DatabaseUnavailable,
    Ledger,
    NewOccurrence,
)
from cronledger.ledger.attempts import SettleRequest
from cronledger.settings import Settings
from tests.e2e import targets
from tests.ledger.helpers import with_stores

SETTINGS = Settings(misfire_grace_secs=3600, python_targets=("tests.e2e.targets",))
#: A lease whose margin comes a second after each grant (lease less a heartbeat).
SHORT_LEASE = SETTINGS.model_copy(update={"claim_lease_secs": 2, "heartbeat_interval_secs": 1})


class Groups:
    """The real attempt writes, recording each group of ends written (as sets of ids); the
    first group written releases the blocked targets. The first `failing` writes of ends
    raise `error` instead."""

    def __init__(self, ledger: Ledger, failing: float = 0, error: Exception | None = None) -> None:
        self._attempts = ledger.attempts
        self.failing, self.error = failing, error
        self.written: list[set[str]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._attempts, name)

    def settle_many(self, requests: Sequence[SettleRequest]) -> list[bool]:
        self.written.append({r.occurrence_id for r in requests})
        targets.release.set()
        if len(self.written) <= self.failing:
            raise self.error or DatabaseUnavailable("connection refused")
        return self._attempts.settle_many(requests)


def claimed(ledger: Ledger, *callables: str) -> list[str]:
    """One claimed occurrence per target callable, in order (its timeout: 10 s)."""
    targets.reset()
    ids = []
    for n, name in enumerate(callables):
        channel = ledger.channels.create_channel(
            f"batch-{n}",
            {"schedule": "0 0 0 1 1 *"},
            {"type": "python", "callable": f"tests.e2e.targets:{name}"},
            10_000,
            CHANNEL_ACTIVE,
        )
        due = NewOccurrence.of(channel, ledger.db_now() - timedelta(seconds=1), None)
        assert ledger.occurrences.insert_occurrence(due)
        ids.append(due.id)
    assert len(ledger.attempts.claim("node-a", len(ids), 60).leased) == len(ids)
    return ids


def run(ledger: Ledger, groups: Groups, ids: list[str], settings: Settings = SETTINGS) -> None:
    reports = Executor(with_stores(ledger, attempts=groups), settings).run_batch(ids, "node-a")
    assert [r.status for r in reports] == [COMPLETED] * len(ids), reports


def test_a_group_is_written_once_no_target_of_the_batch_can_still_join_it(
    sqlite_ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(execute, "SETTLE_EVERY_SECS", 3600)
    ids = claimed(sqlite_ledger, "record", "record", "record")
    groups = Groups(sqlite_ledger)
    run(sqlite_ledger, groups, ids)
    assert groups.written == [set(ids)]


def test_a_full_group_is_written_without_waiting_for_the_rest(
    sqlite_ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(execute, "SETTLE_EVERY_SECS", 3600)
    monkeypatch.setattr(execute, "SETTLE_MOST", 2)
    first, second, blocked = claimed(sqlite_ledger, "record", "record", "wait_for_release")
    groups = Groups(sqlite_ledger)
    run(sqlite_ledger, groups, [first, second, blocked])
    assert groups.written == [{first, second}, {blocked}]


@pytest.mark.parametrize(
    ("wait_secs", "settings"),
    [
        pytest.param(0.01, SETTINGS, id="its-wait-runs-out"),
        # Other targets of the batch may still end, but this end must go before its lease
        # (granted at the start, not renewed since it ended) passes its margin
        pytest.param(3600, SHORT_LEASE, id="its-lease-margin-comes"),
    ],
)
def test_an_end_goes_alone_when_its_wait_or_its_margin_runs_out_before_the_rest(
    sqlite_ledger: Ledger, monkeypatch: pytest.MonkeyPatch, wait_secs: float, settings: Settings
) -> None:
    monkeypatch.setattr(execute, "SETTLE_EVERY_SECS", wait_secs)
    quick, blocked = claimed(sqlite_ledger, "record", "wait_for_release")
    groups = Groups(sqlite_ledger)
    run(sqlite_ledger, groups, [quick, blocked], settings)
    assert groups.written == [{quick}, {blocked}]


def test_a_group_whose_write_keeps_failing_is_tried_whole_until_the_give_up_then_raised(
    sqlite_ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(execute, "SETTLE_EVERY_SECS", 3600)
    ids = claimed(sqlite_ledger, "record", "record")
    groups = Groups(sqlite_ledger, failing=math.inf)
    with pytest.raises(DatabaseUnavailable):
        run(
            sqlite_ledger,
            groups,
            ids,
            SETTINGS.model_copy(update={"claim_lease_secs": 3, "heartbeat_interval_secs": 1}),
        )
    assert len(groups.written) >= 2 and all(group == set(ids) for group in groups.written)


def test_a_write_that_fails_for_good_fails_its_own_attempts_while_the_others_end(
    sqlite_ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(execute, "SETTLE_EVERY_SECS", 0.01)
    quick, blocked = claimed(sqlite_ledger, "record", "wait_for_release")
    groups = Groups(sqlite_ledger, failing=1, error=RuntimeError("the write broke"))
    executor = Executor(with_stores(sqlite_ledger, attempts=groups), SETTINGS)
    with pytest.raises(RuntimeError, match="the write broke"):
        executor.run_batch([quick, blocked], "node-a")
    # The quick one's end was lost with its write; the blocked one ran on and was settled
    assert groups.written == [{quick}, {blocked}]
    assert sqlite_ledger.occurrences.get_occurrence(quick).status == RUNNING
    assert sqlite_ledger.occurrences.get_occurrence(blocked).status == COMPLETED
