"""The events listing, the outbox in `/health`, open alerts in the status view, and who
cancelled, through the API on PostgreSQL and SQLite.

Invariant: the listing shows every event the ledger recorded, newest first, with where its
delivery stands; its filters narrow it and never silently match nothing; its pages, read by
key, neither skip nor repeat an event while new ones are written between them.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver

from cronledger.api import PREFIX, handle_event
from cronledger.instants import parse_rfc3339, to_rfc3339
from cronledger.ledger import Ledger, NewOccurrence
from tests.api.helpers import CHANNELS, FAIL_TARGET, OCCURRENCES, Api, Scheduler, create_channel
from tests.api.http import v2_event

EVENTS = f"{PREFIX}/cron/events"
STATUS = f"{PREFIX}/cron/status"
ONCE = {"schedule": "0 15 2 * * *", "retry": {"max_attempts": 1}}


def _failed_run(api: Api, scheduler: Scheduler, channel: dict[str, Any]) -> str:
    """A manual run of `channel` that fails its only attempt; its occurrence id."""
    run = api("POST", f"{CHANNELS}/{channel['channel_id']}/trigger").data
    scheduler.run_due()
    return str(run["id"])


def _cancelled_run(api: Api, ledger: Ledger, channel: dict[str, Any]) -> str:
    """A pending row of `channel` cancelled through the API; its id. Each is an instant of
    its own (a trigger's would clash when two fall in one millisecond of SQLite's clock)."""
    at = ledger.db_now() - timedelta(days=1, seconds=ledger.occurrences.list_occurrences().total)
    row = NewOccurrence(channel["channel_id"], channel["name"], 1, at, trigger="manual")
    assert ledger.occurrences.insert_occurrence(row)
    assert api("POST", f"{OCCURRENCES}/{row.id}/cancel").status == 200
    return row.id


def test_events_are_listed_newest_first_with_their_document_and_delivery_state(
    api: Api, ledger: Ledger, scheduler: Scheduler
) -> None:
    # Given a channel whose run failed (delivered by default), then one cancelled (recorded)
    channel = create_channel(api, status="active", target=FAIL_TARGET, transport_config=ONCE)
    failed = _failed_run(api, scheduler, channel)
    cancelled = _cancelled_run(api, ledger, channel)

    # When the events are listed
    answer = api("GET", EVENTS)

    # Then the newest comes first, each as its receiver gets it, with its delivery state
    assert answer.status == 200
    assert (answer.body["limit"], answer.body["next"]) == (50, None)
    listed = answer.data
    assert [(e["kind"], e["occurrence_id"]) for e in listed] == [
        ("occurrence.cancelled", cancelled),
        ("occurrence.failed", failed),
    ]
    newest, oldest = listed
    assert (newest["deliver"], newest["sequence"]) == (False, None)
    assert (oldest["deliver"], oldest["sequence"], oldest["send_attempts"]) == (True, 1, 0)
    assert oldest["delivered_at"] is None and oldest["last_error"] is None
    assert oldest["channel_name"] == "nightly"
    assert "RuntimeError: report for" in oldest["error"]
    assert oldest["links"] == {
        "api": f"{OCCURRENCES}/{failed}",
        "console": f"/#occurrence={failed}",
    }
    assert newest["at"].endswith("Z") and newest["at"] >= oldest["at"]
    stored = {e.event_id: e for e in ledger.events.list_events().data}
    assert [e["event_id"] for e in listed] == [e.event_id for e in ledger.events.list_events().data]
    assert stored[oldest["event_id"]].document["kind"] == "occurrence.failed"


def test_each_filter_narrows_the_listing_to_the_events_it_names(
    api: Api, ledger: Ledger, scheduler: Scheduler
) -> None:
    # Given two channels: one failed run on the first, two cancelled runs on the second
    first = create_channel(api, status="active", target=FAIL_TARGET, transport_config=ONCE)
    second = create_channel(api, name="second", status="active")
    _failed_run(api, scheduler, first)
    cancelled = [_cancelled_run(api, ledger, second)]
    cut = api("GET", EVENTS).data[0]["at"]
    cancelled.append(_cancelled_run(api, ledger, second))

    # When each filter is asked
    by_channel = api("GET", EVENTS, {"channel_id": first["channel_id"]}).data
    by_short_kind = api("GET", EVENTS, {"kind": "cancelled"}).data
    by_full_kind = api("GET", EVENTS, {"kind": "occurrence.failed"}).data
    since = api("GET", EVENTS, {"since": cut, "kind": "cancelled"}).data
    after_all = to_rfc3339(parse_rfc3339(api("GET", EVENTS).data[0]["at"]) + timedelta(seconds=1))
    none_since = api("GET", EVENTS, {"since": after_all}).data
    nothing = api("GET", EVENTS, {"channel_id": second["channel_id"], "kind": "failed"}).data

    # Then each answers exactly the events it names
    assert [e["kind"] for e in by_channel] == ["occurrence.failed"]
    assert [e["occurrence_id"] for e in by_short_kind] == cancelled[::-1]
    assert {e["channel_id"] for e in by_short_kind} == {second["channel_id"]}
    assert [e["channel_id"] for e in by_full_kind] == [first["channel_id"]]
    assert [e["occurrence_id"] for e in since] == cancelled[::-1]  # `since` is inclusive
    assert none_since == nothing == []


def test_keyset_pages_neither_skip_nor_repeat_while_new_events_are_written_between_them(
    api: Api, ledger: Ledger
) -> None:
    # Given five events
    channel = create_channel(api, status="active")
    written = [_cancelled_run(api, ledger, channel) for _ in range(5)]

    # When they are read two at a time, and a new event is written before each next page
    seen: list[str] = []
    later: list[str] = []
    page = api("GET", EVENTS, {"limit": 2})
    pages = 1
    while True:
        assert page.status == 200 and page.body["limit"] == 2
        seen += [e["occurrence_id"] for e in page.data]
        if page.body["next"] is None:
            break
        later.append(_cancelled_run(api, ledger, channel))
        page = api("GET", EVENTS, {"limit": 2, "after": page.body["next"]})
        pages += 1

    # Then the pages hold exactly the first five, newest first, once each
    assert seen == written[::-1]
    assert (pages, len(later)) == (3, 2)
    # …and the events written meanwhile are on the first page of a fresh read
    fresh = [e["occurrence_id"] for e in api("GET", EVENTS, {"limit": len(later)}).data]
    assert fresh == later[::-1]


def test_an_after_that_is_no_page_key_and_a_kind_that_names_none_are_400s_naming_the_field(
    api: Api,
) -> None:
    bad_after = api("GET", EVENTS, {"after": "not-a-page-key"})
    bad_kind = api("GET", EVENTS, {"kind": "exploded"})
    bad_limit = api("GET", EVENTS, {"limit": "1001"})
    bad_since = api("GET", EVENTS, {"since": "yesterday"})

    assert (bad_after.status, bad_after.error["code"]) == (400, "validation_failed")
    assert [d["path"] for d in bad_after.error["details"]] == ["after"]
    assert (bad_kind.status, bad_kind.error["code"]) == (400, "validation_failed")
    assert [d["path"] for d in bad_kind.error["details"]] == ["kind"]
    assert "one of failed" in bad_kind.error["details"][0]["message"]
    assert (bad_limit.status, bad_limit.error["details"][0]["path"]) == (422, "query.limit")
    assert (bad_since.status, bad_since.error["details"][0]["path"]) == (422, "query.since")


def test_health_counts_the_undelivered_events_and_the_age_of_the_oldest(
    api: Api, ledger: Ledger, scheduler: Scheduler
) -> None:
    # Given a quiet ledger, then a failure (delivered by default) and a cancel (recorded only)
    empty = api("GET", "/health").data
    channel = create_channel(api, status="active", target=FAIL_TARGET, transport_config=ONCE)
    _failed_run(api, scheduler, channel)
    _cancelled_run(api, ledger, channel)

    busy = api("GET", "/health").data

    assert (empty["undelivered_events"], empty["oldest_undelivered_event_secs"]) == (0, None)
    assert busy["undelivered_events"] == 1 == ledger.events.outbox().undelivered
    assert busy["oldest_undelivered_event_secs"] >= 0


def test_the_status_view_shows_a_channels_open_alert_until_a_run_completes(
    api: Api, ledger: Ledger, scheduler: Scheduler
) -> None:
    # Given a channel whose run failed, beside a quiet one
    channel = create_channel(api, status="active", target=FAIL_TARGET, transport_config=ONCE)
    create_channel(api, name="quiet", status="active")
    _failed_run(api, scheduler, channel)

    alerting = {r["name"]: r["open_alert"] for r in api("GET", STATUS).data}

    # When its target is fixed and a run completes
    fixed = {
        "transport_config": ONCE,
        "target": {"type": "python", "callable": "tests.api.jobs:ok"},
    }
    assert api("PUT", f"{CHANNELS}/{channel['channel_id']}", body=fixed).status == 200
    api("POST", f"{CHANNELS}/{channel['channel_id']}/trigger")
    scheduler.run_due()
    answered = {r["name"]: r["open_alert"] for r in api("GET", STATUS).data}

    assert alerting == {"nightly": "occurrence.failed", "quiet": None}
    assert answered == {"nightly": None, "quiet": None}
    kinds = [e["kind"] for e in api("GET", EVENTS, {"channel_id": channel["channel_id"]}).data]
    assert kinds[0] == "channel.recovered"


def test_a_cancel_records_the_iam_caller_and_the_reason_given(
    app: APIGatewayHttpResolver, api: Api, ledger: Ledger
) -> None:
    # Given two pending runs
    channel = create_channel(api, status="active")
    now = ledger.db_now()
    rows = [
        NewOccurrence(channel["channel_id"], "nightly", 1, now - timedelta(minutes=m))
        for m in (1, 2)
    ]
    assert all(ledger.occurrences.insert_occurrence(row) for row in rows)
    signed, anonymous = (row.id for row in rows)
    arn = "arn:aws:iam::123456789012:user/ops"

    # When one is cancelled by an IAM caller with a reason, the other with no body at all
    # (labelled as a server's default labels it: nothing was sent, so nothing is refused)
    event = v2_event(
        "POST",
        f"{OCCURRENCES}/{signed}/cancel",
        headers={"content-type": "application/json"},
        body=json.dumps({"reason": "upstream is down"}).encode(),
    )
    event["requestContext"]["authorizer"] = {"iam": {"userArn": arn}}
    answer = handle_event(app, event)
    plain = api("POST", f"{OCCURRENCES}/{anonymous}/cancel", headers={"content-type": "text/plain"})

    # Then each row and its event say who and why, as far as it is known
    assert (answer["statusCode"], plain.status) == (200, 200)
    assert ledger.occurrences.get_occurrence(signed).error_message == (
        f"cancelled by {arn}: upstream is down"
    )
    assert ledger.occurrences.get_occurrence(anonymous).error_message == "cancelled by an operator"
    errors = {e["occurrence_id"]: e["error"] for e in api("GET", EVENTS).data}
    assert errors[signed] == f"cancelled by {arn}: upstream is down"
    assert errors[anonymous] == "cancelled by an operator"


def test_a_cancel_body_with_an_unknown_key_is_a_422_and_cancels_nothing(
    api: Api, ledger: Ledger
) -> None:
    channel = create_channel(api, status="active")
    run = api("POST", f"{CHANNELS}/{channel['channel_id']}/trigger").data

    answer = api("POST", f"{OCCURRENCES}/{run['id']}/cancel", body={"why": "because"})

    assert answer.status == 422
    assert ledger.occurrences.get_occurrence(run["id"]).status == "pending"


def test_the_openapi_document_describes_the_listing_and_the_alerts_rules(api: Api) -> None:
    document = api("GET", "/openapi.json").body

    listing = document["paths"][EVENTS]["get"]
    alerts = document["components"]["schemas"]["ChannelCreate"]["properties"]["transport_config"][
        "properties"
    ]["alerts"]

    assert {p["name"] for p in listing["parameters"]} == {
        "channel_id",
        "kind",
        "since",
        "after",
        "limit",
    }
    rules = alerts["properties"]
    assert (rules["overdue_after_secs"]["minimum"], rules["overdue_after_secs"]["maximum"]) == (
        1,
        604800,
    )
    assert rules["after_consecutive_failures"]["maximum"] == 100
    assert "failed" in rules["on"]["items"]["enum"]
    assert alerts["example"]["on"] == ["failed", "overdue", "recovered"]
