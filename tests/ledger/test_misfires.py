"""A late cron row is judged at start under its channel's misfire policy, with the channel's
other late rows, however early it was written; retries, manual and backfill runs never are."""

from __future__ import annotations

from datetime import timedelta

import pytest

from cronledger.cron import compile_schedule
from cronledger.execute import misfire_rule
from cronledger.ledger import (
    CLAIMED,
    PENDING,
    RUNNING,
    SKIPPED_MISFIRE,
    TRIGGER_BACKFILL,
    TRIGGER_MANUAL,
    Ledger,
    MisfireRule,
    NewOccurrence,
)
from cronledger.settings import Settings
from tests.ledger.helpers import (
    LEASE,
    active_channel,
    claim_one,
    open_attempt,
    pause_cursor,
    row,
    settle,
    start,
    start_attempt,
    upsert_cursor,
)

GRACE = 5.0


def rule(policy: str, grace: float = GRACE, **config: object) -> MisfireRule:
    config = {"schedule": "* * * * * *", "misfire_policy": policy, **config}
    schedule = compile_schedule(config, channel_id="ch")
    return misfire_rule(schedule, Settings(misfire_grace_secs=int(grace), max_catch_up=100))


def late_rows(ledger: Ledger, channel_id: str, ages: list[int]) -> list[NewOccurrence]:
    """Rows of `channel_id` due `ages` seconds ago, oldest first, with its cursor caught up."""
    now = ledger.db_now()
    upsert_cursor(ledger, channel_id, 1, "hash", now + timedelta(seconds=1))
    new = [row(now - timedelta(seconds=age), channel_id) for age in sorted(ages, reverse=True)]
    assert ledger.occurrences.insert_occurrences(new) == len(new)
    return new


def opened(ledger: Ledger, occurrence_id: str, claimant: str) -> bool:
    return open_attempt(
        ledger, occurrence_id, claimant, LEASE, "trace", misfire_grace_secs=GRACE
    ).misfire_due


def test_a_cron_row_later_than_the_grace_is_due_for_judgment_and_not_started_by_its_read(
    ledger: Ledger,
) -> None:
    channel = active_channel(ledger)
    late, on_time = late_rows(ledger, channel.channel_id, [60, 1])
    mine = ledger.attempts.claim("node-a", 10, LEASE).leased

    assert [o.id for o in mine] == [late.id, on_time.id]
    reads = {
        o.id: open_attempt(ledger, o.id, "node-a", LEASE, "t", misfire_grace_secs=GRACE)
        for o in mine
    }

    assert reads[late.id].misfire_due and reads[late.id].start is None
    assert ledger.occurrences.get_occurrence(late.id).status == CLAIMED, (
        "a late row waits for its judgment"
    )
    assert not reads[on_time.id].misfire_due
    if ledger.engine.dialect.name == "postgresql":
        assert reads[on_time.id].start is not None
        assert ledger.occurrences.get_occurrence(on_time.id).status == RUNNING


@pytest.mark.parametrize("trigger", [TRIGGER_MANUAL, TRIGGER_BACKFILL])
def test_manual_and_backfill_runs_are_never_misfires(ledger: Ledger, trigger: str) -> None:
    channel = active_channel(ledger)
    old = row(ledger.db_now() - timedelta(hours=1), channel.channel_id, trigger=trigger)
    assert ledger.occurrences.insert_occurrence(old)
    claim_one(ledger, "node-a")

    assert not opened(ledger, old.id, "node-a")


def test_a_retried_occurrence_is_never_a_misfire(ledger: Ledger) -> None:
    # Given a cron row whose first attempt started on time and failed an hour ago
    channel = active_channel(ledger)
    [due] = late_rows(ledger, channel.channel_id, [3600])
    first = claim_one(ledger, "node-a")
    assert start_attempt(ledger, first, "node-a", 1, None, LEASE).started
    assert ledger.occurrences.get_occurrence(due.id).misfire_judged, "whatever starts is judged"
    assert settle(ledger, due.id, "node-a", "failed", error_message="boom", retry_in=0)

    # When its retry is claimed, an hour after its due time
    claim_one(ledger, "node-b")

    # Then it is not judged again
    assert not opened(ledger, due.id, "node-b")


def test_skip_drops_every_late_row_of_the_channel_at_once(ledger: Ledger) -> None:
    # Given three late rows of a skip channel, of which only the oldest is claimed
    channel = active_channel(ledger, misfire_policy="skip")
    rows_ = late_rows(ledger, channel.channel_id, [30, 20, 10])
    mine = ledger.attempts.claim("node-a", 1, LEASE).leased[0]

    # When the claimed one is judged
    judged = ledger.misfires.judge_misfires(mine.id, "node-a", channel.channel_id, rule("skip"))

    # Then all three are skipped, each with the policy in its message
    assert (judged.verdict, judged.dropped) == ("skipped", 3)
    for new in rows_:
        stored = ledger.occurrences.get_occurrence(new.id)
        assert stored.status == SKIPPED_MISFIRE and stored.completed_at is not None
        assert 'judged at start under misfire_policy "skip"' in (stored.error_message or "")
        assert "runs 0 of the channel's 3 late occurrence(s)" in (stored.error_message or "")
    assert ledger.attempts.claim("node-b", 10, LEASE).leased == []


