"""Trigger, backfill and preview through the resolver, on PostgreSQL and SQLite.

Invariant: a manual or backfill run is an ordinary occurrence, written insert-if-absent on
`(channel_id, scheduled_for)` and run by the real claim loop; only an active channel can be
run, and nothing is written for a refused request.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from cronledger.api import create_app
from cronledger.instants import to_rfc3339
from cronledger.ledger import Ledger, NewOccurrence
from tests.api.helpers import CHANNELS, OCCURRENCES, Api, Scheduler, create_channel
from tests.api.http import call


class FrozenClockLedger(Ledger):
    """The real ledger with the database's clock read pinned, to aim a trigger at an instant
    that already has a row."""

    frozen: datetime

    def db_now(self) -> datetime:
        return self.frozen


def test_a_manual_trigger_is_202_with_a_pending_occurrence_that_then_completes(
    api: Api, ledger: Ledger, scheduler: Scheduler
) -> None:
    channel = create_channel(api, status="active")
    before = ledger.db_now()

    answer = api("POST", f"{CHANNELS}/{channel['channel_id']}/trigger")

    assert answer.status == 202
    occurrence = answer.data
    assert (occurrence["trigger"], occurrence["status"], occurrence["attempt"]) == (
        "manual",
        "pending",
        0,
    )
    stored = ledger.occurrences.get_occurrence(occurrence["id"])
    assert before <= stored.scheduled_for <= ledger.db_now()

    assert scheduler.run_due() == 1

    done = api("GET", f"{OCCURRENCES}/{occurrence['id']}").data
    assert (done["status"], done["attempt"], done["executing_version"]) == ("completed", 1, 1)
    assert occurrence["id"] in done["result"]
    assert done["trace_id"] and done["started_at"] and done["completed_at"]


@pytest.mark.parametrize("status", ["draft", "archived", "paused"])
def test_triggering_a_channel_that_is_not_active_is_a_400(
    api: Api, ledger: Ledger, status: str
) -> None:
    channel = create_channel(api, status="active" if status != "draft" else "draft")
    if status != "draft":
        path = f"{CHANNELS}/{channel['channel_id']}/status"
        assert api("PATCH", path, body={"status": status}).status == 200

    answer = api("POST", f"{CHANNELS}/{channel['channel_id']}/trigger")

    assert answer.status == 400
    message = answer.error["details"][0]["message"]
    assert status in message
    # Archived is final: it is never told to activate the channel.
    assert ("archived is final" in message) == (status == "archived")
    assert ('"active"' in message) == (status != "archived")
    assert ledger.occurrences.list_occurrences().total == 0


def test_triggering_an_unknown_channel_is_a_400(api: Api, ledger: Ledger) -> None:
    answer = api("POST", f"{CHANNELS}/01900000-0000-7000-8000-000000000000/trigger")

    assert answer.status == 400
    assert answer.error["details"][0]["path"] == "channel_id"
    assert ledger.occurrences.list_occurrences().total == 0


def test_a_trigger_at_an_instant_that_already_has_a_row_is_a_409(ledger: Ledger, api: Api) -> None:
    channel = create_channel(api, status="active")
    frozen = FrozenClockLedger(ledger.engine)
    frozen.frozen = ledger.db_now().replace(microsecond=0)
    taken = NewOccurrence(
        channel_id=channel["channel_id"],
        channel_name="nightly",
        channel_version=1,
        scheduled_for=frozen.frozen,
    )
    assert ledger.occurrences.insert_occurrence(taken)

    answer = call(create_app(frozen), "POST", f"{CHANNELS}/{channel['channel_id']}/trigger")

    assert answer.status == 409
    assert to_rfc3339(frozen.frozen) in answer.error["message"]
    rows = ledger.occurrences.list_occurrences().data
    assert [(r.id, r.trigger) for r in rows] == [(taken.id, "cron")]


def test_backfill_writes_the_past_instants_and_keeps_rows_already_there(
    api: Api, ledger: Ledger
) -> None:
    channel = create_channel(
        api, status="active", transport_config={"schedule": "0 0 * * * *"}
    )  # hourly, UTC
    now = ledger.db_now()
    start = now.replace(minute=0, second=0, microsecond=0) - timedelta(hours=5)
    already = NewOccurrence(
        channel_id=channel["channel_id"],
        channel_name="nightly",
        channel_version=1,
        scheduled_for=start + timedelta(hours=1),
    )
    assert ledger.occurrences.insert_occurrence(already)
    window = {"from": to_rfc3339(start), "to": to_rfc3339(start + timedelta(hours=3))}

    answer = api("POST", f"{CHANNELS}/{channel['channel_id']}/backfill", body=window)

    assert answer.status == 202
    assert (answer.data["instants"], answer.data["created"], answer.data["already_present"]) == (
        4,
        3,
        1,
    )
    rows = sorted(ledger.occurrences.list_occurrences().data, key=lambda r: r.scheduled_for)
    assert [(r.scheduled_for - start, r.trigger) for r in rows] == [
        (timedelta(hours=0), "backfill"),
        (timedelta(hours=1), "cron"),
        (timedelta(hours=2), "backfill"),
        (timedelta(hours=3), "backfill"),
    ]


def test_backfill_refuses_a_future_end_an_inverted_window_and_too_many_instants(
    api: Api, ledger: Ledger
) -> None:
    channel = create_channel(api, status="active", transport_config={"schedule": "* * * * * *"})
    path = f"{CHANNELS}/{channel['channel_id']}/backfill"
    now = ledger.db_now()

    future = api(
        "POST", path, body={"from": to_rfc3339(now), "to": to_rfc3339(now + timedelta(hours=1))}
    )
    inverted = api(
        "POST",
        path,
        body={
            "from": to_rfc3339(now - timedelta(seconds=1)),
            "to": to_rfc3339(now - timedelta(seconds=9)),
        },
    )
    too_many = api(
        "POST", path, body={"from": to_rfc3339(now - timedelta(hours=1)), "to": to_rfc3339(now)}
    )
    naive = api("POST", path, body={"from": "2026-01-01T00:00:00", "to": "2026-01-01T01:00:00Z"})

    assert (future.status, inverted.status, too_many.status, naive.status) == (400, 400, 400, 422)
    assert "future" in future.error["details"][0]["message"]
    assert "1000" in too_many.error["details"][0]["message"]
    assert naive.error["details"][0]["path"] == "body.from"
    assert ledger.occurrences.list_occurrences().total == 0


def test_preview_shows_a_fall_back_day_twice_in_local_time_with_both_offsets(
    api: Api,
) -> None:
    # 01:30 London time on 25-31 October: the last Sunday of October is always among them, and
    # its clocks go back at 02:00 BST, so that morning has two 01:30s an hour apart in UTC.
    channel = create_channel(
        api, transport_config={"schedule": "0 30 1 25-31 10 *", "timezone": "Europe/London"}
    )

    answer = api("GET", f"{CHANNELS}/{channel['channel_id']}/preview", {"count": 16})

    assert answer.status == 200
    instants = answer.data["instants"]
    assert len(instants) == 16
    by_day: dict[str, list[dict[str, str]]] = {}
    for instant in instants:
        by_day.setdefault(instant["local"][:10], []).append(instant)
    doubled = [day for day, fired in by_day.items() if len(fired) == 2]
    assert doubled, by_day
    for day in doubled:
        assert datetime.fromisoformat(day).weekday() == 6  # a Sunday
        assert [i["local"][10:] for i in by_day[day]] == ["T01:30:00+01:00", "T01:30:00+00:00"]
        assert [i["utc"][10:] for i in by_day[day]] == ["T00:30:00Z", "T01:30:00Z"]
    utc = [i["utc"] for i in instants]
    assert utc == sorted(set(utc))


def test_preview_count_out_of_range_is_a_422(api: Api) -> None:
    channel = create_channel(api)

    answers = [
        api("GET", f"{CHANNELS}/{channel['channel_id']}/preview", {"count": count})
        for count in ("0", "1001", "ten")
    ]

    assert [a.status for a in answers] == [422, 422, 422]
    assert {a.error["details"][0]["path"] for a in answers} == {"query.count"}
