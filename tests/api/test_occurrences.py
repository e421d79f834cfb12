"""The ledger through the API while the real scheduler runs, on PostgreSQL and SQLite.

Invariant: the listing and the full record tell what the ledger holds (status, attempt, ids,
instants), retry and cancel change exactly the row they name or refuse with 404 / 409, and
malformed query strings are a 422, never a 500.
"""

from __future__ import annotations

import time
from datetime import timedelta

import pytest

from cronledger.instants import to_rfc3339
from cronledger.ledger import Ledger, NewOccurrence, paging
from tests.api.helpers import (
    CHANNELS,
    FAIL_TARGET,
    OCCURRENCES,
    OK_TARGET,
    Api,
    Scheduler,
    channel_document,
    create_channel,
)

EVERY_SECOND = {"schedule": "* * * * * *"}


def test_a_per_second_channels_occurrences_appear_and_complete_in_the_listing(
    api: Api, ledger: Ledger, scheduler: Scheduler
) -> None:
    channel = create_channel(api, status="active", transport_config=EVERY_SECOND)
    query = {"channel_id": channel["channel_id"], "status": "completed"}

    scheduler.until(lambda: api("GET", OCCURRENCES, query).body["total"] >= 2)

    listing = api("GET", OCCURRENCES, query)
    assert listing.status == 200
    completed = listing.data
    assert all(o["trigger"] == "cron" and o["attempt"] == 1 for o in completed)
    assert all(o["duration_ms"] is not None and o["lag_ms"] is not None for o in completed)
    scheduled = [o["scheduled_for"] for o in completed]
    assert scheduled == sorted(scheduled, reverse=True)  # newest first
    assert all(s.endswith("Z") for s in scheduled)
    assert "result" not in completed[0]  # summaries; the excerpt is in the full record
    full = api("GET", f"{OCCURRENCES}/{completed[0]['id']}").data
    assert full["result"] is not None and completed[0]["id"] in full["result"]
    assert ledger.occurrences.get_occurrence(completed[0]["id"]).status == "completed"


def test_retry_keeps_the_id_and_instant_and_the_next_run_is_attempt_2(
    api: Api, ledger: Ledger, scheduler: Scheduler
) -> None:
    # Given a manual run that failed its only allowed attempt
    once = {"schedule": "0 15 2 * * *", "retry": {"max_attempts": 1}}
    channel = create_channel(api, status="active", target=FAIL_TARGET, transport_config=once)
    path = f"{CHANNELS}/{channel['channel_id']}"
    failed = api("POST", f"{path}/trigger").data
    scheduler.run_due()
    assert ledger.occurrences.get_occurrence(failed["id"]).status == "failed"
    # and a fixed target
    fixed = channel_document(target=OK_TARGET, transport_config=once)
    assert api("PUT", path, body=fixed).data["version"] == 2

    # When it is retried and the scheduler runs it
    retried = api("POST", f"{OCCURRENCES}/{failed['id']}/retry")
    scheduler.run_due()

    # Then it is the same occurrence, run again as attempt 2 under version 2
    assert retried.status == 200
    assert (retried.data["id"], retried.data["status"]) == (failed["id"], "pending")
    assert (retried.data["attempt"], retried.data["max_attempts"]) == (1, 2), "one more granted"
    assert retried.data["scheduled_for"] == failed["scheduled_for"]
    again = ledger.occurrences.get_occurrence(failed["id"])
    assert (again.status, again.attempt, again.executing_version) == ("completed", 2, 2)
    assert to_rfc3339(again.scheduled_for) == failed["scheduled_for"]
    assert ledger.occurrences.list_occurrences().total == 1
    # …and the attempt granted counts among those allowed, after it ran too (never "2 of 1")
    shown = api("GET", f"{OCCURRENCES}/{failed['id']}").data
    assert (shown["attempt"], shown["max_attempts"]) == (2, 2)


def test_a_failure_waiting_for_its_retry_shows_its_attempts_next_due_time_and_last_error(
    api: Api, ledger: Ledger, scheduler: Scheduler
) -> None:
    # Given a channel retried after a minute, whose manual run fails once
    retried = {"schedule": "0 15 2 * * *", "retry": {"max_attempts": 3, "backoff_secs": 60}}
    channel = create_channel(api, status="active", target=FAIL_TARGET, transport_config=retried)
    run = api("POST", f"{CHANNELS}/{channel['channel_id']}/trigger").data
    scheduler.run_due()
    now = ledger.db_now()

    # When an operator looks at it, listed and in full
    listed = api("GET", OCCURRENCES, {"channel_id": channel["channel_id"]}).data
    full = api("GET", f"{OCCURRENCES}/{run['id']}").data

    # Then it waits: pending, attempt 1 of 3, due again after the backoff, with its error
    for shown in (listed[0], full):
        assert (shown["status"], shown["attempt"], shown["max_attempts"]) == ("pending", 1, 3)
        assert shown["due_at"] > to_rfc3339(now + timedelta(seconds=55))
        assert "RuntimeError: report for" in shown["error_message"]


