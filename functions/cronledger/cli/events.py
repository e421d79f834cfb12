"""`cronledger events`: what the scheduler told (or would have told) about each channel.

`--watch` reads as a log: the newest page oldest first, then each event as it arrives. It
polls by the events' own (database) instants from `_LOOK_BACK` before the newest seen, since
an event is stamped inside its transaction and listed once that commits, so it may appear
behind one already shown. An id is printed once, and forgotten when it leaves that window.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Annotated, Any, Final

import typer

from cronledger.cli.output import Column, when
from cronledger.cli.session import AFTER, LIMIT, PACING, ChannelFilter, Session, api, instant
from cronledger.cli.watching import every_poll
from cronledger.instants import parse_rfc3339, to_rfc3339

root = typer.Typer()

Watch = Annotated[
    bool, typer.Option("--watch", "-w", help="then print each new event until Ctrl-C")
]
#: How far before the newest event seen each poll looks again.
_LOOK_BACK: Final = timedelta(seconds=60)


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


@api(root, "events", paged=(LIMIT, AFTER), watched=(("watch", Watch, False), *PACING))
def events(
    s: Session,
    channel: ChannelFilter = None,
    kind: Annotated[
        str | None,
        typer.Option("--kind", "-k", help="failed, overdue, recovered, … (or occurrence.failed)"),
    ] = None,
    since: Annotated[
        str | None, typer.Option(help="at or after: RFC 3339 or an age (24h, 30m, 7d)")
    ] = None,
) -> None:
    """Events newest first: failures, overdue and stalled channels, recoveries, cancels,
    skips, each with whether it was delivered."""
    query = {"channel_id": s.channel_id(channel), "kind": kind, "since": instant(since)}
    page = s.get("/cron/events", {**query, **s.page})
    if not s.watching:
        s.out.answer(page, lambda: _listing(s, page))
        return
    seen: dict[str, Any] = {}

    def poll(first: bool) -> None:
        """The newest page first, then every event not yet shown (oldest first)."""
        found = page["data"] if first else _arrived(s, query, seen)
        ordered = sorted(found, key=lambda e: (e["at"], e["event_id"]))
        header = first or not seen
        seen.update((e["event_id"], parse_rfc3339(e["at"])) for e in ordered)
        s.out.rows(COLUMNS, ordered, header=header, empty="(no events yet)")
        if seen:
            horizon = max(seen.values()) - _LOOK_BACK
            for event_id in [i for i, at in seen.items() if at < horizon]:
                del seen[event_id]

    every_poll(*s.watching, poll)


def _listing(s: Session, page: Mapping[str, Any]) -> None:
    s.out.table(COLUMNS, page["data"], empty="(no events)")
    if page.get("next"):
        s.out.say(f"(--after {page['next']} for more)")


def _arrived(s: Session, query: Mapping[str, Any], seen: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The events not yet shown, from a little before the newest one shown on."""
    since = query.get("since")
    if seen:
        back = to_rfc3339(max(seen.values()) - _LOOK_BACK)
        since = back if since is None or parse_rfc3339(since) < parse_rfc3339(back) else since
    return [
        e for e in s.each("/cron/events", {**query, "since": since}) if e["event_id"] not in seen
    ]
