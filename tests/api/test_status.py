"""The status view and `/health`, on PostgreSQL and SQLite, and an unreachable database.

Invariant: both report what the ledger holds on the database's clock, and a database that
cannot be reached is a 503 in the error envelope, never an empty or cheerful answer.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cronledger.api import PREFIX, create_app
from cronledger.claim import JOB as CLAIM_JOB
from cronledger.instants import parse_rfc3339
from cronledger.ledger import Ledger
from cronledger.reconcile import JOB as RECONCILE_JOB
from tests.api.helpers import CHANNELS, Api, Scheduler, create_channel
from tests.api.http import call
from tests.ledger.helpers import sent_statements

STATUS = f"{PREFIX}/cron/status"


def test_the_status_view_shows_next_fire_at_once_reconciled(
    api: Api, ledger: Ledger, scheduler: Scheduler
) -> None:
    channel = create_channel(
        api,
        status="active",
        transport_config={
            "schedule": "0 15 2 * * *",
            "concurrency": {"policy": "forbid", "slots": 2},
        },
    )
    create_channel(api, name="a-draft")  # not active: not in the view

    before = api("GET", STATUS).data
    scheduler.reconcile()
    after = api("GET", STATUS)

    assert [s["name"] for s in before] == ["nightly"]
    assert before[0]["next_fire_at"] is None
    assert after.body["total"] == 1
    row = after.data[0]
    next_fire = parse_rfc3339(row["next_fire_at"])
    assert next_fire > ledger.db_now()
    assert (next_fire.hour, next_fire.minute, next_fire.second) == (2, 15, 0)  # UTC zone
    assert (row["schedule"], row["timezone"], row["pending"]) == ("0 15 2 * * *", "UTC", 0)
    assert (row["concurrency_policy"], row["slots"], row["slots_held"]) == ("forbid", 2, 0)
    assert row["last_status"] is None
    shown = api("GET", f"{CHANNELS}/{channel['channel_id']}").data["compiled"]
    assert shown["next_fire_at"] == row["next_fire_at"]


def test_the_status_view_shows_the_last_run_and_the_pending_count(
    api: Api, ledger: Ledger, scheduler: Scheduler
) -> None:
    channel = create_channel(api, status="active")
    path = f"{CHANNELS}/{channel['channel_id']}/trigger"
    ran = api("POST", path).data
    scheduler.run_due()
    waiting = api("POST", path).data

    row = api("GET", STATUS).data[0]

    assert (row["last_occurrence_id"], row["last_status"]) == (waiting["id"], "pending")
    assert row["pending"] == 1
    assert ledger.occurrences.get_occurrence(ran["id"]).status == "completed"


def test_health_reports_the_backlog_and_the_loops_last_success(api: Api, ledger: Ledger) -> None:
    empty = api("GET", "/health")
    channel = create_channel(api, status="active")
    api("POST", f"{CHANNELS}/{channel['channel_id']}/trigger")
    ledger.reporting.record_job_ok(RECONCILE_JOB)
    ledger.reporting.record_job_ok(CLAIM_JOB)

    busy = api("GET", "/health")

    assert empty.status == 200
    assert (empty.data["pending"], empty.data["oldest_pending_secs"]) == (0, None)
    assert (empty.data["last_reconcile_at"], empty.data["last_claim_at"]) == (None, None)
    health = busy.data
    assert (health["database"], health["pending"]) == ("reachable", 1)
    assert health["oldest_pending_secs"] >= 0
    beats = ledger.reporting.job_heartbeats()
    assert parse_rfc3339(health["last_reconcile_at"]) == beats[RECONCILE_JOB]
    assert parse_rfc3339(health["last_claim_at"]) == beats[CLAIM_JOB]


@pytest.mark.parametrize("route", ["/health", STATUS, CHANNELS, f"{PREFIX}/cron/occurrences"])
@pytest.mark.parametrize("backend", ["postgresql", "sqlite"])
def test_an_unreachable_database_is_a_503_in_the_error_envelope(
    route: str, backend: str, tmp_path: Path
) -> None:
    url = (
        "postgresql+pg8000://nobody@127.0.0.1:9/nowhere"
        if backend == "postgresql"
        else f"sqlite:///{tmp_path / 'missing-dir' / 'ledger.db'}"
    )
    app = create_app(Ledger.connect(url))

    answer = call(app, "GET", route)

    assert answer.status == 503
    assert answer.error["code"] == "database_unavailable"
    assert "nobody" not in answer.error["message"]  # the driver's text stays in the logs


def test_the_status_view_costs_the_same_reads_for_two_channels_or_eight(
    api: Api, ledger: Ledger, scheduler: Scheduler
) -> None:
    forbid = {"schedule": "* * * * * *", "concurrency": {"policy": "forbid"}}

    def reads_of_one_status_page() -> int:
        with sent_statements(ledger.engine) as sent:
            page = api("GET", STATUS)
        assert page.status == 200 and page.body["total"] == len(page.data)
        return len(sent)

    for n in range(2):
        create_channel(api, name=f"tick-{n}", status="active", transport_config=forbid)
    scheduler.reconcile()
    two = reads_of_one_status_page()
    for n in range(2, 8):
        create_channel(api, name=f"tick-{n}", status="active", transport_config=forbid)
    scheduler.reconcile()

    assert reads_of_one_status_page() == two


def test_the_status_view_pages_by_next_and_filters_by_name_prefix(api: Api) -> None:
    # Given five active channels, three of one team, and a draft of that team
    for name in ("team-a", "team-b", "other", "team-c", "other-2"):
        create_channel(api, name=name, status="active")
    create_channel(api, name="team-draft")

    # When the team's status is read two channels a page
    first = api("GET", STATUS, {"name_prefix": "team-", "limit": 2})
    second = api("GET", STATUS, {"name_prefix": "team-", "after": first.body["next"]})

    # Then each active team channel is on one page, newest first, and the draft on none
    assert [c["name"] for c in first.data + second.data] == ["team-c", "team-b", "team-a"]
    assert (first.body["total"], first.body["total_is_exact"]) == (3, True)
    assert second.body["next"] is None
