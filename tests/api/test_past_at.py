"""A one-time `at` in the past, on PostgreSQL and SQLite: refused when it is set, saved only
when asked for and then with a warning that it will never run; a channel that keeps its
past `at` can still be edited."""

from __future__ import annotations

from datetime import timedelta

from cronledger.ledger import Ledger
from tests.api.helpers import CHANNELS, Api, channel_document


def _one_time(ledger: Ledger, hours: float) -> dict[str, str]:
    at = ledger.db_now() + timedelta(hours=hours)
    return {"at": at.strftime("%Y-%m-%dT%H:%M:%S"), "timezone": "UTC"}


def test_an_at_in_the_past_is_refused_at_its_path_and_nothing_is_written(
    api: Api, ledger: Ledger
) -> None:
    # When a one-time channel is created for an hour ago
    answer = api("POST", CHANNELS, body=channel_document(transport_config=_one_time(ledger, -1)))

    # Then it is a 400 at transport_config.at saying why and what to do, and no channel exists
    assert answer.status == 400
    [detail] = answer.error["details"]
    assert detail["path"] == "transport_config.at"
    assert "is in the past" in detail["message"] and "allow_past_at=true" in detail["message"]
    assert ledger.channels.list_channels().total == 0


def test_an_at_in_the_past_is_saved_when_allowed_with_a_warning_that_it_never_runs(
    api: Api, ledger: Ledger
) -> None:
    # When it is created with allow_past_at
    answer = api(
        "POST",
        CHANNELS,
        {"allow_past_at": "true"},
        channel_document(transport_config=_one_time(ledger, -1)),
    )

    # Then it is saved, and the answer warns it will never run
    assert answer.status == 201
    [warning] = answer.data["warnings"]
    assert warning.startswith("transport_config.at: ") and "will never run" in warning
    assert ledger.channels.list_channels().total == 1


def test_a_future_at_is_saved_without_a_warning(api: Api, ledger: Ledger) -> None:
    answer = api("POST", CHANNELS, body=channel_document(transport_config=_one_time(ledger, 1)))

    assert answer.status == 201
    assert answer.data["warnings"] == []


def test_a_channel_keeping_its_past_at_can_still_be_edited_but_not_moved_to_another_past_at(
    api: Api, ledger: Ledger
) -> None:
    # Given a one-time channel saved with a past `at`
    config = _one_time(ledger, -1)
    created = api(
        "POST", CHANNELS, {"allow_past_at": "true"}, channel_document(transport_config=config)
    ).data
    path = f"{CHANNELS}/{created['channel_id']}"

    # When its payload is edited, then its `at` moved to another past instant
    target = created["target"]
    edited = api(
        "PUT",
        path,
        body={"transport_config": {**config, "payload": {"n": 1}}, "target": target},
    )
    moved = api("PUT", path, body={"transport_config": _one_time(ledger, -2), "target": target})

    # Then the edit is a new version, and the move is refused at transport_config.at
    assert edited.status == 200 and edited.data["version"] == 2
    assert moved.status == 400
    assert [d["path"] for d in moved.error["details"]] == ["transport_config.at"]
    assert ledger.channels.get_channel(created["channel_id"]).version == 2
