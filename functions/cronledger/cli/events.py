"""`cronledger events`: what the scheduler told (or would have told) about each channel.

A listing is the API's: newest first, a page at a time by key (`--after` the `next` the
footer names). `--watch` reads as a log instead: the newest page oldest first, then each event
as it arrives, until Ctrl-C. It polls by the events' own instants (the database's clock, so a
skewed local clock loses nothing), looking back a little further than the last one seen
(`_LOOK_BACK`): an event is stamped inside its transaction and listed once that commits, so
one may appear a moment behind another already shown. Ids already printed are not printed
twice, and are forgotten once they fall out of that window (the poll cannot see them again).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping
from datetime import timedelta
from typing import Annotated, Any, Final

import typer

from cronledger.cli.output import Column, instant_of, when
from cronledger.cli.session import Limit, Session, api, instant
from cronledger.instants import to_rfc3339

root = typer.Typer()

#: How far before the newest event seen each poll looks again.
_LOOK_BACK: Final = timedelta(seconds=60)
_PAGE: Final = 1000


def delivery(event: Mapping[str, Any]) -> str:
    """Where the event's delivery stands, in a word."""
    if not event.get("deliver"):
        return "recorded"
    return "delivered" if event.get("delivered_at") else "undelivered"


COLUMNS = (
    Column("AT (UTC)", lambda e: when(e["at"]), 100),
    Column("KIND", lambda e: e["kind"], 95),
    Column("CHANNEL", lambda e: e.get("channel_name") or e["channel_id"], 90),
    Column("SCHEDULED (UTC)", lambda e: when(e.get("scheduled_for")), 40),
    Column("DELIVERY", delivery, 60, status=True),
    Column("SEQ", lambda e: e.get("sequence"), 20, wide_only=True),
    Column("OCCURRENCE", lambda e: e.get("occurrence_id"), 30, id=True),
    Column("ERROR", lambda e: e.get("error"), 70),
    Column("SEND ERROR", lambda e: e.get("last_error"), 10, wide_only=True),
)


@api(root, "events")
def events(
    s: Session,
    channel: Annotated[
        str | None, typer.Option("--channel", "-c", help="a channel name or id")
    ] = None,
    kind: Annotated[
        str | None,
        typer.Option("--kind", "-k", help="failed, overdue, recovered, … (or occurrence.failed)"),
    ] = None,
    since: Annotated[
        str | None, typer.Option(help="at or after: RFC 3339 or an age (24h, 30m, 7d)")
    ] = None,
    limit: Limit = 50,
    after: Annotated[
        str | None, typer.Option(help="the page after this key (the footer names it)")
    ] = None,
    watch: Annotated[
        bool, typer.Option("--watch", "-w", help="then print each new event until Ctrl-C")
    ] = False,
    interval: Annotated[
        float, typer.Option(min=0.1, max=3600, help="seconds between polls with --watch")
    ] = 2.0,
    watch_for: Annotated[
        float | None,
        typer.Option(hidden=True, min=0, help="stop watching after this many seconds"),
    ] = None,
) -> None:
    """Events newest first: failures, overdue and stalled channels, recoveries, cancels,
    skips, each with whether it was delivered."""
    query = {
        "channel_id": None if channel is None else s.channel(channel)["channel_id"],
        "kind": kind,
        "since": instant(since),
    }
    page = s.get("/cron/events", {**query, "limit": limit, "after": after})
    if not watch:
        s.out.answer(page, lambda: _listing(s, page))
        return
    deadline = None if watch_for is None else time.monotonic() + watch_for
    with contextlib.suppress(KeyboardInterrupt):  # how a watch ends: not an error
        _watch(s, query, page["data"], interval, deadline)


def _listing(s: Session, page: Mapping[str, Any]) -> None:
    s.out.table(COLUMNS, page["data"], empty="(no events)")
    if page.get("next"):
        s.out.say(f"(--after {page['next']} for more)")


def _watch(
    s: Session,
    query: Mapping[str, Any],
    newest: list[dict[str, Any]],
    interval: float,
    deadline: float | None,
) -> None:
    """Print `newest` oldest first, then every event that arrives, until the deadline."""
    seen: dict[str, Any] = {}
    _show(s, newest, seen, header=True)
    while deadline is None or time.monotonic() < deadline:
        pause = interval if deadline is None else min(interval, deadline - time.monotonic())
        time.sleep(max(0.0, pause))
        _show(s, _arrived(s, query, seen), seen, header=not seen)
        if seen:
            horizon = max(seen.values()) - _LOOK_BACK
            for event_id in [i for i, at in seen.items() if at < horizon]:
                del seen[event_id]


def _arrived(s: Session, query: Mapping[str, Any], seen: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The events not yet shown, from a little before the newest one shown on."""
    since = query.get("since")
    if seen:
        back = to_rfc3339(max(seen.values()) - _LOOK_BACK)
        since = back if since is None or instant_of(since) < instant_of(back) else since
    found: list[dict[str, Any]] = []
    after = None
    while True:
        page = s.get("/cron/events", {**query, "since": since, "limit": _PAGE, "after": after})
        found += [e for e in page["data"] if e["event_id"] not in seen]
        after = page.get("next")
        if after is None:
            return found


def _show(s: Session, events: list[dict[str, Any]], seen: dict[str, Any], header: bool) -> None:
    """`events` oldest first: a table's rows for a person, one JSON (or YAML) document each
    for a script; each remembered by id with its instant."""
    ordered = sorted(events, key=lambda e: (e["at"], e["event_id"]))
    for event in ordered:
        seen[event["event_id"]] = instant_of(event["at"])
    if s.out.for_scripts:
        for event in ordered:
            s.out.record(event)
    elif ordered or header:
        s.out.table(COLUMNS, ordered, empty="(no events yet)", header=header)
    s.out.flush()