@pytest.mark.parametrize("status", ["paused", "archived"])
def test_retrying_an_occurrence_of_a_channel_not_active_is_a_409_naming_its_status(
    api: Api, ledger: Ledger, scheduler: Scheduler, status: str
) -> None:
    once = {"schedule": "0 15 2 * * *", "retry": {"max_attempts": 1}}
    channel = create_channel(api, status="active", target=FAIL_TARGET, transport_config=once)
    path = f"{CHANNELS}/{channel['channel_id']}"
    failed = api("POST", f"{path}/trigger").data
    scheduler.run_due()
    assert api("PATCH", f"{path}/status", body={"status": status}).status == 200

    answer = api("POST", f"{OCCURRENCES}/{failed['id']}/retry")

    assert (answer.status, answer.error["code"]) == (409, "conflict")
    message = answer.error["message"]
    assert f"is {status}, not active" in message
    # Archived is final: the fix offered is never to re-activate it.
    assert ("activate it first" in message) == (status == "paused")
    assert ("archived is final" in message) == (status == "archived")
    assert ledger.occurrences.get_occurrence(failed["id"]).status == "failed"


def test_retrying_a_completed_occurrence_is_a_409_and_an_unknown_one_a_404(
    api: Api, ledger: Ledger, scheduler: Scheduler
) -> None:
    channel = create_channel(api, status="active")
    done = api("POST", f"{CHANNELS}/{channel['channel_id']}/trigger").data
    scheduler.run_due()

    completed = api("POST", f"{OCCURRENCES}/{done['id']}/retry")
    unknown = api("POST", f"{OCCURRENCES}/no-such-occurrence/retry")

    assert (completed.status, completed.error["code"]) == (409, "conflict")
    assert "completed" in completed.error["message"]
    assert (unknown.status, unknown.error["code"]) == (404, "not_found")
    stored = ledger.occurrences.get_occurrence(done["id"])
    assert (stored.status, stored.attempt) == ("completed", 1)


def test_cancel_moves_a_pending_occurrence_to_cancelled_and_refuses_a_settled_one(
    api: Api, ledger: Ledger, scheduler: Scheduler
) -> None:
    channel = create_channel(api, status="active")
    pending = api("POST", f"{CHANNELS}/{channel['channel_id']}/trigger").data

    cancelled = api("POST", f"{OCCURRENCES}/{pending['id']}/cancel")
    again = api("POST", f"{OCCURRENCES}/{pending['id']}/cancel")
    ran = scheduler.run_due()

    assert cancelled.status == 200
    assert cancelled.data["status"] == "cancelled"
    assert again.status == 409
    assert ran == 0
    assert ledger.occurrences.get_occurrence(pending["id"]).status == "cancelled"


def test_archiving_stops_new_occurrences_and_keeps_the_history(
    api: Api, ledger: Ledger, scheduler: Scheduler
) -> None:
    channel = create_channel(api, status="active", transport_config=EVERY_SECOND)
    mine = {"channel_id": channel["channel_id"]}
    scheduler.until(lambda: api("GET", OCCURRENCES, mine).body["total"] >= 1)

    assert (
        api(
            "PATCH", f"{CHANNELS}/{channel['channel_id']}/status", body={"status": "archived"}
        ).status
        == 200
    )
    kept = {o["id"] for o in api("GET", OCCURRENCES, {**mine, "limit": 1000}).data}
    cutoff = ledger.db_now()
    time.sleep(1.2)  # an instant of the every-second schedule falls due after the archive
    scheduler.reconcile()
    scheduler.run_due()
    ledger_rows = ledger.occurrences.list_occurrences().data

    assert kept
    assert {o.id for o in ledger_rows} == kept
    assert all(o.scheduled_for <= cutoff for o in ledger_rows)
    assert api("GET", f"{CHANNELS}/{channel['channel_id']}").data["status"] == "archived"


