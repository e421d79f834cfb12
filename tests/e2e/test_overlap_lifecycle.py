"""Overlap policies meeting a channel's lifecycle: a `queue_one` contender waiting on a key
whose channel is then paused, archived or edited gives the key's waiting place back when its
attempt ends, so a contender of another channel sharing the key is not turned away (nor made
to wait out the dead waiter's lease) while the key is free."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from cronledger.execute import Executor
from cronledger.ledger import (
    COMPLETED,
    FAILED,
    RUNNING,
    SKIPPED_SINGLETON,
    Channel,
    Ledger,
    NewOccurrence,
    Occurrence,
    SingletonSpec,
)
from tests.e2e.test_scheduler import FAST
from tests.ledger.helpers import LEASE, claim_one, held_slots, reclaim, settle, start_attempt

KEY = "shared"
QUEUE_ONE = {"policy": "queue_one", "key": KEY}


def _channel(ledger: Ledger, name: str, concurrency: dict[str, Any]) -> Channel:
    return ledger.channels.create_channel(
        name=name,
        transport_config={"schedule": "0 0 0 1 1 *", "concurrency": concurrency},
        target={"type": "python", "callable": "tests.e2e.targets:record"},
        timeout_ms=20_000,
        status="active",
    )


def _claimed(ledger: Ledger, channel: Channel, ago: float, claimant: str) -> Occurrence:
    at = ledger.db_now() - timedelta(seconds=ago)
    assert ledger.occurrences.insert_occurrence(
        NewOccurrence(channel.channel_id, channel.name, 1, at)
    )
    return claim_one(ledger, claimant)


def _edit(ledger: Ledger, channel: Channel, concurrency: dict[str, Any] | None) -> None:
    config = {k: v for k, v in channel.transport_config.items() if k != "concurrency"}
    if concurrency is not None:
        config["concurrency"] = concurrency
    ledger.channels.new_channel_version(
        channel.channel_id, config, channel.target, channel.timeout_ms
    )


CHANGES: dict[str, Any] = {
    "paused": lambda ledger, ch: ledger.channels.set_channel_status(ch.channel_id, "paused"),
    "archived": lambda ledger, ch: ledger.channels.set_channel_status(ch.channel_id, "archived"),
    "policy_forbid": lambda ledger, ch: _edit(ledger, ch, {"policy": "forbid", "key": KEY}),
    "policy_allow": lambda ledger, ch: _edit(ledger, ch, {"policy": "allow", "key": KEY}),
    "no_concurrency": lambda ledger, ch: _edit(ledger, ch, None),
    "key_renamed_busy": lambda ledger, ch: _edit(ledger, ch, {"policy": "forbid", "key": "k2"}),
}

#: What the waiter's own attempt comes to after the change (SPEC §5 step 1 for a channel that
#: is no longer active; the new policy otherwise).
WAITER_ENDS = {
    "paused": FAILED,
    "archived": FAILED,
    "policy_forbid": SKIPPED_SINGLETON,  # the holder still runs
    "policy_allow": COMPLETED,
    "no_concurrency": COMPLETED,
    "key_renamed_busy": SKIPPED_SINGLETON,  # k2 is held too
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_a_waiter_whose_channel_changed_gives_the_waiting_place_back_when_it_ends(
    ledger: Ledger, change: str
) -> None:
    # Given channel A holding the shared key and a contender of A waiting on it, and a
    # channel B on the same key (queue_one)
    a = _channel(ledger, "a", QUEUE_ONE)
    b = _channel(ledger, "b", QUEUE_ONE)
    spec = SingletonSpec(KEY, 1, "queue_one")
    holder = _claimed(ledger, a, 30, "node-h")
    assert start_attempt(ledger, holder, "node-h", 1, spec, LEASE).started
    waiter = _claimed(ledger, a, 20, "node-w")
    assert start_attempt(ledger, waiter, "node-w", 1, spec, LEASE, wait_secs=30).outcome == (
        "waiting"
    )
    if change == "key_renamed_busy":  # the renamed key is held as well
        other = _claimed(ledger, b, 25, "node-o")
        assert start_attempt(ledger, other, "node-o", 1, SingletonSpec("k2", 1, "forbid"), LEASE)

    # When A changes, and the waiter comes back for the key and runs its attempt
    CHANGES[change](ledger, a)
    executor = Executor(ledger, FAST)
    reclaim(ledger, waiter.id, "node-w2")
    report = executor.run_attempt(waiter.id, "node-w2")
    assert report.status == WAITER_ENDS[change], report
    if WAITER_ENDS[change] == FAILED:
        assert "channel_unavailable" in (report.error or "")

    # Then, once the holder ends, a contender of B finds the key free: it starts (it is not
    # skipped on account of a waiter that is gone)
    token = ledger.occurrences.get_occurrence(holder.id).fencing_token
    assert settle(ledger, holder.id, "node-h", COMPLETED, fencing_token=token)
    contender = _claimed(ledger, b, 10, "node-b")
    start = start_attempt(ledger, contender, "node-b", 1, spec, LEASE)
    assert start.outcome == "started"
    assert ledger.occurrences.get_occurrence(contender.id).status == RUNNING


# --- slots reduced by an edit while holders run ---------------------------------------------


def _two_holders(ledger: Ledger) -> tuple[Occurrence, Occurrence]:
    """Two occurrences of one channel holding slots 0 and 1 of a two-slot `forbid` key, the
    one on slot 0 started first."""
    a = _channel(ledger, "a", {"policy": "forbid", "key": KEY, "slots": 2})
    two = SingletonSpec(KEY, 2, "forbid")
    first = _claimed(ledger, a, 30, "node-0")
    assert start_attempt(ledger, first, "node-0", 1, two, LEASE).slot == 0
    second = _claimed(ledger, a, 20, "node-1")
    assert start_attempt(ledger, second, "node-1", 1, two, LEASE).slot == 1
    return first, second


def test_holders_of_slots_an_edit_removed_still_renew_and_settle(ledger: Ledger) -> None:
    # Given two holders of a two-slot key, the key then cut to one slot (the spec a new
    # contender brings)
    _, second = _two_holders(ledger)
    one = SingletonSpec(KEY, 1, "forbid")

    # Then the holder of the removed slot still renews and settles under its token, and its
    # slot is no one's afterwards
    token = ledger.occurrences.get_occurrence(second.id).fencing_token
    assert ledger.attempts.renew(second.id, "node-1", token, LEASE)
    assert settle(ledger, second.id, "node-1", COMPLETED, fencing_token=token)
    assert held_slots(ledger, KEY) == 1
    # and a contender under the new spec waits for slot 0 only
    late = _claimed(ledger, _channel(ledger, "b", {"policy": "forbid", "key": KEY}), 10, "n")
    assert start_attempt(ledger, late, "n", 1, one, LEASE).outcome == "singleton_busy"


def test_a_contender_after_slots_were_cut_waits_for_the_remaining_holders(
    ledger: Ledger,
) -> None:
    # Given two holders of a two-slot key, the key then cut to one slot
    first, _ = _two_holders(ledger)
    one = SingletonSpec(KEY, 1, "forbid")

    # When the holder of slot 0 ends while slot 1's still runs
    token = ledger.occurrences.get_occurrence(first.id).fencing_token
    assert settle(ledger, first.id, "node-0", COMPLETED, fencing_token=token)

    # Then a contender under the new spec is turned away: one already runs
    late = _claimed(ledger, _channel(ledger, "b", {"policy": "forbid", "key": KEY}), 10, "n")
    assert start_attempt(ledger, late, "n", 1, one, LEASE).outcome == "singleton_busy"
    assert held_slots(ledger, KEY) == 1
