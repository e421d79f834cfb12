"""The one renderer every command prints through (Rich).

`-o table` (the default) fits the terminal: the least important columns dropped first (a
`cut_to` column is cut instead), ids shortened, statuses coloured (`NO_COLOR` honoured). `-o
wide` shows every column in full. `-o json|yaml` print the API's answer alone on stdout, the
rest on stderr. An error goes to stderr once: one line, the field problems under it.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Final

import yaml
from rich.console import Console
from rich.table import Table
from rich.text import Text

from cronledger.instants import human_duration, parse_rfc3339


class Format(StrEnum):
    table = "table"
    wide = "wide"
    json = "json"
    yaml = "yaml"


#: How each status (of an occurrence, a channel, or an applied document) is coloured;
#: a status not listed here (a newer API's) prints plain.
STYLES: Final = {
    **dict.fromkeys(("completed", "active", "created", "delivered"), "green"),
    **dict.fromkeys(("failed", "refused"), "bold red"),
    **dict.fromkeys(("running", "claimed", "updated"), "cyan"),
    **dict.fromkeys(("pending", "paused", "warning", "undelivered"), "yellow"),
    **dict.fromkeys(("cancelled", "draft", "archived", "unchanged", "recorded"), "bright_black"),
    **dict.fromkeys(("skipped_misfire", "skipped_singleton"), "magenta"),
}
SHORT_ID: Final = 13  # "01a22832-3cee…": the id's time-ordered head
_UNCUT: Final = 100_000


@dataclass(frozen=True)
class Column:
    """A table column: its header, how a row shows in it, and its importance (the least
    important is dropped first). An `id` is shortened unless `-o wide`; a `status` coloured;
    a `cut_to` column is cut to the room left, to no fewer than `cut_to` characters."""

    header: str
    cell: Callable[[Mapping[str, Any]], Any]
    importance: int = 50
    wide_only: bool = False
    id: bool = False
    status: bool = False
    cut_to: int = 0

    def text(self, row: Mapping[str, Any], wide: bool) -> Text:
        value = self.cell(row)
        if self.status:
            return Out.status(value)
        text = _plain(value)
        if self.id and not wide and len(text) > SHORT_ID:
            text = text[: SHORT_ID - 1] + "…"
        return Text(text)


class Out:
    def __init__(self, format: Format) -> None:
        self.format = format
        # A table fits a terminal (or $COLUMNS); piped elsewhere, its lines are never cut.
        probe = Console(file=sys.stdout)
        fits = format is not Format.wide and (probe.is_terminal or "COLUMNS" in os.environ)
        self.width: int | None = probe.width if fits else None
        plain = {"markup": False, "highlight": False, "emoji": False}
        self.console = Console(file=sys.stdout, width=self.width or _UNCUT, **plain)  # type: ignore[arg-type]
        self.stderr = Console(file=sys.stderr, **plain)  # type: ignore[arg-type]

    @property
    def for_scripts(self) -> bool:
        return self.format in (Format.json, Format.yaml)

    def answer(self, value: Any, human: Callable[[], None]) -> None:
        """`value` as JSON or YAML for scripts, else whatever `human` prints."""
        if self.for_scripts:
            self.data(value)
        else:
            human()

    def tell(self, value: Any, *parts: str | Text) -> None:
        """`value` as JSON or YAML for scripts, else the line `parts` make."""
        self.answer(value, lambda: self.say(*parts))

    def data(self, value: Any) -> None:
        """`value` in the chosen machine format (JSON unless `-o yaml`)."""
        if self.format is Format.yaml:
            sys.stdout.write(as_yaml(value))
        else:
            sys.stdout.write(json.dumps(value, indent=2, ensure_ascii=False) + "\n")

    def rows(
        self, columns: Sequence[Column], rows: Sequence[Mapping[str, Any]], header: bool, empty: str
    ) -> None:
        """Rows of a stream, out now (its reader is waiting): for scripts a JSON line or a
        YAML document each; for a person, table rows, with the header (or `empty`) if `header`."""
        if not self.for_scripts:
            if rows or header:
                self.table(columns, rows, empty=empty, header=header)
        elif self.format is Format.yaml:
            for row in rows:
                sys.stdout.write("---\n")
                self.data(dict(row))
        else:
            for row in rows:
                sys.stdout.write(json.dumps(dict(row), ensure_ascii=False, separators=(",", ":")))
                sys.stdout.write("\n")
        sys.stdout.flush()

    def say(self, *parts: str | Text) -> None:
        """A line for a person: stdout, or stderr when stdout carries JSON or YAML."""
        line = Text.assemble(*parts)
        (self.stderr if self.for_scripts else self.console).print(line, soft_wrap=True)

    def error(self, message: str, details: Iterable[Mapping[str, Any]] = ()) -> None:
        self.stderr.print(f"cronledger: error: {message}", soft_wrap=True, style="red")
        for detail in details:
            self.stderr.print(f"  {detail.get('path')}: {detail.get('message')}", soft_wrap=True)

    @staticmethod
    def status(value: Any) -> Text:
        text = "-" if value is None else str(value)
        return Text(text, style=STYLES.get(text, ""))

    def table(
        self,
        columns: Sequence[Column],
        rows: Sequence[Mapping[str, Any]],
        page: Mapping[str, Any] | None = None,
        empty: str = "(none)",
        header: bool = True,
    ) -> None:
        if not rows:
            self.say(empty)
            return
        wide = self.format is Format.wide
        shown = [c for c in columns if wide or not c.wide_only]
        cells = {c.header: [c.text(row, wide) for row in rows] for c in shown}
        room: dict[str, int] = {}
        if self.width is not None:
            shown, room = _fitting(shown, cells, self.width)
        table = Table(
            box=None, pad_edge=False, show_edge=False, padding=(0, 2, 0, 0), show_header=header
        )
        for c in shown:
            table.add_column(
                c.header, header_style="bold", no_wrap=True, max_width=room.get(c.header)
            )
        for row in zip(*(cells[c.header] for c in shown), strict=True):
            table.add_row(*row)
        self._print_trimmed(table)
        if page is not None:
            self._footer(page)

    def fields(self, pairs: Sequence[tuple[str, Any]]) -> None:
        grid = Table.grid(padding=(0, 1))
        grid.add_column(style="bold", no_wrap=True)
        grid.add_column()
        for label, value in pairs:
            grid.add_row(f"{label}:", value if isinstance(value, Text) else Text(_plain(value)))
        self._print_trimmed(grid)

    def _print_trimmed(self, table: Table) -> None:
        """Print `table` without the padding Rich leaves at the end of each line."""
        with self.console.capture() as captured:
            self.console.print(table)
        for line in captured.get().splitlines():
            self.console.file.write(line.rstrip() + "\n")

    def diff(self, lines: Iterable[str]) -> None:
        for line in lines:
            head = "" if line.startswith(("+++", "---")) else line[:1]
            style = {"+": "green", "-": "red", "@": "cyan"}.get(head, "")
            self.console.print(Text(line.rstrip("\n"), style=style), soft_wrap=True)

    def _footer(self, page: Mapping[str, Any]) -> None:
        """How many rows of how many these are, and the key of the page after them."""
        shown, total, exact = len(page["data"]), page["total"], page.get("total_is_exact", True)
        if not shown or (exact and shown >= total):
            return
        more = f" (--after {page['next']} for more)" if page.get("next") else ""
        offset = page.get("offset", 0)
        # A page read by key knows how many it shows, not where it sits in the list.
        where = f"{offset + 1}-{offset + shown}" if offset else shown
        self.say(f"{where} of {total if exact else f'more than {total}'}{more}")


def _fitting(
    columns: Sequence[Column], cells: Mapping[str, list[Text]], width: int
) -> tuple[list[Column], dict[str, int]]:
    """The columns that fit in `width`, the least important dropped first (at least one),
    and the width each column that is cut instead may take."""
    cut = {
        c.header
        for c in columns
        if c.cut_to and any(t.plain != _plain(None) for t in cells[c.header])
    }
    needed = {}
    for c in columns:
        natural = max(len(c.header), *(t.cell_len for t in cells[c.header]))
        needed[c.header] = min(natural, c.cut_to) if c.header in cut else natural
    kept = list(columns)

    def total() -> int:
        return sum(needed[c.header] for c in kept) + 2 * (len(kept) - 1)

    while len(kept) > 1 and total() > width:
        droppable = [c for c in kept if c.header not in cut] or kept
        kept.remove(min(droppable, key=lambda c: c.importance))
    room = {}
    for header in cut & {c.header for c in kept}:
        others = total() - needed[header]
        room[header] = max(needed[header], width - others)
    return kept, room


def as_yaml(value: Any) -> str:
    """`value` as YAML, its keys in their own order."""
    return yaml.safe_dump(value, sort_keys=False, allow_unicode=True, width=100)


def _plain(value: Any) -> str:
    if value is None or value == "":
        return "-"
    return str(value)


def when(value: Any) -> str:
    """An RFC 3339 instant as a table shows it: no fraction of a second."""
    if not value:
        return "-"
    return re.sub(r"\.\d+(?=Z$)", "", str(value))


def ago(value: Any) -> str:
    """An instant relative to now: "in 3 s", "2 min ago"."""
    if not value:
        return "-"
    at = parse_rfc3339(str(value))
    delta = (at - datetime.now(UTC)).total_seconds()
    span = human_duration(abs(delta) * 1000)
    return f"in {span}" if delta >= 0 else f"{span} ago"
