"""Instants at the boundary: aware UTC passes, other offsets are converted, naive is refused."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from cronledger.instants import require_utc


class _Stamp(datetime):
    """A datetime subclass, as some libraries hand out."""


def test_an_instant_already_in_utc_is_returned_as_it_is() -> None:
    at = datetime(2026, 5, 4, 10, 0, 0, 123456, tzinfo=UTC)

    assert require_utc(at) is at


@pytest.mark.parametrize(
    "given",
    [
        datetime(2026, 5, 4, 12, 0, tzinfo=timezone(timedelta(hours=2))),
        datetime(2026, 5, 4, 10, 0, tzinfo=timezone(timedelta(0), "Z")),  # UTC, not `UTC`
        _Stamp(2026, 5, 4, 10, 0, tzinfo=UTC),
    ],
)
def test_another_offset_or_a_subclass_comes_back_as_the_same_instant_in_utc(
    given: datetime,
) -> None:
    got = require_utc(given)

    assert got == datetime(2026, 5, 4, 10, 0, tzinfo=UTC)
    assert got.tzinfo is UTC


def test_a_naive_datetime_or_anything_else_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"^cursor is naive \(2026-05-04T10:00:00\)"):
        require_utc(datetime(2026, 5, 4, 10), "cursor")
    with pytest.raises(TypeError, match=r"^cursor must be a datetime, got str"):
        require_utc("2026-05-04T10:00:00Z", "cursor")  # type: ignore[arg-type]
