"""What `cronledger dev` prints as attempts end: one aligned line each, why it did not
complete indented below, built from the report and the row (the report alone once purged).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TextIO

from cronledger.execute import AttemptReport
from cronledger.instants import human_duration
from cronledger.ledger import Ledger, Occurrence

#: Attempts that ended writing nothing, which are printed all the same: they say so.
STOPPED_OUTCOMES = ("stopped", "superseded")


def line_printer(out: TextIO) -> Callable[..., None]:
    """`say(*lines)`: print lines on `out` from any thread, one call's lines together; the one
    way `cronledger dev` prints (its threads share the terminal)."""
    lock = threading.Lock()

    def say(*lines: str) -> None:
        with lock:
            print(*lines, sep="\n", file=out, flush=True)

    return say


def console_printer(ledger: Ledger, say: Callable[[str], None]) -> Callable[[AttemptReport], None]:
    """Say each attempt that ended as one line: the instant (to the second), channel, trigger,
    what the attempt came to, the attempt of those allowed, lag (started - due) and duration
    as a person reads them ("3.2 s", "2 d"), the id; then why, indented."""

    def show(report: AttemptReport) -> None:
        stopped = report.outcome in STOPPED_OUTCOMES
        if report.status is None and not stopped:
            return
        try:
            row: Occurrence | None = ledger.occurrences.get_occurrence(report.occurrence_id)
        except Exception:
            row = None  # gone meanwhile (a purge): the report alone still says what happened
        say(_console_line(report, row, stopped))

    return show


def _console_line(report: AttemptReport, row: Occurrence | None, stopped: bool) -> str:
    attempt = report.attempt if report.attempt is not None else row.attempt if row else 0
    if row is None:
        instant, channel, trigger, allowed = "-", "-", "-", "?"
    else:
        instant = f"{row.scheduled_for:%Y-%m-%dT%H:%M:%SZ}"
        channel, trigger, allowed = row.channel_name, row.trigger, str(row.allowed_attempts)
    status = report.outcome if stopped else report.status or "-"
    if report.retry_in is not None:
        status = "failed"  # written back to pending, for its next attempt
    lag = took = "-"
    if row is not None and row.started_at is not None and not stopped:
        lag = human_duration((row.started_at - row.due_at).total_seconds() * 1000)
        if row.completed_at is not None:
            took = human_duration((row.completed_at - row.started_at).total_seconds() * 1000)
    line = (
        f"{instant:<20}  {_fit(channel, 16):<16}  {trigger:<8}  {status:<17}  "
        f"attempt {f'{attempt}/{allowed}':<5}  lag {lag:>7}  took {took:>7}  {report.occurrence_id}"
    )
    why = report.error if stopped else (row.error_message if row is not None else report.error)
    if report.retry_in is not None:
        why = f"{why or 'failed'} (next attempt in {human_duration(report.retry_in * 1000)})"
    if why and status != "completed":
        line += f"\n    {why}"
    return line


def _fit(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"