def test_the_listing_filters_on_channel_status_and_an_inclusive_window(
    api: Api, ledger: Ledger
) -> None:
    first = create_channel(api, name="first")
    second = create_channel(api, name="second")
    base = ledger.db_now().replace(microsecond=0) - timedelta(hours=1)
    for minutes in (0, 10, 20, 30):
        row = NewOccurrence(first["channel_id"], "first", 1, base + timedelta(minutes=minutes))
        assert ledger.occurrences.insert_occurrence(row)
    assert ledger.occurrences.insert_occurrence(
        NewOccurrence(second["channel_id"], "second", 1, base)
    )

    window = {
        "channel_id": first["channel_id"],
        "since": to_rfc3339(base + timedelta(minutes=10)),
        "until": to_rfc3339(base + timedelta(minutes=30)),
        "status": "pending",
    }
    answer = api("GET", OCCURRENCES, window)
    page = api("GET", OCCURRENCES, {"limit": 2, "offset": 1})
    none = api("GET", OCCURRENCES, {"status": "failed"})

    assert answer.status == 200
    assert [o["scheduled_for"] for o in answer.data] == [
        to_rfc3339(base + timedelta(minutes=m)) for m in (30, 20, 10)
    ]
    assert (page.body["total"], page.body["limit"], page.body["offset"], len(page.data)) == (
        5,
        2,
        1,
        2,
    )
    assert (none.body["total"], none.data) == (0, [])


@pytest.mark.parametrize(
    ("query", "path"),
    [
        ({"limit": "abc"}, "query.limit"),
        ({"limit": "0"}, "query.limit"),
        ({"limit": "1001"}, "query.limit"),
        ({"offset": "-1"}, "query.offset"),
        ({"offset": "99999999999999999999999"}, "query.offset"),
        ({"since": "yesterday"}, "query.since"),
        ({"until": "2026-09-01T02:15:00"}, "query.until"),  # no offset: ambiguous
        ({"status": "pend\x00ing"}, "query.status"),
    ],
)
def test_a_malformed_query_string_is_a_422_naming_the_parameter(
    api: Api, query: dict[str, str], path: str
) -> None:
    answer = api("GET", OCCURRENCES, query)

    assert answer.status == 422
    assert answer.error["code"] == "malformed_request"
    assert [d["path"] for d in answer.error["details"]] == [path]


def test_an_unknown_occurrence_is_a_404_in_the_error_envelope(api: Api) -> None:
    answer = api("GET", f"{OCCURRENCES}/01900000-0000-7000-8000-000000000000")

    assert answer.status == 404
    assert answer.body == {
        "error": {
            "code": "not_found",
            "message": "occurrence 01900000-0000-7000-8000-000000000000 not found",
            "details": [],
        }
    }


def test_a_filter_that_names_no_status_or_trigger_is_a_400(api: Api) -> None:
    status = api("GET", OCCURRENCES, {"status": "bogus"})
    trigger = api("GET", OCCURRENCES, {"trigger": "hourly"})
    fine = api("GET", OCCURRENCES, {"status": "failed", "trigger": "manual"})

    assert (status.status, trigger.status, fine.status) == (400, 400, 200)
    assert status.error["details"][0]["path"] == "status"
    assert "one of pending" in status.error["details"][0]["message"]
    assert trigger.error["details"][0]["path"] == "trigger"


def test_the_listing_pages_by_next_and_refuses_an_offset_past_the_bound_naming_after(
    api: Api, ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given twelve rows, and a bound of ten rows counted
    monkeypatch.setattr(paging, "TOTAL_BOUND", 10)
    channel = create_channel(api, name="paged")
    base = ledger.db_now().replace(microsecond=0)
    for minutes in range(12):
        at = base - timedelta(minutes=minutes)
        assert ledger.occurrences.insert_occurrence(
            NewOccurrence(channel["channel_id"], "paged", 1, at)
        )

    # When the list is read five rows a page by `next`, and at an offset past the bound
    pages = [api("GET", OCCURRENCES, {"limit": 5})]
    while pages[-1].body["next"] is not None:
        pages.append(api("GET", OCCURRENCES, {"limit": 5, "after": pages[-1].body["next"]}))
    refused = api("GET", OCCURRENCES, {"offset": 11})
    exact = api("GET", OCCURRENCES, {"exact_total": "true"})
    garbled = api("GET", OCCURRENCES, {"after": "!!"})

    # Then the pages hold every row once, newest first, the total says "more than ten"
    # unless counted exactly, and the offset is a 400 that says what to use instead
    listed = [o["scheduled_for"] for page in pages for o in page.data]
    assert listed == [to_rfc3339(base - timedelta(minutes=m)) for m in range(12)]
    assert [len(page.data) for page in pages] == [5, 5, 2]
    assert (pages[0].body["total"], pages[0].body["total_is_exact"]) == (10, False)
    assert (exact.body["total"], exact.body["total_is_exact"]) == (12, True)
    assert refused.status == 400
    assert refused.error["details"][0]["path"] == "offset"
    assert "`after`" in refused.error["details"][0]["message"]
    assert garbled.status == 400 and garbled.error["details"][0]["path"] == "after"
