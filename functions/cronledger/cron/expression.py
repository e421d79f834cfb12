"""The cron expression language: six fields read with their standard (Vixie/cronie) meaning.

croniter stays the parser of record (an expression it refuses is refused), but its reading has
quirks a schedule must not inherit (`5-5` as the whole field, `NOV-FEB` wrapping, `15W` beside
a restricted weekday as an AND), so the fields are read here into value sets and one day rule
(the README's table gives each form's meaning). When both day fields are restricted a day
matches if **either** does. A form without one plain meaning (such as a backwards range, or
`*/S` in one day field beside a restricted other, which Vixie reads as AND and most crons as
OR) is refused with a message saying how to write it.
"""

from __future__ import annotations

import calendar
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from functools import lru_cache
from itertools import pairwise, permutations
from typing import Final


class ExpressionRefused(ValueError):
    """A field has no plain meaning; the message names it and says how to write it instead."""


@dataclass(frozen=True, slots=True)
class _Field:
    name: str
    low: int
    high: int
    carry: str  # the larger unit a step cannot carry over into
    names: tuple[str, ...] = ()  # names[i] is the value low + i
    every: int | None = None  # the highest value `*` covers, when not `high`

    @property
    def top(self) -> int:
        return self.high if self.every is None else self.every

    @property
    def allowed(self) -> str:
        spelled = f" or {self.names[0]}-{self.names[-1]}" if self.names else ""
        return f"{self.low}-{self.high}{spelled}"


SECOND: Final = _Field("second", 0, 59, "minute")
MINUTE: Final = _Field("minute", 0, 59, "hour")
HOUR: Final = _Field("hour", 0, 23, "day")
DAY_OF_MONTH: Final = _Field("day-of-month", 1, 31, "month")
# Spelled out: `calendar.month_abbr` follows the process's locale.
MONTHS: Final = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
MONTH: Final = _Field("month", 1, 12, "year", MONTHS)
# 0-7: both ends are Sunday (Vixie cron); the names stop at SAT, as everywhere. `*` is Sunday
# to Saturday; 7 (Sunday again) only when written.
WEEKDAYS: Final = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
DAY_OF_WEEK: Final = _Field("day-of-week", 0, 7, "week", WEEKDAYS, every=6)
FIELDS: Final = (SECOND, MINUTE, HOUR, DAY_OF_MONTH, MONTH, DAY_OF_WEEK)


@dataclass(frozen=True, slots=True)
class DaysOfMonth:
    """A restricted day-of-month: plain days, the last day (`L`), a nearest weekday (`NW`)."""

    days: frozenset[int]
    last: bool = False
    nearest_weekday: int | None = None


@dataclass(frozen=True, slots=True)
class DaysOfWeek:
    """A restricted day-of-week (0 = Sunday): plain weekdays, `D#N` and `LD`."""

    weekdays: frozenset[int]
    nth: frozenset[tuple[int, int]] = frozenset()  # (weekday, n)
    last: frozenset[int] = frozenset()


@dataclass(frozen=True, slots=True)
class DayRule:
    """Which days of which months match. `None` for a day field means unrestricted."""

    months: frozenset[int]
    of_month: DaysOfMonth | None
    of_week: DaysOfWeek | None


@dataclass(frozen=True, slots=True)
class CronSpec:
    """An expression's meaning: its times of day in seconds, ascending, and the day rule
    (`None` when every day of every month matches)."""

    times: Sequence[int]
    days: DayRule | None


def parse_expression(fields: Sequence[str]) -> CronSpec:
    """The meaning of six fields (second minute hour day-of-month month day-of-week), or
    `ExpressionRefused` naming the first field that has no plain one."""
    second, minute, hour, day_of_month, month, day_of_week = fields
    months = frozenset(_values(MONTH, month))
    day_fields = ((DAY_OF_MONTH, day_of_month), (DAY_OF_WEEK, day_of_week))
    for (field, text), (other, other_text) in permutations(day_fields):
        if text.startswith("*/") and other_text not in ("*", "?"):
            spelled = f"{field.low}-{field.top}{text[1:]}"
            raise ExpressionRefused(
                f"the {field.name} field `{text}` beside a restricted {other.name} "
                f"(`{other_text}`) is read differently by different crons (Vixie cron: both "
                f"must match; others: either): write `{spelled}` to fire when either matches"
            )
    of_month = None if day_of_month in ("*", "?") else _days_of_month(day_of_month)
    of_week = None if day_of_week in ("*", "?") else _days_of_week(day_of_week)
    every_day = of_month is None and of_week is None and len(months) == 12
    seconds = sorted(_values(SECOND, second))
    minutes = sorted(_values(MINUTE, minute))
    hours = sorted(_values(HOUR, hour))
    return CronSpec(
        times=tuple(h * 3600 + m * 60 + s for h in hours for m in minutes for s in seconds),
        days=None if every_day else DayRule(months, of_month, of_week),
    )


