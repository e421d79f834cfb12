"""An independent cron oracle: what standard (Vixie/cronie) cron means, by brute force.

Written without croniter and without any cronledger code, so that comparing the compiler with
it can find the parsing library's quirks as well as the compiler's. It is the slow, obvious
algorithm: for every local calendar day near the window, decide whether the day matches by
looking at that one date; for every time of day the fields list, build the wall-clock time,
ask zoneinfo for its UTC instant under both folds, and keep the ones that really show that
wall time (a spring-forward gap has none, a fall-back repeat has two).

The day rules are stated as the definitions, not as the compiler computes them: `15W` is the
weekday of the same month closest to the 15th, `FRI#2` is a Friday with exactly one Friday
before it in the month, `L5` a Friday with no Friday after it in the month. Day-of-month and
day-of-week combine as Vixie cron does: if either field starts with `*` (or is `?`), both must
match; otherwise either may.
"""

from __future__ import annotations

import calendar
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_WEEKDAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")


def _number(token: str, names: tuple[str, ...], first: int) -> int:
    if token.lower() in names:
        return names.index(token.lower()) + first
    return int(token)


def _plain(text: str, low: int, high: int, names: tuple[str, ...] = (), first: int = 0) -> set[int]:
    """`*`, `A`, `A-B`, `*/S`, `A-B/S`, `A/S` and lists of them, as a set of values."""
    values: set[int] = set()
    for part in text.split(","):
        span, _, step_text = part.partition("/")
        step = int(step_text) if step_text else 1
        if span in ("*", "?"):
            a, b = low, high
        elif "-" in span:
            a, b = (_number(t, names, first) for t in span.split("-"))
        else:
            a = _number(span, names, first)
            b = high if step_text else a
        values.update(range(a, b + 1, step))
    return values


class Oracle:
    """One six-field expression (second minute hour day-of-month month day-of-week)."""

    def __init__(self, expression: str) -> None:
        second, minute, hour, dom, month, dow = expression.split()
        self.seconds = sorted(_plain(second, 0, 59))
        self.minutes = sorted(_plain(minute, 0, 59))
        self.hours = sorted(_plain(hour, 0, 23))
        self.months = _plain(month, 1, 12, _MONTHS, 1)
        self.dom, self.dow = dom, dow

    # --- days -------------------------------------------------------------------------------

    def day_matches(self, day: date) -> bool:
        if day.month not in self.months:
            return False
        dom, dow = self.dom, self.dow
        dom_star = dom.startswith("*") or dom == "?"
        dow_star = dow.startswith("*") or dow == "?"
        by_month = _day_of_month_matches(dom, day)
        by_week = _day_of_week_matches(dow, day)
        if dom_star or dow_star:
            return by_month and by_week
        return by_month or by_week

    # --- instants ---------------------------------------------------------------------------

    def instants_on(self, day: date, zone: ZoneInfo) -> list[datetime]:
        """Every UTC instant at which the wall clock in `zone` shows a matching time of `day`."""
        found: set[datetime] = set()
        for h in self.hours:
            for m in self.minutes:
                for s in self.seconds:
                    wall = datetime(day.year, day.month, day.day, h, m, s)
                    for fold in (0, 1):
                        utc = wall.replace(tzinfo=zone, fold=fold).astimezone(UTC)
                        if utc.astimezone(zone).replace(tzinfo=None) == wall:
                            found.add(utc)
        return sorted(found)

    def fires_in(self, zone: str, start: datetime, end: datetime) -> list[datetime]:
        """Every instant in `[start, end]`, ascending. Local dates lie within a day of UTC ones."""
        z = ZoneInfo(zone)
        found: list[datetime] = []
        day = start.date() - timedelta(days=1)
        while day <= end.date() + timedelta(days=1):
            if self.day_matches(day):
                found.extend(t for t in self.instants_on(day, z) if start <= t <= end)
            day += timedelta(days=1)
        return sorted(found)

    def next_after(self, zone: str, t: datetime, within: timedelta) -> datetime | None:
        """The first instant strictly after `t`, looking no further than `within`."""
        z = ZoneInfo(zone)
        day = t.date() - timedelta(days=1)
        best: datetime | None = None
        while day <= (t + within).date() + timedelta(days=1):
            if best is not None and day > best.date() + timedelta(days=1):
                break  # a later local day cannot hold an earlier instant than a day's slack
            if self.day_matches(day):
                later = [i for i in self.instants_on(day, z) if t < i <= t + within]
                if later and (best is None or later[0] < best):
                    best = later[0]
            day += timedelta(days=1)
        return best


def _day_of_month_matches(text: str, day: date) -> bool:
    length = calendar.monthrange(day.year, day.month)[1]
    for part in text.split(","):
        upper = part.upper()
        if upper == "L":
            if day.day == length:
                return True
        elif upper.endswith("W"):
            if day == _nearest_weekday(day.year, day.month, int(upper[:-1])):
                return True
        elif "-L" in upper:
            span, _, step = upper.partition("/")
            start = int(span.split("-")[0])
            if day.day in range(start, length + 1, int(step or 1)):
                return True
        elif day.day in _plain(part, 1, 31):
            return True
    return False


def _nearest_weekday(year: int, month: int, n: int) -> date | None:
    """The Monday-to-Friday day of the month closest to day `n`; none if there is no day `n`."""
    length = calendar.monthrange(year, month)[1]
    if n > length:
        return None
    weekdays = [
        date(year, month, d) for d in range(1, length + 1) if date(year, month, d).weekday() < 5
    ]
    return min(weekdays, key=lambda d: abs(d.day - n))


def _day_of_week_matches(text: str, day: date) -> bool:
    weekday = day.isoweekday() % 7  # Sunday is 0
    for part in text.split(","):
        if "#" in part:
            name, _, n = part.partition("#")
            wanted = _number(name, _WEEKDAYS, 0) % 7
            before = sum(
                1
                for d in range(1, day.day)
                if date(day.year, day.month, d).isoweekday() % 7 == wanted
            )
            if weekday == wanted and before == int(n) - 1:
                return True
        elif part.upper().startswith("L"):
            wanted = int(part[1:]) % 7
            if weekday == wanted and (day + timedelta(days=7)).month != day.month:
                return True
        elif weekday in {v % 7 for v in _plain(part, 0, 7, _WEEKDAYS, 0)}:
            return True
    return False
