"""Channels: every edit is a new immutable version; status moves draft → active ⇄ paused and
anything → archived, which is final; deleting purges the channel's whole ledger."""

from __future__ import annotations

from datetime import timedelta

import pytest

from cronledger.errors import Conflict, NotFound
from cronledger.ledger import (
    CHANNEL_ACTIVE,
    CHANNEL_ARCHIVED,
    CHANNEL_DRAFT,
    CHANNEL_PAUSED,
    Channel,
    Ledger,
    OccurrenceFilter,
)
from tests.ledger.helpers import LEASE, claim_one, held_slots, row, start, upsert_cursor

SCHEDULE = {"schedule": "0 15 2 * * *", "timezone": "Europe/London", "payload": {"n": 1}}
TARGET = {"type": "python", "callable": "jobs.nightly:run"}


def nightly(ledger: Ledger, name: str = "nightly", status: str = CHANNEL_DRAFT) -> Channel:
    return ledger.channels.create_channel(name, SCHEDULE, TARGET, 30_000, status=status)


def test_a_new_channel_is_a_draft_at_version_one(ledger: Ledger) -> None:
    created = nightly(ledger)

    assert (created.name, created.status, created.version) == ("nightly", CHANNEL_DRAFT, 1)
    assert (created.transport_config, created.target, created.timeout_ms) == (
        SCHEDULE,
        TARGET,
        30_000,
    )
    assert ledger.channels.get_channel(created.channel_id) == created
    assert ledger.channels.get_channel_by_name("nightly") == created
    assert ledger.channels.get_channel(created.channel_id, version=1) == created
    assert nightly(ledger, "hourly", CHANNEL_ACTIVE).status == CHANNEL_ACTIVE


def test_a_duplicate_name_is_a_conflict(ledger: Ledger) -> None:
    nightly(ledger)

    with pytest.raises(Conflict, match="nightly"):
        nightly(ledger)
    assert ledger.channels.list_channels().total == 1


def test_an_edit_is_a_new_version_and_the_old_one_stays_as_it_was(ledger: Ledger) -> None:
    created = nightly(ledger)
    edited_schedule = {**SCHEDULE, "schedule": "0 0 3 * * *"}

    edited = ledger.channels.new_channel_version(
        created.channel_id, edited_schedule, TARGET, 60_000
    )

    assert edited.version == 2
    assert (edited.transport_config, edited.timeout_ms) == (edited_schedule, 60_000)
    assert ledger.channels.get_channel(created.channel_id) == edited
    first = ledger.channels.get_channel(created.channel_id, version=1)
    assert (first.version, first.transport_config, first.timeout_ms) == (1, SCHEDULE, 30_000)
    assert ledger.channels.new_channel_version(created.channel_id, SCHEDULE, TARGET, 1).version == 3
    with pytest.raises(NotFound):
        ledger.channels.get_channel(created.channel_id, version=9)
    with pytest.raises(NotFound):
        ledger.channels.new_channel_version("no-such-channel", SCHEDULE, TARGET, 1)


@pytest.mark.parametrize(
    ("path", "refused"),
    [
        ([CHANNEL_ACTIVE, CHANNEL_PAUSED, CHANNEL_ACTIVE, CHANNEL_ARCHIVED], CHANNEL_ACTIVE),
        ([CHANNEL_ARCHIVED], CHANNEL_DRAFT),
        ([CHANNEL_ACTIVE], CHANNEL_DRAFT),
        ([], CHANNEL_PAUSED),
    ],
)
def test_the_status_lifecycle_allows_only_its_moves(
    ledger: Ledger, path: list[str], refused: str
) -> None:
    channel = nightly(ledger)
    for status in path:
        assert ledger.channels.set_channel_status(channel.channel_id, status).status == status

    with pytest.raises(Conflict):
        ledger.channels.set_channel_status(channel.channel_id, refused)

    expected = path[-1] if path else CHANNEL_DRAFT
    assert ledger.channels.get_channel(channel.channel_id).status == expected
    assert ledger.channels.set_channel_status(channel.channel_id, expected).status == expected, (
        "asking for the status a channel already has is not an error"
    )


def test_an_archived_channel_is_final_and_cannot_be_edited(ledger: Ledger) -> None:
    channel = nightly(ledger, status=CHANNEL_ACTIVE)
    ledger.channels.set_channel_status(channel.channel_id, CHANNEL_ARCHIVED)

    with pytest.raises(Conflict):
        ledger.channels.set_channel_status(channel.channel_id, CHANNEL_ACTIVE)
    with pytest.raises(Conflict, match="archived"):
        ledger.channels.new_channel_version(channel.channel_id, SCHEDULE, TARGET, 1)
    assert ledger.channels.get_channel(channel.channel_id).version == 1
    with pytest.raises(NotFound):
        ledger.channels.set_channel_status("no-such-channel", CHANNEL_ACTIVE)


