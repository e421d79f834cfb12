"""The demo channel of `cronledger dev --demo`, on PostgreSQL and SQLite: created once, active;
after that it is the operator's, and a restart never re-activates one they paused."""

from __future__ import annotations

from cronledger.ledger import CHANNEL_ACTIVE, CHANNEL_PAUSED, Ledger
from cronledger.local import ensure_demo_channel


def test_the_demo_channel_is_created_once_and_active(ledger: Ledger) -> None:
    first = ensure_demo_channel(ledger)
    again = ensure_demo_channel(ledger)

    assert (first.name, first.status) == ("demo", CHANNEL_ACTIVE)
    assert again.channel_id == first.channel_id
    assert [c.name for c in ledger.channels.list_channels().data] == ["demo"]


def test_a_paused_demo_channel_stays_paused_when_dev_starts_again(ledger: Ledger) -> None:
    # Given the demo channel, paused by the operator
    demo = ensure_demo_channel(ledger)
    ledger.channels.set_channel_status(demo.channel_id, CHANNEL_PAUSED)

    # When `dev --demo` starts again
    again = ensure_demo_channel(ledger)

    # Then it is still paused, as stored
    assert again.status == CHANNEL_PAUSED
    assert ledger.channels.get_channel(demo.channel_id).status == CHANNEL_PAUSED
