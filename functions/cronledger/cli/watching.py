"""`--watch` on a listing: poll it, print the rows that are new or changed, until Ctrl-C.

A row is known by its key and compared whole with what was last printed for it, so a status
moving `running → completed` prints the row again and a quiet poll prints nothing. A person
gets the table with its header, then each change as a row under it; a script gets each row as
one JSON line (or YAML document). The watched rows are the listing's page, as without --watch.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Annotated, Any

import typer

from cronledger.cli.output import Column

if TYPE_CHECKING:  # the session module adds these options to the commands that watch
    from cronledger.cli.session import Session

Watch = Annotated[
    bool,
    typer.Option("--watch", "-w", help="then poll, printing each new or changed row, until Ctrl-C"),
]
Interval = Annotated[
    float, typer.Option(min=0.1, max=3600, help="seconds between polls with --watch")
]
WatchFor = Annotated[
    float | None, typer.Option(hidden=True, min=0, help="stop watching after this many seconds")
]


def every_poll(interval: float, watch_for: float | None, poll: Callable[[bool], None]) -> None:
    """`poll(first)` at once, then every `interval` seconds until `watch_for` seconds have
    passed (None: until Ctrl-C, which ends the watch quietly)."""
    deadline = None if watch_for is None else time.monotonic() + watch_for
    first = True
    with contextlib.suppress(KeyboardInterrupt):  # how a watch ends: not an error
        while True:
            poll(first)
            first = False
            if deadline is not None and time.monotonic() >= deadline:
                return
            pause = interval if deadline is None else min(interval, deadline - time.monotonic())
            time.sleep(max(0.0, pause))


def watch_rows(
    s: Session,
    path: str,
    query: Mapping[str, Any],
    key: str,
    columns: Sequence[Column],
    oldest_first: bool = False,
) -> None:
    """Print the listing's rows, then at each poll those that changed (`s.watching` paces it),
    each known by its field `key`; `oldest_first`: a newest-first page read as a log."""
    shown: dict[str, Mapping[str, Any]] = {}

    def poll(first: bool) -> None:
        rows = s.get(path, query)["data"]
        changed = [r for r in (rows[::-1] if oldest_first else rows) if shown.get(r[key]) != r]
        shown.update((row[key], row) for row in changed)
        s.out.rows(columns, changed, header=first, empty="(none yet)")

    assert s.watching is not None
    every_poll(*s.watching, poll)
