"""Walking a cron expression in a zone, in integer UTC seconds, without stepping instant by instant.

Fields match naive local wall-clock values; the zone is applied one constant-offset segment at
a time, where a local match converts exactly. That gives both DST rules: a wall time in a
spring-forward gap lies in no segment, so it never fires (it is not shifted), and one in a
fall-back repeat lies in two, so it fires at both instants. Segments are visited in UTC order,
so every walk ascends with no duplicates. Times of day and days are independent in cron: a
day's times are one sorted array and only days are searched, a partial day by bisection.
zoneinfo does not publish its transitions, so offsets are sampled every 6 hours and each
change bisected to the second (tzdata has no zone that changes and changes back within that).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from functools import cached_property, lru_cache
from itertools import islice, pairwise
from operator import itemgetter
from typing import Final
from zoneinfo import ZoneInfo

from cronledger.cron.expression import DayRule, days_in, has_consecutive_days, parse_expression

DAY: Final = 86_400
EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_EPOCH_ORDINAL: Final = date(1970, 1, 1).toordinal()
# The calendar's span, so a walk near either end of `datetime` cannot overflow.
FIRST_SECOND: Final = 0
LAST_SECOND: Final = (date(9998, 12, 31).toordinal() - _EPOCH_ORDINAL) * DAY
_OFFSET_PROBE: Final = 6 * 3600


@dataclass(frozen=True, slots=True)
class Survey:
    """A window's instants without listing them: how many, the first few and the last three."""

    count: int
    head: list[int]
    tail: list[int]

    def without_newest(self) -> Survey:
        """The same window short of its newest instant."""
        count = self.count - 1
        return Survey(count, self.head[:count], self.tail[:-1])

    def at(self, index: int) -> int:
        """The window's `index`th instant (from 0): one of the head or of the last three."""
        if index < len(self.head):
            return self.head[index]
        if not self.count - len(self.tail) <= index < self.count:
            raise IndexError(f"instant {index} of {self.count} was not kept")
        return self.tail[index - self.count]


@dataclass(frozen=True, slots=True)
class Bounded:
    """A schedule's instants in integer UTC seconds, windows inclusive: its calendar's, kept
    to `[lo, hi]` (`starts_at` to `ends_at`; a one-time `at` is `EVERY_SECOND` kept to its one
    second), so nothing outside is answered."""

    inner: Calendar
    lo: int
    hi: int

    def instants(self, lo: int, hi: int, cap: int) -> list[int]:
        return self.inner.instants(max(lo, self.lo), min(hi, self.hi), cap)

    def first(self, lo: int, hi: int) -> int | None:
        return self.inner.first(max(lo, self.lo), min(hi, self.hi))

    def survey(self, lo: int, hi: int, head: int) -> Survey:
        return self.inner.survey(max(lo, self.lo), min(hi, self.hi), head)


@lru_cache(maxsize=1024)
def calendar(expression: str, zone: str) -> Calendar:
    """The calendar of a valid expression in a zone, built once per process: thousands of
    channels share a handful of expressions, and a per-second one lists 86,400 times."""
    spec = parse_expression(expression.split())
    return Calendar(spec.times, spec.days, zone)


class Calendar:
    """The instants of one six-field expression in one zone, as integer UTC seconds: its times
    of day (ascending) on its days. Immutable once built, so schedules share them (`calendar`)."""

    def __init__(self, times: Sequence[int], days: DayRule | None, zone: str) -> None:
        self._times = times
        self._days = days
        self._zone = zone

    def gap_below(self, lo: int, hi: int, limit: int) -> tuple[int, str] | None:
        """The shortest time under `limit` seconds between two consecutive instants, with where
        it happens, or None; clock changes in `[lo, hi]` count. Two instants at one offset are
        their wall-clock distance apart (in one day or across midnight); only a pair straddling
        a clock change differs in UTC, so that pair is measured at each change."""
        found = list(self._wall_gaps)
        for change in clock_changes(self._zone, lo, hi):
            before = self.instants(change - limit, change - 1, limit)
            after = self.first(change, change + limit)
            if before and after is not None:
                iso = "%Y-%m-%dT%H:%M:%SZ"
                where = f"{instant(before[-1]):{iso}} to {instant(after):{iso}}, a clock change"
                found.append((after - before[-1], where))
        return min((gap for gap in found if gap[0] < limit), key=itemgetter(0), default=None)

    @cached_property
    def _wall_gaps(self) -> list[tuple[int, str]]:
        """The shortest wall-clock gap within a day, and the one across midnight when two days
        in a row can match: with where they happen, built once per calendar."""
        times = self._times
        found: list[tuple[int, str]] = []
        if len(times) > 1:
            gap, a = min((b - a, a) for a, b in pairwise(times))
            found.append((gap, f"{instant(a):%H:%M:%S} to {instant(a + gap):%H:%M:%S}"))
        if self._days is None or has_consecutive_days(self._days):
            last, first = instant(times[-1]), instant(times[0])
            found.append((DAY - times[-1] + times[0], f"{last:%H:%M:%S} to {first:%H:%M:%S}"))
        return found

    def instants(self, lo: int, hi: int, cap: int) -> list[int]:
        """The first `cap` instants in `[lo, hi]`, ascending."""
        return list(islice(self._walk(lo, hi), max(cap, 0)))

    def first(self, lo: int, hi: int) -> int | None:
        """The first instant in `[lo, hi]`, or None."""
        return next(self._walk(lo, hi), None)

    def survey(self, lo: int, hi: int, head: int) -> Survey:
        """Count `[lo, hi]` exactly, keeping only its first `head` instants and its last three."""
        times = self._times
        count = 0
        last: deque[int] = deque(maxlen=3)
        for base, i, j in self._runs(lo, hi):
            count += j - i
            last.extend(base + times[k] for k in range(max(i, j - 3), j))
        return Survey(count, self.instants(lo, hi, head), list(last))

    def _walk(self, lo: int, hi: int) -> Iterator[int]:
        times = self._times
        return (base + times[k] for base, i, j in self._runs(lo, hi) for k in range(i, j))

    def _runs(self, lo: int, hi: int) -> Iterator[tuple[int, int, int]]:
        """Ascending runs `(base, i, j)`, the instants `base + _times[k]` for `i <= k < j`: each
        the part of one local day that lies in one constant-offset segment."""
        lo, hi = max(lo, FIRST_SECOND), min(hi, LAST_SECOND)
        if lo > hi:
            return
        times = self._times
        for seg_lo, seg_hi, offset in _segments(self._zone, lo, hi):
            local_lo, local_hi = seg_lo + offset, seg_hi + offset
            first_day, last_day = local_lo // DAY, local_hi // DAY
            day = _next_day(self._days, first_day, last_day)
            while day is not None:
                midnight = day * DAY
                i = bisect_left(times, local_lo - midnight) if day == first_day else 0
                j = bisect_right(times, local_hi - midnight) if day == last_day else len(times)
                if i < j:
                    yield midnight - offset, i, j
                day = _next_day(self._days, day + 1, last_day)


