"""What `cronledger dev` prints as attempts end (`local_printer.console_printer`), from real rows.

Invariant: one line per attempt in columns that line up whatever the trigger (a manual row's
instant has a fraction of a second, a backfill's lag is days), the trigger shown, lags as a
person reads them, and attempts that stopped themselves or were superseded shown as such,
each with why on the next line.
"""

from __future__ import annotations

import io
import logging
from datetime import timedelta
from typing import Any

import pytest

from cronledger.execute import AttemptReport
from cronledger.instants import human_duration
from cronledger.ledger import (
    CANCELLED,
    COMPLETED,
    RUNNING,
    DatabaseUnavailable,
    Ledger,
    NewOccurrence,
)
from cronledger.local import LocalScheduler
from cronledger.local_printer import console_printer, line_printer
from tests.api.helpers import Scheduler
from tests.e2e import targets
from tests.e2e.test_scheduler import FAST, make_channel
from tests.ledger.helpers import with_stores
from tests.polling import wait_until

OK = {"type": "python", "callable": "tests.api.jobs:ok"}
FAIL = {"type": "python", "callable": "tests.api.jobs:fail"}


@pytest.mark.parametrize(
    ("millis", "shown"),
    [
        (None, "-"),
        (6, "6 ms"),
        (999.4, "999 ms"),
        (3_240, "3.2 s"),
        (10_000, "10 s"),
        (90_000, "1.5 min"),
        (600_000, "10 min"),
        (7_200_000, "2 h"),
        (172_800_000, "2 d"),
        (1_987_200_000, "23 d"),
    ],
)
def test_durations_read_as_a_person_says_them(millis: float | None, shown: str) -> None:
    assert human_duration(millis) == shown


def test_settled_attempts_line_up_whatever_the_trigger(sqlite_ledger: Ledger) -> None:
    # Given a cron, a manual (fractional instant) and a two-day-old backfill run, one failing
    ledger = sqlite_ledger
    quick = ledger.channels.create_channel(
        "quick", {"schedule": "0 15 2 * * *"}, OK, 5000, "active"
    )
    longer = ledger.channels.create_channel(
        "a-channel-with-a-long-name", {"schedule": "0 15 2 * * *", "retry": {"max_attempts": 1}},
        FAIL, 5000, "active",
    )  # fmt: skip
    now = ledger.db_now()
    rows = [
        NewOccurrence.of(quick, now.replace(microsecond=0) - timedelta(seconds=1), None),
        NewOccurrence.of(quick, now - timedelta(milliseconds=1500), None, trigger="manual"),
        NewOccurrence.of(longer, now - timedelta(days=2), None, trigger="backfill"),
    ]
    ledger.occurrences.insert_occurrences(rows)
    out = io.StringIO()
    show = console_printer(ledger, line_printer(out))

    # When each runs, and its report reaches the printer
    scheduler = Scheduler(ledger)
    scheduler.dispatch = lambda occurrence_id, claimant: show(  # type: ignore[method-assign]
        scheduler.executor.run_attempt(occurrence_id, claimant)
    )
    assert scheduler.run_due() == 3

    # Then every line has its columns at the same places
    lines = out.getvalue().splitlines()
    results = [line for line in lines if not line.startswith("    ")]
    assert len(results) == 3
    by_id = {line.split()[-1]: line for line in results}
    cron, manual, backfill = (by_id[row.id] for row in rows)
    assert cron.split()[:5] == [f"{rows[0].scheduled_for:%Y-%m-%dT%H:%M:%SZ}", "quick", "cron",
                                "completed", "attempt"]  # fmt: skip
    assert manual.split()[1:4] == ["quick", "manual", "completed"]
    assert manual.split()[0].endswith("Z") and "." not in manual.split()[0]
    assert backfill.split()[1:6] == ["a-channel-with-…", "backfill", "failed", "attempt", "1/1"]
    assert " lag     2 d " in backfill
    for column in (" attempt ", " lag ", " took "):
        assert len({line.index(column) for line in results}) == 1, column
    assert len({line.index(line.split()[-1]) for line in results}) == 1  # the ids
    (why,) = [line for line in lines if line.startswith("    ")]
    assert why.startswith("    RuntimeError: report for")
    assert ledger.occurrences.get_occurrence(rows[2].id).status == "failed"
    assert {ledger.occurrences.get_occurrence(r.id).status for r in rows[:2]} == {COMPLETED}


