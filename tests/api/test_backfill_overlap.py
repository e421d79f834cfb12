"""Backfill and a busy concurrency key, on PostgreSQL and SQLite: by default the window's rows
run one after another, each waiting while the key is held, never skipped; `overlap: policy`
lets the channel's `forbid` skip them as it would its scheduled rows; a dry run lists the
instants and writes nothing."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from cronledger.instants import to_rfc3339
from cronledger.ledger import (
    COMPLETED,
    PENDING,
    SKIPPED_SINGLETON,
    Ledger,
    NewOccurrence,
    SingletonSpec,
)
from tests.api.helpers import CHANNELS, Api, Scheduler, create_channel
from tests.ledger.helpers import settle, start_attempt

HOURLY_FORBID = {"schedule": "0 0 * * * *", "concurrency": {"policy": "forbid"}}


def _holding_the_key(ledger: Ledger, channel: dict[str, Any]) -> str:
    """A manual run of the channel, claimed and started: it holds the channel's key."""
    held = NewOccurrence(channel["channel_id"], channel["name"], 1, ledger.db_now())
    assert ledger.occurrences.insert_occurrence(held)
    [claimed] = ledger.attempts.claim("holder", 1, 60).leased
    spec = SingletonSpec(channel["channel_id"], 1, "forbid")
    assert start_attempt(ledger, claimed, "holder", 1, spec, 60).started
    return held.id


def _window(ledger: Ledger, hours: int) -> dict[str, str]:
    last = ledger.db_now().replace(minute=0, second=0, microsecond=0)
    return {"from": to_rfc3339(last - timedelta(hours=hours - 1)), "to": to_rfc3339(last)}


def _backfilled(ledger: Ledger, channel: dict[str, Any]) -> list[str]:
    rows = ledger.occurrences.list_occurrences().data
    return [
        r.status for r in sorted(rows, key=lambda r: r.scheduled_for) if r.trigger == "backfill"
    ]


def test_backfill_rows_wait_for_a_busy_key_then_all_run_one_after_another(
    api: Api, ledger: Ledger, scheduler: Scheduler
) -> None:
    # Given a forbid channel whose key another run holds, and a two-hour backfill
    channel = create_channel(api, status="active", transport_config=HOURLY_FORBID)
    held = _holding_the_key(ledger, channel)
    answer = api("POST", f"{CHANNELS}/{channel['channel_id']}/backfill", body=_window(ledger, 2))
    assert (answer.status, answer.data["overlap"], answer.data["created"]) == (202, "sequential", 2)

    # When the scheduler runs what is due while the key is held
    scheduler.run_due()

    # Then neither row was skipped: both wait, pending
    assert _backfilled(ledger, channel) == [PENDING, PENDING]

    # And once the holder ends, both run
    assert settle(ledger, held, "holder", COMPLETED, fencing_token=1)
    scheduler.until(lambda: _backfilled(ledger, channel) == [COMPLETED, COMPLETED])


def test_backfill_under_the_channels_policy_skips_rows_whose_key_is_busy(
    api: Api, ledger: Ledger, scheduler: Scheduler
) -> None:
    # Given the same, backfilled with overlap "policy"
    channel = create_channel(api, status="active", transport_config=HOURLY_FORBID)
    _holding_the_key(ledger, channel)
    window = {**_window(ledger, 2), "overlap": "policy"}
    assert api("POST", f"{CHANNELS}/{channel['channel_id']}/backfill", body=window).status == 202

    # When the scheduler runs what is due
    scheduler.run_due()

    # Then forbid decided, as for a scheduled row: both skipped
    assert _backfilled(ledger, channel) == [SKIPPED_SINGLETON, SKIPPED_SINGLETON]


def test_a_backfill_dry_run_lists_the_instants_and_writes_nothing(api: Api, ledger: Ledger) -> None:
    channel = create_channel(api, status="active", transport_config=HOURLY_FORBID)
    window = _window(ledger, 3)

    answer = api(
        "POST", f"{CHANNELS}/{channel['channel_id']}/backfill", {"dry_run": "true"}, window
    )

    assert answer.status == 202
    assert (answer.data["dry_run"], answer.data["instants"], answer.data["created"]) == (
        True,
        3,
        0,
    )
    assert (
        answer.data["planned"][0] == window["from"] and answer.data["planned"][-1] == window["to"]
    )
    assert ledger.occurrences.list_occurrences().total == 0