def test_pausing_a_channel_pauses_its_cursor_and_drops_its_lookahead(ledger: Ledger) -> None:
    # Given an active channel with a cursor, a due row and a row materialised ahead
    channel = nightly(ledger, status=CHANNEL_ACTIVE)
    now = ledger.db_now()
    upsert_cursor(ledger, channel.channel_id, 1, "hash", now)
    due = row(now - timedelta(minutes=1), channel.channel_id)
    ahead = row(now + timedelta(minutes=1), channel.channel_id)
    assert ledger.occurrences.insert_occurrences([due, ahead]) == 2

    # When it is paused
    ledger.channels.set_channel_status(channel.channel_id, CHANNEL_PAUSED)

    # Then the cursor is paused, the history stays and the future row is gone
    [state] = ledger.cursors.schedule_states()
    assert state.paused_at is not None
    kept = ledger.occurrences.list_occurrences(OccurrenceFilter(channel_id=channel.channel_id))
    assert [o.id for o in kept.data] == [due.id]


def test_channels_are_listed_by_status_newest_first(ledger: Ledger) -> None:
    names = ["a", "b", "c", "d"]
    channels = [nightly(ledger, name) for name in names]
    for channel in channels[1:3]:
        ledger.channels.set_channel_status(channel.channel_id, CHANNEL_ACTIVE)

    everything = ledger.channels.list_channels()
    active = ledger.channels.list_channels(status=CHANNEL_ACTIVE)
    second_page = ledger.channels.list_channels(limit=2, offset=2)

    assert [c.name for c in everything.data] == names[::-1]
    assert (active.total, [c.name for c in active.data]) == (2, ["c", "b"])
    assert (second_page.total, [c.name for c in second_page.data]) == (4, ["b", "a"])
    named = ledger.channels.list_channels(name="c")
    assert (named.total, [c.name for c in named.data]) == (1, ["c"])
    assert ledger.channels.list_channels(name="c", status=CHANNEL_ACTIVE).total == 1
    assert ledger.channels.list_channels(name="a", status=CHANNEL_ACTIVE).total == 0


def test_deleting_a_channel_purges_its_versions_cursor_occurrences_and_slots(
    ledger: Ledger,
) -> None:
    # Given a channel with two versions, a cursor, and a running occurrence holding a key,
    # beside another channel's row
    channel = nightly(ledger, status=CHANNEL_ACTIVE)
    ledger.channels.new_channel_version(channel.channel_id, SCHEDULE, TARGET, 1)
    now = ledger.db_now()
    upsert_cursor(ledger, channel.channel_id, 2, "hash", now)
    mine = row(now - timedelta(seconds=10), channel.channel_id)
    keep = row(now + timedelta(hours=1), "keep")
    assert ledger.occurrences.insert_occurrences([mine, keep]) == 2
    assert start(ledger, claim_one(ledger, "node-a"), "node-a", "key").started

    # When the channel is deleted
    ledger.channels.delete_channel(channel.channel_id)

    # Then nothing of it remains, and the other channel's row is untouched
    with pytest.raises(NotFound):
        ledger.channels.get_channel(channel.channel_id)
    with pytest.raises(NotFound):
        ledger.channels.get_channel(channel.channel_id, version=1)
    assert ledger.cursors.schedule_states() == []
    assert [o.id for o in ledger.occurrences.list_occurrences().data] == [keep.id]
    assert held_slots(ledger, "key") == 0
    with pytest.raises(NotFound):
        ledger.channels.delete_channel(channel.channel_id)
    # The name is free again.
    assert nightly(ledger).name == "nightly"


def test_deleting_a_channel_removes_its_cursor_and_occurrences_only(ledger: Ledger) -> None:
    gone, kept = nightly(ledger, "gone"), nightly(ledger, "kept")
    now = ledger.db_now()
    assert (
        ledger.occurrences.insert_occurrences(
            [row(now, gone.channel_id), row(now, kept.channel_id)]
        )
        == 2
    )
    upsert_cursor(ledger, gone.channel_id, 1, "hash", now)
    upsert_cursor(ledger, kept.channel_id, 1, "hash", now)

    ledger.channels.delete_channel(gone.channel_id)

    assert [s.channel_id for s in ledger.cursors.schedule_states()] == [kept.channel_id]
    assert [o.channel_id for o in ledger.occurrences.list_occurrences().data] == [kept.channel_id]
    assert ledger.attempts.claim("node-a", 10, LEASE).leased[0].channel_id == kept.channel_id