def test_an_attempt_an_operator_granted_counts_among_those_allowed(sqlite_ledger: Ledger) -> None:
    # Given a run that failed its only allowed attempt, then retried by an operator
    ledger = sqlite_ledger
    once = {"schedule": "0 15 2 * * *", "retry": {"max_attempts": 1}}
    channel = ledger.channels.create_channel("job", once, FAIL, 5000, "active")
    row = NewOccurrence.of(channel, ledger.db_now().replace(microsecond=0), None, trigger="manual")
    ledger.occurrences.insert_occurrence(row)
    scheduler = Scheduler(ledger)
    assert scheduler.run_due() == 1
    ledger.occurrences.requeue(row.id)
    out = io.StringIO()
    show = console_printer(ledger, line_printer(out))

    # When the granted attempt runs (and fails again)
    scheduler.dispatch = lambda occurrence_id, claimant: show(  # type: ignore[method-assign]
        scheduler.executor.run_attempt(occurrence_id, claimant)
    )
    assert scheduler.run_due() == 1

    # Then it is the second of two allowed, not "2/1"
    (line,) = [line for line in out.getvalue().splitlines() if not line.startswith("    ")]
    assert line.split()[3:6] == ["failed", "attempt", "2/2"]


def test_stopped_and_superseded_attempts_are_shown_with_why(sqlite_ledger: Ledger) -> None:
    ledger = sqlite_ledger
    channel = ledger.channels.create_channel(
        "job", {"schedule": "0 15 2 * * *"}, OK, 5000, "active"
    )
    row = NewOccurrence.of(channel, ledger.db_now().replace(microsecond=0), None)
    ledger.occurrences.insert_occurrence(row)
    out = io.StringIO()
    show = console_printer(ledger, line_printer(out))

    show(AttemptReport(row.id, "superseded", error="ownership lost: replaced by occ-2", attempt=2))
    show(AttemptReport(row.id, "stopped", error="no successful renewal", attempt=1))
    show(AttemptReport(row.id, "lost", error="not claimed by this dispatch", attempt=1))
    show(AttemptReport("gone", "stopped", error="no successful renewal", attempt=1))

    lines = out.getvalue().splitlines()
    assert [line.split()[1:5] for line in lines[0::2]] == [
        ["job", "cron", "superseded", "attempt"],
        ["job", "cron", "stopped", "attempt"],
        ["-", "-", "stopped", "attempt"],
    ]
    assert lines[1::2] == [
        "    ownership lost: replaced by occ-2",
        "    no successful renewal",
        "    no successful renewal",
    ]
    assert "attempt 2/3" in lines[0] and lines[4].split()[-1] == "gone"


class _RenewalsFail:
    """The real ledger, except that every renewal fails as an unreachable database does."""

    def __init__(self, ledger: Ledger) -> None:
        self._ledger = ledger

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ledger.attempts, name)

    def renew(self, *args: Any, **kwargs: Any) -> bool:
        raise DatabaseUnavailable("connection refused")


@pytest.mark.parametrize("ending", ["stopped", "superseded"])
def test_an_attempt_that_stops_itself_or_is_superseded_logs_one_line_and_the_console_prints_it(
    ledger: Ledger, ending: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Given the local scheduler, printing to a console, running a target that blocks: its
    # renewals all fail (it will stop itself), or an operator cancels it (superseded)
    targets.reset()
    channel = make_channel(ledger, "0 0 0 1 1 *", target="wait_for_release")
    due = NewOccurrence.of(channel, ledger.db_now() - timedelta(seconds=1), None)
    ledger.occurrences.insert_occurrence(due)
    out = io.StringIO()
    runs_on = with_stores(ledger, attempts=_RenewalsFail(ledger)) if ending == "stopped" else ledger
    scheduler = LocalScheduler(
        runs_on, FAST, on_settled=console_printer(ledger, line_printer(out)), workers=2
    )

    # When it runs until the attempt has ended one way or the other
    with caplog.at_level(logging.WARNING, logger="cronledger.execute"):
        scheduler.start()
        try:
            wait_until(
                lambda: ledger.occurrences.get_occurrence(due.id).status == RUNNING, timeout=30
            )
            if ending == "superseded":
                ledger.occurrences.cancel(due.id)
            wait_until(lambda: due.id in out.getvalue(), timeout=30)
        finally:
            targets.release.set()
            scheduler.shutdown(drain_secs=5)

    # Then the log has one line naming the occurrence, its attempt and why, and the console
    # shows the attempt as it ended with the same reason below it
    why = {
        "stopped": "no successful renewal within the lease; stopped before a peer could take over",
        "superseded": "ownership lost: the occurrence is cancelled (cancelled by an operator)",
    }[ending]
    lines = [r.getMessage() for r in caplog.records if f"attempt 1 {ending}" in r.getMessage()]
    assert lines == [f"occurrence {due.id} attempt 1 {ending}: {why}"]
    shown = out.getvalue().splitlines()
    assert len(shown) == 2, shown
    assert shown[0].split()[1:6] == ["job", "cron", ending, "attempt", "1/3"]
    assert shown[0].split()[-1] == due.id
    assert shown[1] == f"    {why}"
    # …and it wrote nothing: a stopped attempt leaves its lease to expire
    expected = RUNNING if ending == "stopped" else CANCELLED
    assert ledger.occurrences.get_occurrence(due.id).status == expected