def _values(field: _Field, text: str) -> set[int]:
    """A plain field (no `L`, `W` or `#`) as its set of values."""
    if text == "?":
        raise ExpressionRefused(
            f"the {field.name} field `?`: `?` means 'no restriction' only in the day-of-month "
            "and day-of-week fields; write `*`"
        )
    return set[int]().union(*(_item_values(field, text, item) for item in _items(field, text)))


def _items(field: _Field, text: str) -> list[str]:
    items = text.split(",")
    if len(items) > 1 and "*" in items:
        raise ExpressionRefused(
            f"the {field.name} field `{text}`: `*` already matches every value, so it cannot "
            "be one item of a list: write `*` alone, or list the values"
        )
    if any(not item for item in items):
        raise ExpressionRefused(f"the {field.name} field `{text}` has an empty list item")
    return items


def _item_values(field: _Field, text: str, item: str) -> set[int]:
    """One list item (`*`, `*/S`, `A`, `A-B`, `A-B/S`, `A/S`) as its values."""
    base, slash, step_text = item.partition("/")
    step = _step(field, text, step_text) if slash else 1
    if base == "*":
        low, high = field.low, field.top
    elif "-" in base:
        start, _, end = base.partition("-")
        low = _value(field, text, start)
        high = 31 if field is DAY_OF_MONTH and end.upper() == "L" else _value(field, text, end)
        if low > high:
            raise ExpressionRefused(
                f"the {field.name} field `{text}`: the range `{base}` runs backwards; cron "
                f"ranges do not wrap, so write `{_wrapped(field, low, high)}`"
            )
    else:
        low = high = _value(field, text, base)
        if slash:
            if field is DAY_OF_WEEK:
                raise ExpressionRefused(
                    f"the {field.name} field `{text}`: `{item}` (a start and a step) has no "
                    f"agreed meaning in day-of-week; write the range, e.g. `{low}-6/{step_text}`"
                )
            high = field.high
    return {v % 7 if field is DAY_OF_WEEK else v for v in range(low, high + 1, step)}


def _step(field: _Field, text: str, step_text: str) -> int:
    span = field.high - field.low
    if not step_text.isascii() or not step_text.isdigit() or int(step_text) == 0:
        raise ExpressionRefused(
            f"the {field.name} field `{text}`: a step is a whole number from 1 to {span}"
        )
    step = int(step_text)
    if step > span:
        raise ExpressionRefused(
            f"the {field.name} field `{text}`: a step of {step} is longer than the field "
            f"({field.allowed}), so it would only ever hit the first value; write that value, "
            f"or a step of at most {span} (a step never carries over into the next {field.carry})"
        )
    return step


def _value(field: _Field, text: str, token: str) -> int:
    upper = token.upper()
    if upper in field.names:
        return field.low + field.names.index(upper)
    if token.isascii() and token.isdigit():
        value = int(token)
        if field.low <= value <= field.high:
            return value
        raise ExpressionRefused(
            f"the {field.name} field `{text}`: {value} is out of range; allowed: {field.allowed}"
        )
    raise ExpressionRefused(
        f"the {field.name} field `{text}`: `{token}` is not a value; allowed: {field.allowed}"
    )


def _wrapped(field: _Field, low: int, high: int) -> str:
    if field is DAY_OF_WEEK and high == 0:  # to Sunday: 7 is Sunday too (`SAT-SUN` is `6-7`)
        return f"{low}-7"
    first = f"{low}-{field.top}" if low < field.top else f"{low}"
    second = f"{field.low}-{high}" if high > field.low else f"{field.low}"
    return f"{first},{second}"


