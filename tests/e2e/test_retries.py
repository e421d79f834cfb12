"""Retries end to end, on PostgreSQL and SQLite: whatever a target does, its occurrence is
settled; a failure is retried by the channel's policy, each attempt after its backoff, and
never more often than `max_attempts`; an executor that keeps dying is given up on."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from datetime import timedelta
from ipaddress import ip_network
from typing import Any

import pytest

from cronledger.claim import claim_once
from cronledger.execute import Executor
from cronledger.instants import to_rfc3339
from cronledger.invokers import OneByOne
from cronledger.ledger import (
    CHANNEL_ACTIVE,
    CLAIMED,
    COMPLETED,
    FAILED,
    RUNNING,
    DatabaseUnavailable,
    Ledger,
    NewOccurrence,
)
from cronledger.local import LocalScheduler
from tests.e2e import targets
from tests.e2e.test_scheduler import FAST, make_channel, rows, run_until_settled
from tests.ledger.helpers import expire_claim, settle, with_stores
from tests.polling import wait_until
from tests.unit.fixtures_targets import Answer, RecordingServer

RETRY_AT_ONCE = {"max_attempts": 3, "backoff_secs": 0}
#: FAST, and the recording HTTP server on loopback allowed as a target.
WITH_LOOPBACK = FAST.replace(http_allow_networks=(ip_network("127.0.0.0/8"),))


@pytest.fixture(autouse=True)
def _fresh_targets() -> Iterator[None]:
    targets.reset()
    yield
    targets.release.set()


def due_now(ledger: Ledger, channel_id: str, name: str = "job") -> NewOccurrence:
    new = NewOccurrence(channel_id, name, 1, ledger.db_now() - timedelta(seconds=1))
    assert ledger.occurrences.insert_occurrence(new)
    return new


def webhook_due(ledger: Ledger, server: RecordingServer, retry: dict[str, int]) -> NewOccurrence:
    """A due occurrence of an HTTP channel posting to `server`, retried by `retry`."""
    channel = ledger.channels.create_channel(
        "webhook",
        {"schedule": "0 0 0 1 1 *", "retry": retry},
        {"type": "http", "url": f"{server.url}/hook"},
        timeout_ms=5000,
        status=CHANNEL_ACTIVE,
    )
    return due_now(ledger, channel.channel_id, "webhook")


@pytest.mark.parametrize(
    ("target", "error"),
    [
        ("exit_process", "SystemExit: 3"),
        ("interrupt", "KeyboardInterrupt: interrupted by the job itself"),
        ("close_generator", "GeneratorExit: generator closed"),
    ],
)
def test_a_target_that_raises_a_base_exception_fails_every_attempt_and_ends_failed(
    ledger: Ledger, target: str, error: str
) -> None:
    # Given a channel allowed three attempts, retried at once, whose target raises past
    # `Exception`
    channel = make_channel(ledger, "0 0 0 1 1 *", target=target, retry=RETRY_AT_ONCE)
    due = due_now(ledger, channel.channel_id)

    # When the scheduler runs everything due until nothing is
    run_until_settled(ledger)

    # Then the target ran exactly three times, attempts 1, 2, 3, and the row is failed
    attempts = [e["trigger"]["attempt"] for e in targets.received[due.id]]
    assert attempts == [1, 2, 3]
    (row,) = rows(ledger)
    assert (row.status, row.attempt, row.max_attempts) == (FAILED, 3, 3)
    assert row.error_message == f"{error} (after 3 attempts)"
    assert row.claimed_until is None


def test_an_executor_that_dies_every_time_is_given_up_after_its_attempts(
    ledger: Ledger,
) -> None:
    # Given a due occurrence allowed three attempts, and executors that die on arrival
    channel = make_channel(ledger, "0 0 0 1 1 *", retry={"max_attempts": 3})
    due = due_now(ledger, channel.channel_id)
    dead = _DeadInvoker()

    # When each dispatch dies and its lease expires, round after round
    rounds = []
    for _ in range(5):
        rounds.append(claim_once(ledger, FAST, dead))
        if ledger.occurrences.get_occurrence(due.id).status != FAILED:
            expire_claim(ledger, due.id)

    # Then it was dispatched three times, settled failed by the fourth claim, and left alone
    assert dead.dispatched == [due.id] * 3
    assert [r.abandoned for r in rounds] == [[], [], [], [due.id], []]
    row = ledger.occurrences.get_occurrence(due.id)
    assert (row.status, row.attempt) == (FAILED, 3)
    assert row.error_message == "abandoned: lease expired after 3 attempts"
    assert targets.received == {}


@pytest.mark.slow
def test_a_failing_http_target_is_delivered_three_times_after_its_backoffs(
    ledger: Ledger,
) -> None:
    # Given an HTTP endpoint that always answers 503, behind a channel retried after 1 s
    with RecordingServer(Answer(status=503, body=b"down for maintenance")) as server:
        due = webhook_due(ledger, server, {"max_attempts": 3, "backoff_secs": 1})

        # When the scheduler runs until the occurrence is settled
        scheduler = LocalScheduler(ledger, WITH_LOOPBACK)
        scheduler.start()
        try:
            wait_until(
                lambda: ledger.occurrences.get_occurrence(due.id).status == FAILED, timeout=30
            )
        finally:
            scheduler.shutdown(drain_secs=5)

    # Then it was delivered exactly three times: one occurrence id, attempts 1, 2, 3, each
    # retry at least the backoff after the failure before it
    triggers = [json.loads(r.body)["trigger"] for r in server.received]
    assert [t["attempt"] for t in triggers] == [1, 2, 3]
    assert {t["occurrence_id"] for t in triggers} == {due.id}
    assert {t["scheduled_for"] for t in triggers} == {to_rfc3339(due.scheduled_for)}
    arrived = [r.at for r in server.received]
    gaps = [later - earlier for earlier, later in itertools.pairwise(arrived)]
    assert all(gap >= 1.0 for gap in gaps), gaps
    row = ledger.occurrences.get_occurrence(due.id)
    assert (row.status, row.attempt) == (FAILED, 3)
    assert row.error_message is not None and row.error_message.endswith("(after 3 attempts)")


def test_one_allowed_attempt_delivers_once(ledger: Ledger) -> None:
    with RecordingServer(Answer(status=500)) as server:
        due = webhook_due(ledger, server, {"max_attempts": 1, "backoff_secs": 0})
        run_until_settled(ledger, WITH_LOOPBACK)

    assert len(server.received) == 1
    row = ledger.occurrences.get_occurrence(due.id)
    assert (row.status, row.attempt) == (FAILED, 1)


def test_a_retry_that_succeeds_completes_the_same_occurrence(ledger: Ledger) -> None:
    # Given a target that fails its first attempt only
    with RecordingServer(Answer(status=503)) as server:
        due = webhook_due(ledger, server, RETRY_AT_ONCE)
        executor = Executor(ledger, WITH_LOOPBACK)
        [claimed] = ledger.attempts.claim("node-a", 10, FAST.claim_lease_secs).leased
        executor.run_attempt(claimed.id, "node-a")
        first = ledger.occurrences.get_occurrence(due.id)
        server.answer = Answer(status=200)

        # When the retry runs
        run_until_settled(ledger, WITH_LOOPBACK)

    # Then the one occurrence completed on its second attempt, its last error cleared
    assert (first.status, first.attempt) == ("pending", 1)
    assert first.error_message == "HTTP 503 Service Unavailable"
    row = ledger.occurrences.get_occurrence(due.id)
    assert (row.status, row.attempt, row.error_message) == ("completed", 2, None)
    assert len(server.received) == 2


class _DeadInvoker(OneByOne):
    """Hands each attempt to an executor that dies before doing anything."""

    def __init__(self) -> None:
        self.dispatched: list[str] = []

    def dispatch(self, occurrence_id: str, claimant: str) -> None:
        self.dispatched.append(occurrence_id)


class _SettleBlips:
    """The real ledger, except that its first settle fails as a dropped connection does
    (a failover, RDS Proxy recycling the connection): nothing written, `DatabaseUnavailable`."""

    def __init__(self, ledger: Ledger) -> None:
        self._ledger = ledger
        self.settles = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ledger.attempts, name)

    def settle(self, *args: Any, **kwargs: Any) -> bool:
        self.settles += 1
        if self.settles == 1:
            raise DatabaseUnavailable("ledger database unavailable: connection reset")
        return settle(self._ledger, *args, **kwargs)


def test_a_settle_that_meets_a_passing_database_blip_is_retried_not_run_again(
    ledger: Ledger,
) -> None:
    # Given a claimed occurrence of a channel allowed three attempts, and a ledger whose
    # first settle fails on a dropped connection
    channel = make_channel(ledger, "0 0 0 1 1 *", retry=RETRY_AT_ONCE)
    due = due_now(ledger, channel.channel_id)
    (claimed,) = ledger.attempts.claim("node-a", 1, FAST.claim_lease_secs).leased
    blips = _SettleBlips(ledger)

    # When the attempt runs its target to success, and later claims recover whatever is left
    report = Executor(with_stores(ledger, attempts=blips), FAST).run_attempt(claimed.id, "node-a")
    expire_claim_if_leased(ledger, due.id)
    run_until_settled(ledger)

    # Then the settle was tried again within the lease: the row is completed by attempt 1
    # and the target ran once, not a second time after the lease ran out
    assert report.status == COMPLETED
    row = ledger.occurrences.get_occurrence(due.id)
    assert (row.status, row.attempt, row.claimed_until) == (COMPLETED, 1, None)
    assert [e["trigger"]["attempt"] for e in targets.received[due.id]] == [1]


def expire_claim_if_leased(ledger: Ledger, occurrence_id: str) -> None:
    """Age a lease that is still held, as if the executor had died with it."""
    if ledger.occurrences.get_occurrence(occurrence_id).status in (CLAIMED, RUNNING):
        expire_claim(ledger, occurrence_id)
