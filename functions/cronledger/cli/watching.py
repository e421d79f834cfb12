"""`--watch` on a listing: poll it, print the rows that are new or changed, until Ctrl-C.

A row is known by its key (an occurrence's id, a channel's id) and compared whole with what
was last printed for it, so a status moving `running → completed` prints the row again and a
poll that finds nothing new prints nothing. For a person the first poll is the table with its
header and each change a row under it; for a script every row printed is one JSON line (or
YAML document). The listing's page bounds what is watched: the newest rows, as without
`--watch`.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any

import typer

from cronledger.cli.output import Column
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


def watch_rows(
    s: Session,
    fetch: Callable[[], Sequence[Mapping[str, Any]]],
    key: Callable[[Mapping[str, Any]], str],
    columns: Sequence[Column],
    interval: float,
    watch_for: float | None,
) -> None:
    """Print `fetch()`'s rows, then those that changed at each poll, oldest change first."""
    deadline = None if watch_for is None else time.monotonic() + watch_for
    shown: dict[str, Mapping[str, Any]] = {}
    first = True
    with contextlib.suppress(KeyboardInterrupt):  # how a watch ends: not an error
        while True:
            changed = [r for r in fetch() if shown.get(key(r)) != r]
            for row in changed:
                shown[key(row)] = row
            if s.out.for_scripts:
                for row in changed:
                    s.out.record(dict(row))
            elif changed or first:
                s.out.table(columns, list(changed), empty="(none yet)", header=first)
            s.out.flush()
            first = False
            if deadline is not None and time.monotonic() >= deadline:
                return
            pause = interval if deadline is None else min(interval, deadline - time.monotonic())
            time.sleep(max(0.0, pause))
