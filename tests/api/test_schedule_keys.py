"""One-time schedules, bounds and jitter through the API, on PostgreSQL and SQLite: a refused
gap time writes nothing, preview shows due times and says when nothing is left, and the
channel and status views say "ended" once the cursor has parked.
"""

from __future__ import annotations

from datetime import timedelta

import sqlalchemy as sa

from cronledger.api import PREFIX, create_app
from cronledger.instants import parse_rfc3339, to_rfc3339
from cronledger.ledger import Ledger
from cronledger.ledger.tables import schedule_state
from tests.api.helpers import CHANNELS, SETTINGS, Api, Scheduler, channel_document, create_channel
from tests.api.http import call
from tests.polling import wait_until

STATUS = f"{PREFIX}/cron/status"


def test_a_one_time_schedule_in_a_spring_forward_gap_is_a_400_and_writes_nothing(
    api: Api, ledger: Ledger
) -> None:
    answer = api(
        "POST",
        CHANNELS,
        body={
            "name": "gap",
            "transport_config": {"at": "2027-03-28T01:30:00", "timezone": "Europe/London"},
            "target": {"type": "python", "callable": "tests.api.jobs:ok"},
        },
    )

    assert answer.status == 400
    (detail,) = answer.error["details"]
    assert (detail["path"], detail["code"]) == ("transport_config.at", "invalid")
    assert "jump from 01:00:00 to 02:00:00" in detail["message"]
    assert ledger.channels.list_channels().total == 0


def test_preview_shows_each_instant_with_its_due_time(api: Api, ledger: Ledger) -> None:
    channel = create_channel(api, transport_config={"schedule": "0 0 * * * *", "jitter_secs": 600})

    answer = api("GET", f"{CHANNELS}/{channel['channel_id']}/preview", {"count": 5})

    assert answer.status == 200
    assert (answer.data["ended"], answer.data["note"]) == (False, None)
    instants = answer.data["instants"]
    assert len(instants) == 5
    for shown in instants:
        instant, due = parse_rfc3339(shown["utc"]), parse_rfc3339(shown["due_at"])
        assert instant <= due < instant + timedelta(seconds=600)
    assert len({i["due_at"][14:] for i in instants}) > 1, "each hour's jitter differs"
    compiled = api("GET", f"{CHANNELS}/{channel['channel_id']}").data["compiled"]
    assert compiled["jitter_secs"] == 600


def test_a_one_time_schedule_that_fired_has_no_next_fire_in_preview_status_and_view(
    api: Api, ledger: Ledger, scheduler: Scheduler
) -> None:
    # Given a one-time channel due in two seconds, reconciled, run, and reconciled again
    at = (ledger.db_now() + timedelta(seconds=2)).replace(microsecond=0)
    channel = create_channel(
        api,
        status="active",
        transport_config={"at": at.strftime("%Y-%m-%dT%H:%M:%S"), "timezone": "UTC"},
    )
    path = f"{CHANNELS}/{channel['channel_id']}"
    scheduler.reconcile()
    before = api("GET", f"{path}/preview").data
    wait_until(lambda: ledger.db_now() >= at)
    scheduler.reconcile()
    assert scheduler.run_due() == 1

    # When it is looked at afterwards
    preview = api("GET", f"{path}/preview").data
    view = api("GET", path).data["compiled"]
    (status,) = api("GET", STATUS).data

    # Then before, preview showed its one instant; afterwards every view says it has ended
    assert [i["utc"] for i in before["instants"]] == [to_rfc3339(at)]
    assert before["ended"] is False
    assert (preview["instants"], preview["ended"]) == ([], True)
    assert preview["at"] == at.strftime("%Y-%m-%dT%H:%M:%S") and preview["schedule"] is None
    assert "has passed" in preview["note"]
    assert (view["ended"], view["next_fire_at"], view["at"]) == (True, None, preview["at"])
    assert (status["ended"], status["next_fire_at"], status["last_status"]) == (
        True,
        None,
        "completed",
    )