def test_latest_keeps_only_the_newest_late_row(ledger: Ledger) -> None:
    channel = active_channel(ledger)
    oldest, middle, newest = late_rows(ledger, channel.channel_id, [30, 20, 10])
    claimed = ledger.attempts.claim("node-a", 10, LEASE).leased

    first = ledger.misfires.judge_misfires(oldest.id, "node-a", channel.channel_id, rule("latest"))
    again = ledger.misfires.judge_misfires(newest.id, "node-a", channel.channel_id, rule("latest"))

    assert (first.verdict, first.dropped) == ("skipped", 2)
    assert (again.verdict, again.dropped) == ("run", 0), "judged once, with the whole set"
    statuses = [ledger.occurrences.get_occurrence(o.id).status for o in (oldest, middle, newest)]
    assert statuses == [SKIPPED_MISFIRE, SKIPPED_MISFIRE, CLAIMED]
    assert ledger.occurrences.get_occurrence(newest.id).misfire_judged
    # …and a kept row is judged: it starts
    read = open_attempt(ledger, newest.id, "node-a", LEASE, "t", misfire_grace_secs=GRACE)
    assert not read.misfire_due
    kept = next(o for o in claimed if o.id == newest.id)
    assert read.start or start_attempt(ledger, kept, "node-a", 1, None, LEASE).started
    assert ledger.occurrences.get_occurrence(newest.id).status == RUNNING


def test_catch_up_keeps_the_oldest_bound_across_claim_batches(ledger: Ledger) -> None:
    # Given four late rows of a catch_up channel bounded at 2, claimed one batch at a time
    channel = active_channel(ledger, misfire_policy="catch_up", max_catch_up=2)
    new = late_rows(ledger, channel.channel_id, [40, 30, 20, 10])
    first_batch = ledger.attempts.claim("node-a", 1, LEASE).leased
    catch_up = rule("catch_up", max_catch_up=2)

    # When the first batch's row is judged, then the rest are claimed and judged
    verdicts = [
        ledger.misfires.judge_misfires(first_batch[0].id, "node-a", channel.channel_id, catch_up)
    ]
    for later in ledger.attempts.claim("node-b", 10, LEASE).leased:
        verdicts.append(
            ledger.misfires.judge_misfires(later.id, "node-b", channel.channel_id, catch_up)
        )

    # Then the oldest two run and the newer two are skipped: the whole late set was judged
    # at the first judgment, not per batch
    assert [v.verdict for v in verdicts] == ["run", "run"]
    statuses = [ledger.occurrences.get_occurrence(o.id).status for o in new]
    assert statuses == [CLAIMED, CLAIMED, SKIPPED_MISFIRE, SKIPPED_MISFIRE]


def test_a_row_within_the_grace_is_not_part_of_the_late_set(ledger: Ledger) -> None:
    # (a grace of a minute: the row due a second ago is still within it on a loaded machine)
    channel = active_channel(ledger, misfire_policy="skip")
    late, on_time = late_rows(ledger, channel.channel_id, [120, 1])
    ledger.attempts.claim("node-a", 10, LEASE)

    judged = ledger.misfires.judge_misfires(late.id, "node-a", channel.channel_id, rule("skip", 60))

    assert (judged.verdict, judged.dropped) == ("skipped", 1)
    assert ledger.occurrences.get_occurrence(on_time.id).status == CLAIMED


def test_a_judgment_waits_while_reconcile_has_not_planned_the_late_window(
    ledger: Ledger,
) -> None:
    # Given a late row written ahead, while the channel's cursor is still behind (an outage)
    channel = active_channel(ledger, misfire_policy="skip")
    [late] = late_rows(ledger, channel.channel_id, [30])
    upsert_cursor(ledger, channel.channel_id, 1, "hash", ledger.db_now() - timedelta(seconds=20))
    claim_one(ledger, "node-a")

    judged = ledger.misfires.judge_misfires(late.id, "node-a", channel.channel_id, rule("skip"))

    assert judged.verdict == "behind"
    stored = ledger.occurrences.get_occurrence(late.id)
    assert (stored.status, stored.misfire_judged) == (CLAIMED, False), "nothing written"


def test_a_paused_cursor_is_not_behind(ledger: Ledger) -> None:
    channel = active_channel(ledger, misfire_policy="skip")
    [late] = late_rows(ledger, channel.channel_id, [30])
    upsert_cursor(ledger, channel.channel_id, 1, "hash", ledger.db_now() - timedelta(seconds=20))
    pause_cursor(ledger, channel.channel_id)
    claim_one(ledger, "node-a")

    assert ledger.misfires.judge_misfires(
        late.id, "node-a", channel.channel_id, rule("skip")
    ).verdict == ("skipped")


def test_a_judgment_answers_lost_to_a_claimant_that_no_longer_holds_the_row(
    ledger: Ledger,
) -> None:
    channel = active_channel(ledger)
    [late] = late_rows(ledger, channel.channel_id, [30])
    claim_one(ledger, "node-a")

    assert ledger.misfires.judge_misfires(
        late.id, "node-b", channel.channel_id, rule("latest")
    ).verdict == ("lost")
    stored = ledger.occurrences.get_occurrence(late.id)
    assert (stored.status, stored.misfire_judged) == (CLAIMED, True), "kept for node-a"


def test_a_skipped_misfire_is_not_pending_work(ledger: Ledger) -> None:
    channel = active_channel(ledger, misfire_policy="skip")
    [late] = late_rows(ledger, channel.channel_id, [30])
    claim_one(ledger, "node-a")
    ledger.misfires.judge_misfires(late.id, "node-a", channel.channel_id, rule("skip"))

    assert ledger.reporting.backlog().pending == 0 and ledger.reporting.in_flight_count() == 0
    assert ledger.occurrences.get_occurrence(late.id).status != PENDING
    assert not start(ledger, ledger.occurrences.get_occurrence(late.id), "node-a").started
