"""Lists read a page at a time by key, newest first, with a total counted only so far.

A page's `next` is the key (instant, id) of its last row, and the next page starts strictly
below it: one index range scan, as cheap deep as shallow, and rows written between reads land
above the pages read instead of shifting them. The total is counted up to `TOTAL_BOUND` unless
asked for exactly; an offset past the bound is refused, naming `after`.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, TypeVar

import sqlalchemy as sa

from cronledger.errors import FieldError, ValidationFailed
from cronledger.instants import require_utc
from cronledger.ledger.models import Page, PageRequest

T = TypeVar("T")

#: Matching rows counted before the total is reported as "more than" this; also the
#: largest offset accepted.
TOTAL_BOUND = 10_000
MAX_PAGE_SIZE = 1000


def given(
    *tests: tuple[Callable[[Any, Any], sa.ColumnElement[bool]], sa.ColumnElement[Any], Any],
) -> list[sa.ColumnElement[bool]]:
    """A list's filters: `op(column, value)` for each test whose value is given (not None)."""
    return [op(column, value) for op, column, value in tests if value is not None]


def read_page(
    conn: sa.Connection,
    table: sa.Table,
    conditions: Sequence[sa.ColumnElement[bool]],
    order: tuple[sa.Column[Any], sa.Column[Any]],
    request: PageRequest,
    of: Callable[[sa.Row[Any]], T],
) -> Page[T]:
    """The page of `table`'s rows matching `conditions`, each made by `of`, newest first by
    `order` (an instant and a unique id). ValidationFailed for a bad offset or key."""
    limit = min(max(request.limit, 1), MAX_PAGE_SIZE)
    offset = _checked_offset(request)
    stmt = sa.select(table).where(*conditions).offset(offset)
    rows, next_key = keyed_rows(conn, stmt, order, limit, request.after)
    total, exact = count_matching(conn, table, conditions, exact=request.exact_total)
    return Page([of(row) for row in rows], total, limit, offset, next_key, exact)


def keyed_rows(
    conn: sa.Connection,
    stmt: sa.Select[Any],
    order: tuple[sa.Column[Any], sa.Column[Any]],
    limit: int,
    after: str | None,
) -> tuple[list[sa.Row[Any]], str | None]:
    """Up to `limit` rows of `stmt`, newest first by `order`, below the key `after` if given;
    and the next page's key (None on the last page)."""
    at, row_id = order
    if after is not None:
        stmt = stmt.where(below(order, *read_key(after)))
    rows = list(conn.execute(stmt.order_by(at.desc(), row_id.desc()).limit(limit + 1)))
    if len(rows) <= limit or limit < 1:
        return rows[:limit], None
    last = rows[limit - 1]._mapping
    return rows[:limit], page_key(last[at.name], last[row_id.name])


def count_matching(
    conn: sa.Connection,
    table: sa.Table,
    conditions: Sequence[sa.ColumnElement[bool]],
    *,
    exact: bool = False,
) -> tuple[int, bool]:
    """(rows matching, whether exact): unless `exact`, counted only up to `TOTAL_BOUND`."""
    matching = sa.select(sa.literal(1).label("one")).select_from(table).where(*conditions)
    if not exact:
        matching = matching.limit(TOTAL_BOUND + 1)
    counted = conn.execute(sa.select(sa.func.count()).select_from(matching.subquery()))
    total = int(counted.scalar_one())
    if exact or total <= TOTAL_BOUND:
        return total, True
    return TOTAL_BOUND, False


def below(order: tuple[sa.Column[Any], sa.Column[Any]], at: datetime, row_id: str) -> Any:
    """Rows strictly after the key in newest-first order: a row comparison, one index range."""
    at_column, id_column = order
    return sa.tuple_(at_column, id_column) < sa.tuple_(
        sa.bindparam(None, require_utc(at), type_=at_column.type),
        sa.bindparam(None, row_id, type_=id_column.type),
    )


def page_key(at: datetime, row_id: str) -> str:
    """The opaque `next` naming a row: its instant and id, URL-safe."""
    raw = f"{require_utc(at).isoformat()}|{row_id}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def read_key(key: str) -> tuple[datetime, str]:
    try:
        raw = base64.urlsafe_b64decode(key + "=" * (-len(key) % 4)).decode()
        at, row_id = raw.split("|", 1)
        return require_utc(datetime.fromisoformat(at)), row_id
    except (binascii.Error, UnicodeDecodeError, ValueError) as exc:
        problem = FieldError(
            "after", "invalid", "is not a page key; pass the `next` of the page before"
        )
        raise ValidationFailed([problem]) from exc


def _checked_offset(request: PageRequest) -> int:
    offset = max(request.offset, 0)
    if offset > TOTAL_BOUND:
        problem = FieldError(
            "offset",
            "too_large",
            f"offsets are accepted up to {TOTAL_BOUND}; to read further, pass each "
            "page's `next` as `after` for the page after it",
        )
    elif offset and request.after is not None:
        problem = FieldError(
            "offset",
            "invalid",
            "pass either `offset` or `after` (the `next` of the page before), not both",
        )
    else:
        return offset
    raise ValidationFailed([problem])