def test_a_channel_past_its_end_shows_ended_and_a_later_end_resumes_it(
    api: Api, ledger: Ledger, scheduler: Scheduler
) -> None:
    # Given an active channel whose end has passed, its cursor parked by a pass
    ended = ledger.db_now() - timedelta(minutes=1)
    config = {"schedule": "*/10 * * * * *", "ends_at": to_rfc3339(ended)}
    channel = create_channel(api, status="active", transport_config=config)
    path = f"{CHANNELS}/{channel['channel_id']}"
    scheduler.reconcile()
    (parked,) = api("GET", STATUS).data
    note = api("GET", f"{path}/preview").data["note"]

    # When its end is moved a day on
    later = {**config, "ends_at": to_rfc3339(ended + timedelta(days=1))}
    edited = api("PUT", path, body={"transport_config": later, "target": channel["target"]})
    pending_edit = edited.data["compiled"]
    scheduler.reconcile()
    resumed = api("GET", path).data["compiled"]

    # Then it showed ended, and resumes from now once the next pass has run
    assert (parked["ended"], parked["next_fire_at"]) == (True, None)
    assert note == f"no instant is left before ends_at ({to_rfc3339(ended)})"
    assert edited.status == 200 and pending_edit["ended"] is False, "not ended: re-planned next"
    assert resumed["ended"] is False
    assert parse_rfc3339(resumed["next_fire_at"]) > ledger.db_now() - timedelta(seconds=10)
    assert resumed["ends_at"] == to_rfc3339(ended + timedelta(days=1))


def test_a_paused_channel_is_paused_not_ended(
    api: Api, ledger: Ledger, scheduler: Scheduler
) -> None:
    document = channel_document(status="active", transport_config={"at": "2020-01-01T00:00:00"})
    channel = api("POST", CHANNELS, {"allow_past_at": "true"}, document).data
    scheduler.reconcile()
    with ledger.engine.begin() as conn:  # as a pause would leave it
        conn.execute(sa.update(schedule_state).values(paused_at=ledger.db_now()))

    view = api("GET", f"{CHANNELS}/{channel['channel_id']}").data["compiled"]

    assert (view["ended"], view["paused_at"] is not None) == (False, True)


def test_the_openapi_document_shows_the_new_keys_with_examples(ledger: Ledger) -> None:
    document = call(create_app(ledger, SETTINGS), "GET", "/openapi.json").body
    schemas = document["components"]["schemas"]

    transport = next(
        p["transport_config"]
        for s in schemas.values()
        if (p := s.get("properties", {})).get("transport_config")
    )
    keys = transport["properties"]
    new_keys = ("at", "starts_at", "ends_at", "jitter_secs", "retry")
    assert set(new_keys) <= set(keys)
    assert all("example" in keys[k] for k in new_keys)
    assert set(keys["retry"]["example"]) == {"max_attempts", "backoff_secs", "max_backoff_secs"}
    # The document's own example of a transport_config uses the new keys too.
    assert {"starts_at", "ends_at", "jitter_secs"} <= set(transport["example"])
    assert transport["oneOf"] == [{"required": ["schedule"]}, {"required": ["at"]}]
    assert {"due_at"} <= set(schemas["PreviewInstant"]["properties"])
    assert {"ended", "note", "at"} <= set(schemas["Preview"]["properties"])
    assert {"ended", "at"} <= set(schemas["ChannelStatus"]["properties"])
    assert {"ended", "at", "starts_at", "ends_at", "jitter_secs"} <= set(
        schemas["CompiledView"]["properties"]
    )


def test_backfill_stays_within_the_bounds(api: Api, ledger: Ledger) -> None:
    now = ledger.db_now().replace(microsecond=0)
    start = now - timedelta(seconds=60 + now.second % 10)  # on a :x0
    end = start + timedelta(seconds=30)
    channel = create_channel(
        api,
        status="active",
        transport_config={
            "schedule": "*/10 * * * * *",
            "starts_at": to_rfc3339(start),
            "ends_at": to_rfc3339(end),
        },
    )

    answer = api(
        "POST",
        f"{CHANNELS}/{channel['channel_id']}/backfill",
        body={
            "from": to_rfc3339(start - timedelta(minutes=5)),
            "to": to_rfc3339(end + timedelta(seconds=25)),
        },
    )

    assert answer.status == 202
    assert (answer.data["instants"], answer.data["created"]) == (4, 4)
    written = sorted(o.scheduled_for for o in ledger.occurrences.list_occurrences().data)
    assert written == [start + timedelta(seconds=s) for s in (0, 10, 20, 30)]
