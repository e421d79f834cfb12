"""Every datetime that crosses a module boundary is aware UTC: a naive one is refused, since
guessing a zone is how a scheduler fires an hour early. RFC 3339 with `Z` is the text form."""

from __future__ import annotations

from datetime import UTC, datetime


def require_utc(value: datetime, name: str = "datetime") -> datetime:
    """Return `value` converted to UTC; refuse a naive datetime with a clear error."""
    if type(value) is datetime and value.tzinfo is UTC:
        return value  # already UTC: most are (a batch of ten thousand rows checks forty thousand)
    if not isinstance(value, datetime):
        raise TypeError(f"{name} must be a datetime, got {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(
            f"{name} is naive ({value.isoformat()}); pass a timezone-aware datetime, "
            "e.g. datetime(..., tzinfo=UTC)"
        )
    return value.astimezone(UTC)


def to_rfc3339(value: datetime) -> str:
    """`2026-09-01T02:15:00Z`, with microseconds only when there are any."""
    utc = require_utc(value)
    text = utc.replace(tzinfo=None).isoformat()
    return f"{text}Z"


def parse_rfc3339(text: str) -> datetime:
    """Parse an RFC 3339 timestamp that carries an offset (`Z` or `+hh:mm`) into aware UTC."""
    try:
        parsed = datetime.fromisoformat(text.strip().replace("z", "Z"))
    except ValueError as exc:
        raise ValueError(f"not an RFC 3339 timestamp: {text!r}") from exc
    if parsed.tzinfo is None:
        raise ValueError(f"timestamp {text!r} has no offset; add 'Z' for UTC")
    try:
        return parsed.astimezone(UTC)
    except OverflowError:  # 9999-12-31T23:00:00-02:00 is in year 10000 in UTC
        raise ValueError(f"timestamp {text!r} is outside years 1..9999 in UTC") from None


def human_duration(millis: float | None) -> str:
    """Milliseconds as a person reads them: "6 ms", "3.2 s", "4.5 min", "2 h", "2 d"."""
    if millis is None:
        return "-"
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("min", 60_000)):
        if millis >= size:
            amount = millis / size
            text = f"{amount:.0f}" if amount >= 10 else f"{amount:.1f}".removesuffix(".0")
            return f"{text} {unit}"
    if millis >= 1000:
        return f"{millis / 1000:.0f} s" if millis >= 10_000 else f"{millis / 1000:.1f} s"
    return f"{millis:.0f} ms"