def _days_of_month(text: str) -> DaysOfMonth:
    upper = text.upper()
    if "W" in upper:
        number = upper.removesuffix("W")
        if not number.isascii() or not number.isdigit():
            raise ExpressionRefused(
                f"the day-of-month field `{text}`: `W` follows one day number, alone in the "
                "field (`15W`: the weekday nearest the 15th)"
            )
        return DaysOfMonth(frozenset(), nearest_weekday=_value(DAY_OF_MONTH, text, number))
    days: set[int] = set()
    last = False
    for item in _items(DAY_OF_MONTH, text):
        if item.upper() == "L":
            last = True
        elif item.upper().startswith("L"):
            raise ExpressionRefused(
                f"the day-of-month field `{text}`: `L` is the last day of the month, alone or "
                "as the end of a range (`15-L`); offsets such as `L-3` are not supported"
            )
        else:
            days |= _item_values(DAY_OF_MONTH, text, item)
    return DaysOfMonth(frozenset(days), last=last)


def _days_of_week(text: str) -> DaysOfWeek:
    weekdays: set[int] = set()
    nth: set[tuple[int, int]] = set()
    last: set[int] = set()
    for item in _items(DAY_OF_WEEK, text):
        upper = item.upper()
        if "#" in upper:
            day, _, n = upper.partition("#")
            if not n.isascii() or not n.isdigit() or not 1 <= int(n) <= 5:
                raise ExpressionRefused(
                    f"the day-of-week field `{text}`: in `{item}` the week of the month after "
                    "`#` is 1 to 5 (`FRI#2`: the second Friday)"
                )
            if "-" in day or "/" in day or day in ("*", "L"):
                raise ExpressionRefused(
                    f"the day-of-week field `{text}`: `#` follows one weekday; list each one "
                    "(`MON#2,TUE#2`)"
                )
            nth.add((_value(DAY_OF_WEEK, text, day) % 7, int(n)))
        elif upper.startswith("L") and len(upper) > 1 and upper[1:].isdigit():
            last.add(_value(DAY_OF_WEEK, text, upper[1:]) % 7)
        elif "L" in upper and upper not in DAY_OF_WEEK.names:
            raise ExpressionRefused(
                f"the day-of-week field `{text}`: the last weekday of the month is written "
                "`L` then the weekday's number (`L5`: the last Friday); `L` alone, `5L` and "
                "`LFRI` are not read"
            )
        else:
            weekdays |= _item_values(DAY_OF_WEEK, text, item)
    if weekdays and (nth or last):
        raise ExpressionRefused(
            f"the day-of-week field `{text}` mixes plain weekdays with `#` or `L` forms, which "
            "croniter (the parser) refuses; use `#`/`L` forms only, or two channels"
        )
    return DaysOfWeek(frozenset(weekdays), frozenset(nth), frozenset(last))


@lru_cache(maxsize=1024)
def has_consecutive_days(rule: DayRule) -> bool:
    """Whether two days in a row ever match, looked for over 28 years from 2000: a leap century
    year, and every weekday on every date of every month."""
    ordinals = (
        date(year, month, day).toordinal()
        for year in range(2000, 2028)
        for month in range(1, 13)
        for day in days_in(rule, year, month)
    )
    return any(b == a + 1 for a, b in pairwise(ordinals))


@lru_cache(maxsize=65_536)
def days_in(rule: DayRule, year: int, month: int) -> tuple[int, ...]:
    """The matching days of one month, ascending. Cached: a walk asks for the same months
    again and again, and thousands of channels share a handful of rules."""
    if month not in rule.months:
        return ()
    first_weekday, length = calendar.monthrange(year, month)  # Monday is 0 here
    nearest = _nearest_weekday(rule.of_month, year, month, length)
    of_month, of_week = rule.of_month, rule.of_week
    matching: list[int] = []
    for day in range(1, length + 1):
        weekday = (first_weekday + day) % 7  # Sunday is 0
        by_month = of_month is not None and (
            day in of_month.days or (of_month.last and day == length) or day == nearest
        )
        by_week = of_week is not None and (
            weekday in of_week.weekdays
            or (weekday, (day - 1) // 7 + 1) in of_week.nth
            or (weekday in of_week.last and day + 7 > length)
        )
        if (of_month is None and of_week is None) or by_month or by_week:
            matching.append(day)
    return tuple(matching)


def _nearest_weekday(of_month: DaysOfMonth | None, year: int, month: int, length: int) -> int:
    """The day `NW` means this month, or 0 when the month has no day N."""
    day = None if of_month is None else of_month.nearest_weekday
    if day is None or day > length:
        return 0
    weekday = date(year, month, day).weekday()  # Monday is 0
    if weekday == 5:  # Saturday: the Friday before, unless that leaves the month
        return day - 1 if day > 1 else day + 2
    if weekday == 6:  # Sunday: the Monday after, unless that leaves the month
        return day + 1 if day < length else day - 2
    return day
