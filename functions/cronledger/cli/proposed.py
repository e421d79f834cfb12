"""What a file of channel documents would change, before it is applied: `channels diff -f`.

For each document whose channel is new or differs: the field diff and the next instants before
and after (from the scheduler's own compiler), in UTC and in the channel's zone, so a zone or
DST mistake shows before it lands. An instant next to a clock change is marked `gap` (the first
after the clocks jumped forward), `fold` (a wall time that happens twice, firing at each) or
`fold passed` (the first after the clocks went back).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from itertools import zip_longest
from typing import Any, Final
from zoneinfo import ZoneInfo

from cronledger.cli import documents
from cronledger.cli.documents import Document
from cronledger.cli.output import Column
from cronledger.cli.session import Session
from cronledger.cron import Schedule, ScheduleInvalid, compile_schedule

#: Compiling needs a channel id (the default concurrency key); any id compiles the same.
_ANY_ID: Final = "channel-being-compared"


def _compared(s: Session, document: Document, count: int, start: datetime) -> dict[str, Any]:
    """The document compared with its channel: `outcome` new, changed, unchanged or refused,
    the `diff` lines and the `before` and `after` instants."""
    outcome: dict[str, Any] = {"name": document.name, "where": document.where}
    if document.problem is not None:
        return outcome | {"outcome": "refused", "error": document.problem}
    found = s.named(document.name)
    before = None if found is None else documents.document_of(found)
    after = _ordered_like(documents.applied_to(before, document.body), before)
    if before == after:
        return outcome | {"outcome": "unchanged"}
    old = "/dev/null" if found is None else f"{document.name} (version {found['version']})"
    outcome |= {
        "outcome": "new" if found is None else "changed",
        "diff": documents.diff(before, after, old, document.where),
        "before": [] if before is None else _instants(before, count, start),
    }
    try:
        outcome["after"] = _instants(after, count, start)
    except ScheduleInvalid as exc:
        outcome |= {"outcome": "refused", "error": str(exc), "after": []}
        outcome["details"] = [e.as_dict() for e in exc.errors]
    return outcome


def _ordered_like(value: Any, model: Any) -> Any:
    """`value` with its objects' keys in `model`'s order (then its own), so the diff shows
    what changed, not how the file orders its keys."""
    if not isinstance(value, dict):
        return value
    model = model if isinstance(model, dict) else {}
    keys = [k for k in model if k in value] + [k for k in value if k not in model]
    return {k: _ordered_like(value[k], model.get(k)) for k in keys}


def _instants(document: Mapping[str, Any], count: int, start: datetime) -> list[dict[str, Any]]:
    """The next `count` instants of the document's schedule after `start`, marked."""
    from cronledger.api.views import preview_instant  # the API's models: only for a diff

    schedule = compile_schedule(document.get("transport_config") or {}, _ANY_ID, now=start)
    shown: list[dict[str, Any]] = []
    at = schedule.next_after(start)
    before: datetime | None = None
    while at is not None and len(shown) < count:
        instant = preview_instant(at, schedule, before).model_dump(mode="json")
        shown.append(
            {
                "utc": instant["utc"],
                "local": instant["local"],
                "timezone": schedule.timezone,
                "dst": dst_mark(at, before, schedule, instant["dst"]),
            }
        )
        before, at = at, schedule.next_after(at)
    return shown


def dst_mark(
    at: datetime, before: datetime | None, schedule: Schedule, change: str | None
) -> str | None:
    """`fold`, `gap …` or `fold passed …` (see the module header), or None; `change`: the
    offset change the preview shows at `at`."""
    zone = ZoneInfo(schedule.timezone)
    local = at.astimezone(zone)
    if local.replace(fold=1 - local.fold).utcoffset() != local.utcoffset():
        return f"fold: {local.strftime('%H:%M:%S')} happens twice"
    if change is None or before is None:
        return None
    now_offset, was_offset = local.utcoffset(), before.astimezone(zone).utcoffset()
    assert now_offset is not None and was_offset is not None  # a ZoneInfo always has one
    return f"gap {change}" if now_offset > was_offset else f"fold passed {change}"


def show(s: Session, path: str, count: int) -> list[dict[str, Any]]:
    """Print what the file would change; the comparisons, for `-o json|yaml` and the exit."""
    start = datetime.now(UTC)
    compared = [_compared(s, d, count, start) for d in documents.read(path)]
    if s.out.for_scripts:
        s.out.data(compared)
        return compared
    for c in compared:
        if c["outcome"] == "unchanged":
            s.out.say(s.out.status("unchanged"), f"  {c['name']}")
            continue
        s.out.say(s.out.status(c["outcome"]), f"  {c['where']}: {c['name']}")
        if c.get("error"):
            s.out.say(f"    {c['error']}")
        s.out.diff(c.get("diff", []))
        _table(s, c.get("before", []), c.get("after", []))
    return compared


def _table(s: Session, before: list[dict[str, Any]], after: list[dict[str, Any]]) -> None:
    if not before and not after:
        return
    rows = [
        {"n": n, "before": old, "after": new}
        for n, (old, new) in enumerate(zip_longest(before, after), start=1)
    ]

    def cell(side: str, key: str) -> Any:
        return lambda row: (row[side] or {}).get(key)

    columns = [
        Column("#", lambda row: row["n"], 100),
        Column("BEFORE (UTC)", cell("before", "utc"), 90),
        Column("BEFORE (LOCAL)", cell("before", "local"), 80),
        Column("BEFORE DST", cell("before", "dst"), 70),
        Column("AFTER (UTC)", cell("after", "utc"), 95),
        Column("AFTER (LOCAL)", cell("after", "local"), 85),
        Column("AFTER DST", cell("after", "dst"), 75),
    ]
    if not any(r["before"] for r in rows):
        columns = [c for c in columns if not c.header.startswith("BEFORE")]
    s.out.table(columns, rows)
