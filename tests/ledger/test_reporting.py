"""The reads behind the listing, the status view and /health, and retention: history is
deleted, a backlog never is."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest

from cronledger.errors import NotFound
from cronledger.ledger import COMPLETED, FAILED, Ledger, OccurrenceFilter
from tests.ledger.helpers import (
    LEASE,
    age_completion,
    claim_one,
    expire_claim,
    pending_count,
    row,
    seed_due,
    sent_statements,
    settle,
    start,
)


def test_the_listing_filters_by_channel_status_trigger_and_window(ledger: Ledger) -> None:
    now = ledger.db_now()
    a = row(now - timedelta(hours=2), "ch-1")
    b = row(now - timedelta(hours=1), "ch-1", status=COMPLETED)
    c = row(now, "ch-2", trigger="manual")
    for new in (a, b, c):
        assert ledger.occurrences.insert_occurrence(new)

    by_channel = ledger.occurrences.list_occurrences(OccurrenceFilter(channel_id="ch-1"))
    assert by_channel.total == 2
    assert {o.id for o in by_channel.data} == {a.id, b.id}

    by_status = ledger.occurrences.list_occurrences(OccurrenceFilter(status=COMPLETED))
    assert [o.id for o in by_status.data] == [b.id]

    by_trigger = ledger.occurrences.list_occurrences(OccurrenceFilter(trigger="manual"))
    assert [o.id for o in by_trigger.data] == [c.id]

    since = ledger.occurrences.list_occurrences(OccurrenceFilter(since=now - timedelta(minutes=90)))
    assert {o.id for o in since.data} == {b.id, c.id}

    # Both ends are inclusive.
    window = OccurrenceFilter(since=a.scheduled_for, until=b.scheduled_for)
    assert {o.id for o in ledger.occurrences.list_occurrences(window).data} == {a.id, b.id}


def test_the_listing_is_newest_first_and_paginated(ledger: Ledger) -> None:
    now = ledger.db_now()
    ids = []
    for minute in range(5):
        new = row(now - timedelta(minutes=minute))
        assert ledger.occurrences.insert_occurrence(new)
        ids.append(new.id)

    page = ledger.occurrences.list_occurrences(OccurrenceFilter(limit=2, offset=1))

    assert (page.total, page.limit, page.offset) == (5, 2, 1)
    assert [o.id for o in page.data] == [ids[1], ids[2]], "newest scheduled_for first"
    clamped = ledger.occurrences.list_occurrences(OccurrenceFilter(limit=10_000, offset=-3))
    assert (clamped.limit, clamped.offset, len(clamped.data)) == (1000, 0, 5)


def test_getting_an_unknown_occurrence_is_not_found(ledger: Ledger) -> None:
    with pytest.raises(NotFound):
        ledger.occurrences.get_occurrence("no-such-occurrence")


def test_the_status_view_reads_the_latest_due_occurrence_and_the_backlog(ledger: Ledger) -> None:
    # Given two overdue rows and one materialised ahead for "ch", and one due for "ch-2"
    now = ledger.db_now()
    old = row(now - timedelta(minutes=10))
    new = row(now - timedelta(minutes=1))
    ahead = row(now + timedelta(minutes=5))
    other = row(now, "ch-2")
    assert ledger.reporting.backlog().pending == 0
    assert ledger.reporting.backlog().oldest_pending_age_secs is None
    assert ledger.occurrences.insert_occurrences([old, new, ahead, other]) == 4

    # Then the counts include every pending row, the latest is the newest *due* one, and
    # the backlog's age is the oldest due row's
    assert ledger.reporting.backlog().pending == 4
    assert pending_count(ledger, "ch") == 3
    latest = ledger.reporting.channel_activity(["ch"], []).latest.get("ch")
    assert latest is not None and latest.id == new.id
    assert ledger.reporting.channel_activity(["absent"], []).latest.get("absent") is None
    activity = ledger.reporting.channel_activity(["ch", "ch-2", "absent"], [])
    assert {cid: o.id for cid, o in activity.latest.items()} == {"ch": new.id, "ch-2": other.id}
    assert activity.pending == {"ch": 3, "ch-2": 1}
    age = ledger.reporting.backlog().oldest_pending_age_secs
    assert age is not None and 599 <= age <= 630, age


def test_a_future_pending_row_is_not_a_backlog(ledger: Ledger) -> None:
    assert ledger.occurrences.insert_occurrence(row(ledger.db_now() + timedelta(hours=1)))

    assert ledger.reporting.backlog().oldest_pending_age_secs is None
    assert ledger.reporting.backlog().pending == 1


def test_in_flight_counts_live_leases_only(ledger: Ledger) -> None:
    # Given one claimed, one running and one whose lease expired
    now = ledger.db_now()
    ledger.occurrences.insert_occurrences(row(now - timedelta(seconds=s)) for s in (30, 20, 10))
    claim_one(ledger, "node-a")
    running = claim_one(ledger, "node-b")
    assert start(ledger, running, "node-b").started
    expired = claim_one(ledger, "node-c")
    expire_claim(ledger, expired.id)

    assert ledger.reporting.in_flight_count() == 2
    assert settle(ledger, running.id, "node-b", COMPLETED)
    assert ledger.reporting.in_flight_count() == 1


def test_job_heartbeats_record_the_last_successful_pass(ledger: Ledger) -> None:
    assert ledger.reporting.job_heartbeats() == {}
    ledger.reporting.record_job_ok("reconcile")
    first = ledger.reporting.job_heartbeats()["reconcile"]

    ledger.reporting.record_job_ok("reconcile")
    ledger.reporting.record_job_ok("claim")

    beats = ledger.reporting.job_heartbeats()
    assert set(beats) == {"reconcile", "claim"}
    assert beats["reconcile"] >= first
    assert abs((ledger.db_now() - beats["claim"]).total_seconds()) < 5


def test_retention_deletes_terminal_rows_and_keeps_pending_ones(ledger: Ledger) -> None:
    # Given a month-old pending row, and rows that ended a month ago and just now
    month_ago = ledger.db_now() - timedelta(days=30)
    pending_old = row(month_ago)
    done_old = row(month_ago + timedelta(seconds=1), status=COMPLETED)
    done_now = row(month_ago + timedelta(seconds=2), status=COMPLETED)
    assert ledger.occurrences.insert_occurrences([pending_old, done_old, done_now]) == 3
    assert ledger.occurrences.delete_terminal_older_than(1) == 0, (
        "nothing has ended over an hour ago"
    )

    # When one row's end is aged past the window
    age_completion(ledger, done_old.id, timedelta(days=30))

    # Then only that terminal row goes: a pending row older than the window is a backlog
    assert ledger.occurrences.delete_terminal_older_than(1) == 1
    remaining = {o.id for o in ledger.occurrences.list_occurrences().data}
    assert remaining == {pending_old.id, done_now.id}


def test_retention_deletes_in_bounded_batches_each_a_statement_of_its_own(
    ledger: Ledger,
) -> None:
    # Given 25 rows that ended a month ago, a month-old pending row and a row that just ended
    month_ago = ledger.db_now() - timedelta(days=30)
    ended = [row(month_ago + timedelta(seconds=i), "old", status=COMPLETED) for i in range(25)]
    pending_old, done_now = row(month_ago, "backlog"), row(month_ago, "fresh", status=FAILED)
    assert ledger.occurrences.insert_occurrences([*ended, pending_old, done_now]) == 27
    for occurrence in ended:
        age_completion(ledger, occurrence.id, timedelta(days=30))

    # When retention runs in batches of 10 with its time already spent, then with time left
    with sent_statements(ledger.engine) as sent:
        first = ledger.occurrences.delete_terminal_older_than(
            24, batch_size=10, until=time.monotonic()
        )
    deletes_first = [s for s, _ in sent if "DELETE FROM CRON_OCCURRENCES" in s.upper()]
    with sent_statements(ledger.engine) as sent:
        rest = ledger.occurrences.delete_terminal_older_than(24, batch_size=10)
    deletes_rest = [s for s, _ in sent if "DELETE FROM CRON_OCCURRENCES" in s.upper()]

    # Then a spent budget still deletes one batch and stops; the next run deletes the rest,
    # one bounded statement per batch, and nothing live or recent goes
    assert (first, len(deletes_first)) == (10, 1)
    assert (rest, len(deletes_rest)) == (15, 2)
    assert all("LIMIT" in statement.upper() for statement in deletes_first + deletes_rest)
    remaining = {o.id for o in ledger.occurrences.list_occurrences().data}
    assert remaining == {pending_old.id, done_now.id}


def test_retention_never_deletes_live_rows(ledger: Ledger) -> None:
    due = seed_due(ledger, ago=timedelta(days=30))
    mine = claim_one(ledger, "node-a")
    assert start(ledger, mine, "node-a").started
    failed = seed_due(ledger, channel_id="ch-2", ago=timedelta(days=30))
    claim_one(ledger, "node-b")
    assert settle(ledger, failed.id, "node-b", FAILED)
    age_completion(ledger, failed.id, timedelta(days=30))

    assert ledger.occurrences.delete_terminal_older_than(24) == 1

    assert ledger.occurrences.get_occurrence(due.id).status == "running"
    assert ledger.attempts.claim("node-c", 10, LEASE).leased == []
    assert [o.id for o in ledger.occurrences.list_occurrences().data] == [due.id]


def test_the_wait_until_the_next_claimable_row_follows_the_database_clock(
    ledger: Ledger,
) -> None:
    assert ledger.reporting.seconds_until_next_due() is None, "nothing at all: nothing to wait for"

    assert ledger.occurrences.insert_occurrence(row(ledger.db_now() + timedelta(minutes=10)))
    wait = ledger.reporting.seconds_until_next_due()
    assert wait is not None and 590 <= wait <= 600, wait

    # A running attempt's lease is the next thing to become claimable if it lapses first.
    seed_due(ledger, channel_id="ch-2")
    running = claim_one(ledger, "node-a")
    assert start(ledger, running, "node-a").started
    wait = ledger.reporting.seconds_until_next_due()
    assert wait is not None and LEASE - 5 <= wait <= LEASE, wait

    seed_due(ledger, channel_id="ch-3")
    assert ledger.reporting.seconds_until_next_due() == 0.0, "a due row is claimable now"


def test_the_backlog_is_read_in_one_statement_on_one_clock(ledger: Ledger) -> None:
    now = ledger.db_now()
    assert ledger.occurrences.insert_occurrences(
        [row(now - timedelta(minutes=10)), row(now + timedelta(minutes=5))]
    )

    with sent_statements(ledger.engine) as sent:
        backlog = ledger.reporting.backlog()

    assert [statement for statement, _ in sent if statement != "BEGIN"] == [sent[-1][0]]
    assert backlog.pending == 2  # the row materialised ahead is pending too…
    assert backlog.oldest_pending_age_secs is not None  # …but only the due one has an age
    waited = (backlog.now - (now - timedelta(minutes=10))).total_seconds()
    assert backlog.oldest_pending_age_secs == pytest.approx(waited)
