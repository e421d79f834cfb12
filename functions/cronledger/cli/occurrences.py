"""`cronledger occurrences …`, `retry` and `cancel`: reading the ledger and acting on its rows.

`retry` takes ids, or a filter whose matches it counts and asks about first; each row is one
conditional write in the API, so a row that moved on meanwhile is refused, not retried twice.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

import typer

from cronledger.api_client import ApiError, segment
from cronledger.cli.documents import UsageError
from cronledger.cli.output import Column, when
from cronledger.cli.session import (
    EXIT_API,
    PAGING,
    WATCHING,
    ChannelFilter,
    Session,
    Yes,
    api,
    confirm,
    instant,
)
from cronledger.cli.watching import watch_rows
from cronledger.instants import human_duration

occurrences = typer.Typer(help="Read the ledger: every scheduled instant and what became of it.")
root = typer.Typer()

Since = Annotated[
    str | None,
    typer.Option(
        help="scheduled at or after: RFC 3339 (2026-09-01T00:00:00Z) or an age (24h, 30m, 7d)"
    ),
]
Until = Annotated[str | None, typer.Option(help="scheduled at or before: RFC 3339 or an age")]
OccurrenceId = Annotated[
    str, typer.Argument(help="an occurrence id (`occurrences list -o wide` shows them whole)")
]

COLUMNS = (
    Column("SCHEDULED (UTC)", lambda o: when(o["scheduled_for"]), 100),
    Column("CHANNEL", lambda o: o["channel_name"], 90),
    Column("STATUS", lambda o: o["status"], 95, status=True),
    Column("TRIGGER", lambda o: o["trigger"], 60),
    Column("ATTEMPT", lambda o: o["attempt"], 40),
    Column("LAG", lambda o: human_duration(o.get("lag_ms")), 30),
    Column("LATE BY", lambda o: human_duration(o.get("late_by_ms")), 28, wide_only=True),
    Column("DURATION", lambda o: human_duration(o.get("duration_ms")), 35),
    Column("ID", lambda o: o["id"], 50, id=True),
    # Kept, cut to the room left, whenever a row shown has failed: what an operator looks for.
    Column("ERROR", lambda o: o.get("error_message"), 25, cut_to=24),
)


def _query(
    s: Session, channel: str | None, status: str | None, since: str | None, until: str | None
) -> dict[str, Any]:
    return {
        "channel_id": s.channel_id(channel),
        "status": status,
        "since": instant(since),
        "until": instant(until),
    }


@api(occurrences, "list", paged=PAGING, watched=WATCHING)
def list_occurrences(
    s: Session,
    channel: ChannelFilter = None,
    status: Annotated[
        str | None, typer.Option(help="pending, claimed, running, completed, failed, cancelled, …")
    ] = None,
    trigger: Annotated[str | None, typer.Option(help="cron, manual or backfill")] = None,
    since: Since = None,
    until: Until = None,
) -> None:
    """The ledger's rows, newest scheduled instant first, a page at a time (the footer names
    the next: --after …); with --watch, then each row that appears or changes (a run
    starting, settling, failing) as it does."""
    query = _query(s, channel, status, since, until) | {"trigger": trigger, **s.page}
    if s.watching:
        watch_rows(s, "/cron/occurrences", query, "id", COLUMNS, oldest_first=True)
        return
    page = s.get("/cron/occurrences", query)
    s.out.answer(page, lambda: s.out.table(COLUMNS, page["data"], page))


#: The full record's fields in the order a person reads them; any other field the API
#: answers (a newer API's) follows, as it is.
RECORD = [
    "id",
    "channel",
    "trigger",
    "scheduled_for",
    "due_at",
    "status",
    "attempt",
    "version",
    "target_ref",
    "claimed_by",
    "claimed_until",
    "singleton",
    "trace_id",
    "started_at",
    "completed_at",
    "lag",
    "late_by",
    "duration",
    "error_message",
]
_SHOWN_AS = {
    "channel": ("channel_id", "channel_name"),
    "version": ("channel_version", "executing_version"),
    "singleton": ("singleton_key", "singleton_slot", "fencing_token"),
    "lag": ("lag_ms",),
    "late_by": ("late_by_ms",),
    "duration": ("duration_ms",),
}


@api(occurrences, "show")
def show(s: Session, id: OccurrenceId) -> None:
    """One occurrence in full: lease, singleton and fencing token, trace id, error, result."""
    answer = s.get(f"/cron/occurrences/{segment(id)}")
    s.out.answer(answer, lambda: _record(s, answer["data"]))


def _record(s: Session, o: Mapping[str, Any]) -> None:
    derived = {
        "channel": f"{o['channel_name']} ({o['channel_id']})",
        "version": f"materialised at v{o['channel_version']}, ran v{o.get('executing_version') or '-'}",
        "singleton": "-"
        if not o.get("singleton_key")
        else f"{o['singleton_key']} slot {o.get('singleton_slot')} token {o.get('fencing_token')}",
        "status": s.out.status(o["status"]),
        "lag": _after(o.get("lag_ms"), "it was due"),
        "late_by": _after(o.get("late_by_ms"), "its instant (jitter and retries included)"),
        "duration": human_duration(o.get("duration_ms")),
    }
    covered = {part for parts in _SHOWN_AS.values() for part in parts} | set(RECORD)
    covered |= {"result", "attempts"}
    pairs = [(name.replace("_", " "), derived.get(name, o.get(name))) for name in RECORD]
    pairs += [(k.replace("_", " "), v) for k, v in o.items() if k not in covered]
    s.out.fields(pairs)
    if o.get("result"):
        s.out.say("result:")
        s.out.say(str(o["result"]))
    attempts = o.get("attempts") or []
    if attempts:
        s.out.say("attempts:")
        s.out.table(ATTEMPT_COLUMNS, attempts)
    for attempt in attempts:
        if attempt.get("error_detail"):
            s.out.say(f"attempt {attempt['number']} failed at:")
            s.out.say(str(attempt["error_detail"]))


def _after(millis: Any, what: str) -> str:
    return "-" if millis is None else f"{human_duration(millis)} after {what}"


#: An occurrence's attempts, first to last, as `occurrences show` lists them.
ATTEMPT_COLUMNS = (
    Column("#", lambda a: a["number"], 100),
    Column("OUTCOME", lambda a: a.get("outcome") or "running", 95, status=True),
    Column("STARTED (UTC)", lambda a: when(a["started_at"]), 90),
    Column("DURATION", lambda a: human_duration(a.get("duration_ms")), 60),
    Column("CLAIMANT", lambda a: a["claimant"], 30),
    Column("TOKEN", lambda a: a.get("fencing_token"), 20),
    Column("ERROR", lambda a: a.get("error_message"), 25, cut_to=24),
)


@api(root, "retry")
def retry(
    s: Session,
    ids: Annotated[list[str] | None, typer.Argument(help="occurrence ids; or use a filter")] = None,
    channel: ChannelFilter = None,
    status: Annotated[
        str | None,
        typer.Option(help="with a filter: failed (the default), cancelled, skipped_misfire, …"),
    ] = None,
    since: Since = None,
    until: Until = None,
    yes: Yes = False,
) -> None:
    """Put failed, cancelled or skipped occurrences back to pending (same id and instant;
    each runs as its next attempt): the ones named, or every one a filter matches."""
    filtered = any(v is not None for v in (channel, status, since, until))
    if ids and filtered:
        raise UsageError("give occurrence ids or a filter (--channel, --status, --since), not both")
    if not ids and not filtered:
        raise UsageError("give occurrence ids, or a filter such as --status failed --since 24h")
    if not ids:
        query = _query(s, channel, status or "failed", since, until)
        # A row that failed meanwhile shifts the pages: an id may come twice, once is enough.
        ids = list(dict.fromkeys(o["id"] for o in s.each("/cron/occurrences", query)))
        if not ids:
            s.out.tell({"done": [], "refused": []}, "nothing matches")
            return
        what = f"{len(ids)} {query['status']} occurrence(s)" + (f" of {channel}" if channel else "")
        confirm(s.out, f"Retry {what}?", yes)
    _each(s, "retry", ids)


@api(root, "cancel")
def cancel(
    s: Session,
    ids: Annotated[list[str], typer.Argument(help="occurrence ids")],
    reason: Annotated[
        str | None, typer.Option(help="why: recorded on each row and in its event")
    ] = None,
) -> None:
    """Cancel pending, claimed or running occurrences (a running attempt stops at its next
    lease renewal)."""
    _each(s, "cancel", ids, None if reason is None else {"reason": reason})


def _each(s: Session, action: str, ids: list[str], body: Any = None) -> None:
    """`action` each occurrence: one line per row as it happens, then a count."""
    answers: list[dict[str, Any]] = []
    refused: list[dict[str, Any]] = []
    for id in ids:
        try:
            answers.append(s.send("POST", f"/cron/occurrences/{segment(id)}/{action}", body))
        except ApiError as exc:
            if len(ids) == 1:
                raise
            refused.append({"id": id, "error": exc.body})
            s.out.say(s.out.status("refused"), f"  {id}: {exc.message}")
            continue
        o = answers[-1]["data"]
        then = f"; its next run is attempt {o['attempt'] + 1}" if action == "retry" else ""
        s.out.say(
            f"occurrence {o['id']} ({o['channel_name']}, {when(o['scheduled_for'])}) is ",
            s.out.status(o["status"]),
            then,
        )
    if len(ids) > 1:
        s.out.say(f"{action}: {len(answers)} done, {len(refused)} refused")
    if s.out.for_scripts:
        done = [a["data"] for a in answers]
        s.out.data(answers[0] if len(ids) == 1 else {"done": done, "refused": refused})
    if refused:
        raise typer.Exit(EXIT_API)