# Every second of every day (a `range`, so it lists nothing), for one-time schedules.
EVERY_SECOND: Final = Calendar(range(DAY), None, "UTC")


def _next_day(rule: DayRule | None, day: int, last_day: int) -> int | None:
    """The first local day (days since 1970-01-01) in `[day, last_day]` that `rule` matches.
    Searching no further than the segment's last day keeps a walk linear in its months."""
    if rule is None:
        return day if day <= last_day else None
    start = date.fromordinal(_EPOCH_ORDINAL + day)
    year, month, day_of_month = start.year, start.month, start.day
    while (month_start := date(year, month, 1).toordinal() - _EPOCH_ORDINAL) <= last_day:
        matching = days_in(rule, year, month)
        i = bisect_left(matching, day_of_month)
        if i < len(matching):
            found = month_start + matching[i] - 1
            return found if found <= last_day else None
        year, month, day_of_month = year + month // 12, month % 12 + 1, 1
    return None


def window(starts_at: datetime | None, ends_at: datetime | None) -> tuple[int, int]:
    """The UTC seconds from `starts_at` to `ends_at`, inclusive; unbounded where None."""
    lo = FIRST_SECOND if starts_at is None else ceil_seconds(starts_at)
    hi = LAST_SECOND if ends_at is None else floor_seconds(ends_at)
    return lo, hi


def clock_changes(zone: str, lo: int, hi: int) -> list[int]:
    """Every UTC second in `[lo, hi]` at which `zone` changes its offset."""
    years = range(_year_of(max(lo, FIRST_SECOND)), _year_of(min(hi, LAST_SECOND)) + 1)
    return [at for year in years for at, _offset in _transitions(zone, year) if lo <= at <= hi]


def _segments(zone: str, lo: int, hi: int) -> Iterator[tuple[int, int, int]]:
    """Split `[lo, hi]` (UTC seconds) into ascending `(start, end, offset)` pieces of constant
    offset. Pieces also end at every UTC new year, so a walk that stops early never computes
    transitions for years it does not reach."""
    start, offset = lo, _offset_at(zone, lo)
    for year in range(_year_of(lo), _year_of(hi) + 1):
        for at, new_offset in _transitions(zone, year):
            if start < at <= hi:
                yield start, at - 1, offset
                start, offset = at, new_offset
        end = min(hi, _year_start(year + 1) - 1)
        if start <= end:
            yield start, end, offset
            start = end + 1


@lru_cache(maxsize=4096)
def _transitions(zone: str, year: int) -> tuple[tuple[int, int], ...]:
    """Every `(utc_second, new_offset)` at which `zone` changes offset, within
    `(start of year, start of next year]`. UTC never changes, so it is not sampled."""
    if zone == "UTC":
        return ()
    found: list[tuple[int, int]] = []
    start, end = _year_start(year), _year_start(year + 1)
    offset = _offset_at(zone, start)
    for t in range(start, end, _OFFSET_PROBE):
        probe = min(t + _OFFSET_PROBE, end)
        while _offset_at(zone, probe) != offset:
            span = range(t, probe + 1)  # offset at t, another at probe: bisect to the change
            t = span[bisect_left(span, True, key=lambda s: _offset_at(zone, s) != offset)]
            offset = _offset_at(zone, t)
            found.append((t, offset))
    return tuple(found)


def _offset_at(zone: str, utc_second: int) -> int:
    offset = datetime.fromtimestamp(utc_second, ZoneInfo(zone)).utcoffset()
    assert offset is not None  # a ZoneInfo always has one
    return seconds(offset)


@lru_cache(maxsize=16_384)
def _year_start(year: int) -> int:
    return (date(year, 1, 1).toordinal() - _EPOCH_ORDINAL) * DAY


def _year_of(utc_second: int) -> int:
    return date.fromordinal(_EPOCH_ORDINAL + utc_second // DAY).year


def seconds(delta: timedelta) -> int:
    """Whole seconds in `delta`, rounded down."""
    return delta.days * DAY + delta.seconds


def floor_seconds(value: datetime) -> int:
    """The UTC second at or before an aware `value`."""
    return seconds(value - EPOCH)


def ceil_seconds(value: datetime) -> int:
    """The UTC second at or after an aware `value`."""
    delta = value - EPOCH
    return seconds(delta) + (1 if delta.microseconds else 0)


def instant(second: int) -> datetime:
    """An aware UTC datetime for a UTC second."""
    return EPOCH + timedelta(seconds=second)
