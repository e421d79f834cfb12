"""The attempt port's behaviour, on PostgreSQL, SQLite and the in-memory fake alike: the fake
passes every test here, so it cannot drift from the SQL.

An attempt starts only under its own claim, takes a free slot of its key under the slot's
next fencing token, and every later write (renew, settle, hand back) is conditional on the
claimant and, with a key, the token: a superseded holder writes nothing. The batch forms
answer each attempt as it would be answered alone."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest

from cronledger.ledger import (
    CLAIMED,
    COMPLETED,
    FAILED,
    PENDING,
    RUNNING,
    Ledger,
    Occurrence,
    SingletonSpec,
)
from cronledger.ledger.attempts import SettleRequest, StartRequest
from tests.fake_ledger import FakeLedger
from tests.ledger.helpers import (
    LEASE,
    active_channel,
    empty_tables,
    expire_claim,
    row,
    settle,
    start_attempt,
)

FORBID = SingletonSpec("k", 1, "forbid")


@dataclass
class Backend:
    """A ledger under test (an `AttemptPort` that can also seed, claim and read rows), and
    how to make a lease run out on it."""

    ledger: Any
    expire: Callable[[str], None]
    channel_id: str
    seeded: int = 0

    def claimed(self, claimant: str) -> Occurrence:
        """A new row, due (a second apart from the last: the fake's clock stands still), and
        claimed by `claimant`."""
        self.seeded += 1
        ago = timedelta(seconds=60 - self.seeded)
        new = row(self.ledger.db_now() - ago, self.channel_id)
        assert self.ledger.occurrences.insert_occurrence(new)
        [claimed] = self.ledger.attempts.claim(claimant, 1, LEASE).leased
        assert claimed.id == new.id
        return claimed

    def start(self, occurrence: Occurrence, claimant: str, key: SingletonSpec | None = None) -> Any:
        return start_attempt(self.ledger, occurrence, claimant, 1, key, LEASE)

    def reclaim(self, occurrence: Occurrence, claimant: str) -> None:
        """The lease runs out and `claimant` claims the row again."""
        self.expire(occurrence.id)
        [again] = self.ledger.attempts.claim(claimant, 1, LEASE).leased
        assert again.id == occurrence.id


@pytest.fixture(params=["postgresql", "sqlite", "fake"])
def backend(request: pytest.FixtureRequest) -> Backend:
    if request.param == "fake":
        fake = FakeLedger()
        return Backend(fake, fake.expire_lease, fake.add_channel("nightly", {}).channel_id)
    real: Ledger = request.getfixturevalue(
        f"{'pg' if request.param == 'postgresql' else 'sqlite'}_ledger"
    )
    if request.param == "postgresql":
        empty_tables(real)
    channel = active_channel(real)
    return Backend(
        real, lambda occurrence_id: expire_claim(real, occurrence_id), channel.channel_id
    )


def test_an_attempt_starts_under_its_own_claim_only(backend: Backend) -> None:
    ledger = backend.ledger
    claimed = backend.claimed("node-a")

    assert backend.start(claimed, "node-b").outcome == "lost"
    assert ledger.occurrences.get_occurrence(claimed.id).status == CLAIMED

    started = backend.start(claimed, "node-a")
    assert started.started and started.fencing_token is None
    now = ledger.occurrences.get_occurrence(claimed.id)
    assert (now.status, now.claimed_by, now.started_at) == (RUNNING, "node-a", started.started_at)
    assert backend.start(claimed, "node-a").outcome == "lost"  # a duplicate delivery


def test_a_held_key_is_busy_and_each_acquisition_gets_the_next_token(backend: Backend) -> None:
    ledger = backend.ledger
    first, second = backend.claimed("node-a"), backend.claimed("node-b")

    held = backend.start(first, "node-a", FORBID)
    assert held.started and held.slot == 0 and held.fencing_token == 1
    assert backend.start(second, "node-b", FORBID).outcome == "singleton_busy"
    assert ledger.occurrences.get_occurrence(second.id).status == CLAIMED

    assert settle(ledger, first.id, "node-a", COMPLETED, fencing_token=held.fencing_token)
    again = backend.start(second, "node-b", FORBID)
    assert again.started and again.fencing_token == 2


def test_renew_and_settle_are_conditional_on_claimant_and_token(backend: Backend) -> None:
    ledger = backend.ledger
    claimed = backend.claimed("node-a")
    token = backend.start(claimed, "node-a", FORBID).fencing_token

    assert not ledger.attempts.renew(claimed.id, "node-b", token, LEASE)
    assert not ledger.attempts.renew(claimed.id, "node-a", token + 1, LEASE)
    assert ledger.attempts.renew(claimed.id, "node-a", token, LEASE)
    assert not settle(ledger, claimed.id, "node-a", COMPLETED, fencing_token=token + 1)
    assert not settle(ledger, claimed.id, "node-b", COMPLETED, fencing_token=token)
    assert ledger.occurrences.get_occurrence(claimed.id).status == RUNNING

    assert settle(ledger, claimed.id, "node-a", COMPLETED, fencing_token=token, result="ok")
    done = ledger.occurrences.get_occurrence(claimed.id)
    assert (done.status, done.result, done.claimed_until) == (COMPLETED, "ok", None)
    assert not ledger.attempts.renew(claimed.id, "node-a", token, LEASE)


def test_a_superseded_holder_writes_nothing_after_a_reclaim(backend: Backend) -> None:
    ledger = backend.ledger
    claimed = backend.claimed("node-a")
    assert backend.start(claimed, "node-a").started
    backend.reclaim(claimed, "node-b")

    assert not ledger.attempts.renew(claimed.id, "node-a", None, LEASE)
    assert not settle(ledger, claimed.id, "node-a", COMPLETED)
    now = ledger.occurrences.get_occurrence(claimed.id)
    assert (now.status, now.claimed_by, now.attempt) == (CLAIMED, "node-b", 2)


def test_a_failure_with_attempts_left_goes_back_to_pending_after_its_backoff(
    backend: Backend,
) -> None:
    ledger = backend.ledger
    claimed = backend.claimed("node-a")
    assert backend.start(claimed, "node-a").started
    before = ledger.db_now()

    assert settle(ledger, claimed.id, "node-a", FAILED, error_message="boom", retry_in=30)

    now = ledger.occurrences.get_occurrence(claimed.id)
    assert (now.status, now.claimed_by, now.error_message) == (PENDING, None, "boom")
    assert now.due_at >= before + timedelta(seconds=30)
    assert now.attempt == 1 and now.started_at is None


def test_only_the_holder_hands_a_claim_back_or_waits_for_its_key(backend: Backend) -> None:
    ledger = backend.ledger
    first, second = backend.claimed("node-a"), backend.claimed("node-b")

    assert not ledger.attempts.release_claim(first.id, "node-b")
    assert ledger.attempts.release_claim(first.id, "node-a")
    back = ledger.occurrences.get_occurrence(first.id)
    assert (back.status, back.claimed_by, back.attempt) == (PENDING, None, 0)

    assert not ledger.attempts.release_claim(second.id, "node-a", due_in=5)
    before = ledger.db_now()
    assert ledger.attempts.release_claim(second.id, "node-b", due_in=5)
    waiting = ledger.occurrences.get_occurrence(second.id)
    assert (waiting.status, waiting.attempt) == (PENDING, 0)
    assert waiting.due_at >= before + timedelta(seconds=5)


def test_the_batch_forms_answer_each_attempt_as_it_would_be_answered_alone(
    backend: Backend,
) -> None:
    ledger = backend.ledger
    mine, lost, keyed = (backend.claimed("node-a") for _ in range(3))
    backend.reclaim(lost, "node-b")

    opened = ledger.attempts.open_attempts(
        [mine.id, lost.id, "no-such-id"], "node-a", LEASE, "trace", misfire_grace_secs=3600
    )
    assert set(opened) == {mine.id, lost.id}
    assert opened[lost.id].occurrence.claimed_by == "node-b"

    requests = [StartRequest(o, 1, key) for o, key in ((mine, None), (lost, None), (keyed, FORBID))]
    started = ledger.attempts.start_attempts(requests, "node-a", LEASE)
    # (on PostgreSQL the open started `mine` already: starting it again is `lost`)
    assert [s.outcome for s in started[1:]] == ["lost", "started"]
    token = started[2].fencing_token

    settled = ledger.attempts.settle_many(
        [
            SettleRequest(mine.id, "node-a", COMPLETED, result="a"),
            SettleRequest(lost.id, "node-a", COMPLETED),
            SettleRequest(keyed.id, "node-a", COMPLETED, fencing_token=token + 1),
        ]
    )
    assert settled == [True, False, False]
    assert ledger.occurrences.get_occurrence(mine.id).status == COMPLETED
    assert ledger.occurrences.get_occurrence(lost.id).claimed_by == "node-b"
    assert ledger.occurrences.get_occurrence(keyed.id).status == RUNNING
