"""What an attempt reads before it starts (the occurrence and its channel, in one read, which
on PostgreSQL also starts a plain attempt), and the start's handling of a slot left by an
earlier attempt when the read shows none can exist."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from cronledger.errors import NotFound
from cronledger.ledger import (
    CHANNEL_ACTIVE,
    CHANNEL_PAUSED,
    CLAIMED,
    RUNNING,
    AttemptStart,
    Ledger,
    Occurrence,
)
from cronledger.ledger.tables import occurrences
from tests.ledger.helpers import (
    LEASE,
    claim_one,
    expire_claim,
    held_slots,
    open_attempt,
    row,
    start,
)

SCHEDULE = {"schedule": "0 * * * * *"}
TARGET = {"type": "python", "callable": "cronledger.demo:hello"}


def test_an_occurrence_is_read_with_its_channel_as_the_channel_is_now(ledger: Ledger) -> None:
    # Given an occurrence materialised under version 1, and a channel edited since
    channel = ledger.channels.create_channel(
        "nightly", SCHEDULE, TARGET, 1000, status=CHANNEL_ACTIVE
    )
    due = row(ledger.db_now(), channel.channel_id)
    assert ledger.occurrences.insert_occurrence(due)
    ledger.channels.new_channel_version(channel.channel_id, SCHEDULE, TARGET, 2000)

    # When an attempt reads it (not its claimant's: nothing starts)
    opened = open_attempt(ledger, due.id, "nobody", LEASE, "trace", misfire_grace_secs=60)
    occurrence, current = opened.occurrence, opened.channel

    # Then it gets the row and the channel's current definition
    assert opened.start is None
    assert occurrence == ledger.occurrences.get_occurrence(due.id)
    assert current == ledger.channels.get_channel(channel.channel_id)
    assert current is not None and (current.version, current.timeout_ms) == (2, 2000)


def test_an_occurrence_whose_channel_is_gone_is_read_without_one(ledger: Ledger) -> None:
    due = row(ledger.db_now(), "deleted-long-ago")
    assert ledger.occurrences.insert_occurrence(due)

    opened = open_attempt(ledger, due.id, "nobody", LEASE, "trace", misfire_grace_secs=60)

    assert (opened.occurrence.id, opened.channel) == (due.id, None)
    with pytest.raises(NotFound):
        open_attempt(ledger, "no-such-occurrence", "nobody", LEASE, "trace", misfire_grace_secs=60)


def test_a_start_under_allow_frees_the_slot_a_crashed_forbid_attempt_left(ledger: Ledger) -> None:
    # Given attempt 1 ran under `forbid`, took the key's slot, and died
    assert ledger.occurrences.insert_occurrence(row(ledger.db_now()))
    first = claim_one(ledger, "node-a")
    assert start(ledger, first, "node-a", "key").started
    expire_claim(ledger, first.id)

    # When the channel now says `allow` and attempt 2 starts from its fresh read
    second = claim_one(ledger, "node-b")
    assert second.singleton_key == "key"
    assert start(ledger, second, "node-b").started

    # Then the slot attempt 1 held is free for the key's next holder
    assert held_slots(ledger, "key") == 0


def test_a_duplicate_start_under_allow_is_lost_and_writes_nothing(ledger: Ledger) -> None:
    # Given one dispatch delivered twice: both copies read the row while it was claimed
    assert ledger.occurrences.insert_occurrence(row(ledger.db_now()))
    read = claim_one(ledger, "node-a")
    started = start(ledger, read, "node-a")
    assert started.started

    # When the second copy starts from the same read
    again = start(ledger, read, "node-a")

    # Then it is lost, and the running attempt is untouched
    assert again == AttemptStart("lost")
    stored = ledger.occurrences.get_occurrence(read.id)
    assert (stored.status, stored.started_at) == ("running", started.started_at)


# `open_attempt`: the read, and on PostgreSQL the start of a plain attempt in the same
# statement. Whatever stands in the way leaves the row as it was, for `start_attempt`.

FORBID = {**SCHEDULE, "concurrency": {"policy": "forbid"}}


def _claimed(ledger: Ledger, transport_config: dict[str, object] = SCHEDULE) -> Occurrence:
    channel = ledger.channels.create_channel(
        "nightly", transport_config, TARGET, 1000, CHANNEL_ACTIVE
    )
    ledger.channels.new_channel_version(
        channel.channel_id, transport_config, TARGET, 1500
    )  # version 2
    assert ledger.occurrences.insert_occurrence(row(ledger.db_now(), channel.channel_id))
    return claim_one(ledger, "node-a")


def test_a_plain_attempt_is_started_by_its_read_on_postgres(ledger: Ledger) -> None:
    claimed = _claimed(ledger)

    opened = open_attempt(ledger, claimed.id, "node-a", LEASE, "trace-1", misfire_grace_secs=5)
    occurrence, channel, started = opened.occurrence, opened.channel, opened.start

    # The read is as it was before the statement: claimed, with the channel's current version
    assert (occurrence.status, occurrence.claimed_by) == (CLAIMED, "node-a")
    assert channel is not None and channel.version == 2
    stored = ledger.occurrences.get_occurrence(claimed.id)
    if ledger.engine.dialect.name == "sqlite":  # no start folded into the read there
        assert started is None and stored.status == CLAIMED
        return
    assert started is not None and started.started and started.fencing_token is None
    assert (stored.status, stored.started_at) == (RUNNING, started.started_at)
    assert (stored.executing_version, stored.trace_id) == (2, "trace-1")
    assert stored.claimed_until is not None and stored.claimed_until > started.started_at


@pytest.mark.parametrize(
    "obstacle",
    ["forbid", "paused channel", "another claimant", "slot from an earlier attempt"],
)
def test_anything_in_the_way_of_a_plain_start_leaves_the_row_as_it_was(
    ledger: Ledger, obstacle: str
) -> None:
    claimed = _claimed(ledger, FORBID if obstacle == "forbid" else SCHEDULE)
    claimant = "node-b" if obstacle == "another claimant" else "node-a"
    if obstacle == "paused channel":
        ledger.channels.set_channel_status(claimed.channel_id, CHANNEL_PAUSED)
    if obstacle == "slot from an earlier attempt":
        with ledger.engine.begin() as conn:
            conn.execute(
                sa.update(occurrences)
                .where(occurrences.c.id == claimed.id)
                .values(singleton_key="key", singleton_slot=0, fencing_token=1)
            )

    opened = open_attempt(ledger, claimed.id, claimant, LEASE, "trace-1", misfire_grace_secs=5)
    occurrence, started = opened.occurrence, opened.start

    assert started is None
    stored = ledger.occurrences.get_occurrence(claimed.id)
    assert (stored.status, stored.started_at, stored.trace_id) == (CLAIMED, None, None)
    assert occurrence == stored
