"""The expression language, form by form: what each accepted form means, and how each refused
one is refused (SPEC §1.4a). The table of forms in docs/concepts/schedules.md is this file in prose.

Expected instants are written out in UTC from a calendar, not from the code.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from cronledger.cron import ScheduleInvalid, compile_schedule

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)  # type: ignore[arg-type, misc]


def fires(expression: str, start: datetime, end: datetime) -> list[datetime]:
    s = compile_schedule({"schedule": expression}, "c1", now=NOW)
    return s.fires_in(start, end, 100)


def days_fired(expression: str, year: int, month: int) -> list[int]:
    """The days of a month the expression fires on (it fires once a day at most)."""
    start = utc(year, month, 1)
    end = utc(year + month // 12, month % 12 + 1, 1)
    return [t.day for t in fires(expression, start, end) if t < end]


@pytest.mark.parametrize(
    ("expression", "month", "days"),
    [
        # An equal range is its one value, never the whole field (croniter 7 widens it).
        pytest.param("0 0 12 * * 5-5", (2026, 5), [1, 8, 15, 22, 29], id="5-5 is Friday"),
        pytest.param("0 0 12 * * SUN-SUN", (2026, 5), [3, 10, 17, 24, 31], id="SUN-SUN"),
        pytest.param("0 0 12 * * 0-0", (2026, 5), [3, 10, 17, 24, 31], id="0-0"),
        pytest.param("0 0 12 * * 7-7", (2026, 5), [3, 10, 17, 24, 31], id="7-7"),
        pytest.param("0 0 12 3-3 * *", (2026, 5), [3], id="3-3"),
        pytest.param("0 0 12 1 MAY-MAY *", (2026, 5), [1], id="MAY-MAY in May"),
        pytest.param("0 0 12 1 MAY-MAY *", (2026, 6), [], id="MAY-MAY not in June"),
        # 7 is Sunday too, alone and at the end of a range.
        pytest.param("0 0 12 * * 7", (2026, 5), [3, 10, 17, 24, 31], id="7 is Sunday"),
        pytest.param(
            "0 0 12 * * 5-7",
            (2026, 5),
            [1, 2, 3, 8, 9, 10, 15, 16, 17, 22, 23, 24, 29, 30, 31],
            id="5-7",
        ),
        pytest.param(
            "0 0 12 * * 1-7/2",
            (2026, 5),
            [1, 3, 4, 6, 8, 10, 11, 13, 15, 17, 18, 20, 22, 24, 25, 27, 29, 31],
            id="1-7/2: Mon Wed Fri Sun",
        ),
        pytest.param(
            "0 0 12 * * */3",
            (2026, 5),
            [2, 3, 6, 9, 10, 13, 16, 17, 20, 23, 24, 27, 30, 31],
            id="*/3: Sun Wed Sat",
        ),
        pytest.param(
            "0 0 12 * * MON-FRI/2",
            (2026, 5),
            [1, 4, 6, 8, 11, 13, 15, 18, 20, 22, 25, 27, 29],
            id="MON-FRI/2",
        ),
        pytest.param(
            "0 0 12 * * mon,Wed", (2026, 5), [4, 6, 11, 13, 18, 20, 25, 27], id="names in any case"
        ),
        # Steps from a start run to the field's end.
        pytest.param("0 0 12 5/10 * *", (2026, 5), [5, 15, 25], id="5/10"),
        pytest.param("0 0 12 1 FEB/3 *", (2026, 5), [1], id="FEB/3 is Feb May Aug Nov"),
        pytest.param("0 0 12 1 FEB/3 *", (2026, 6), [], id="FEB/3 not in June"),
        # L, A-L and NW in day-of-month.
        pytest.param("0 0 12 L * *", (2028, 2), [29], id="L in a leap February"),
        pytest.param("0 0 12 1,L * *", (2026, 4), [1, 30], id="1,L"),
        pytest.param("0 0 12 25-L * *", (2026, 2), [25, 26, 27, 28], id="25-L"),
        pytest.param("0 0 12 20-L/5 * *", (2026, 1), [20, 25, 30], id="20-L/5"),
        pytest.param("0 0 12 15W * *", (2026, 2), [16], id="15W: Sunday 15th moves to Monday"),
        pytest.param("0 0 12 15W * *", (2026, 8), [14], id="15W: Saturday 15th moves to Friday"),
        pytest.param("0 0 12 1W * *", (2026, 8), [3], id="1W: Saturday 1st moves to Monday 3rd"),
        pytest.param("0 0 12 31W * *", (2026, 5), [29], id="31W: Sunday 31st moves to Friday"),
        pytest.param("0 0 12 31W * *", (2026, 4), [], id="31W: April has no 31st"),
        # D#N and LD in day-of-week.
        pytest.param("0 0 12 * * FRI#2", (2026, 5), [8], id="FRI#2"),
        pytest.param("0 0 12 * * 5#5", (2026, 5), [29], id="5#5 in a month with five Fridays"),
        pytest.param("0 0 12 * * 5#5", (2026, 6), [], id="5#5 in a month with four"),
        pytest.param("0 0 12 * * 7#1", (2026, 5), [3], id="7#1 is the first Sunday"),
        pytest.param("0 0 12 * * L5", (2026, 5), [29], id="L5 is the last Friday"),
        pytest.param("0 0 12 * * MON#1,L5", (2026, 5), [4, 29], id="MON#1,L5"),
        # Both day fields restricted: a day matches when EITHER does, whatever the forms.
        pytest.param("0 0 12 13 * FRI", (2026, 3), [6, 13, 20, 27], id="13 or a Friday"),
        pytest.param("0 0 12 15W * MON", (2026, 4), [6, 13, 15, 20, 27], id="15W or a Monday"),
        pytest.param("0 0 12 1W * SUN", (2026, 2), [1, 2, 8, 15, 22], id="1W or a Sunday"),
        pytest.param("0 0 12 1 * SUN#2", (2026, 5), [1, 10], id="the 1st or the second Sunday"),
        pytest.param("0 0 12 L * 1#1", (2026, 5), [4, 31], id="the last day or the first Monday"),
        pytest.param("0 0 12 1-31 * MON", (2026, 2), list(range(1, 29)), id="1-31 or Monday"),
        pytest.param(
            "0 0 12 1-31/2 * MON",
            (2026, 2),
            [1, 2, 3, 5, 7, 9, 11, 13, 15, 16, 17, 19, 21, 23, 25, 27],
            id="odd days or Monday",
        ),
        # One restricted: that one decides; `?` is `*`.
        pytest.param("0 0 12 ? * MON", (2026, 5), [4, 11, 18, 25], id="? and MON"),
        pytest.param("0 0 12 */10 * ?", (2026, 5), [1, 11, 21, 31], id="*/10 and ?"),
    ],
)
def test_an_accepted_form_means_what_standard_cron_means(
    expression: str, month: tuple[int, int], days: list[int]
) -> None:
    assert days_fired(expression, *month) == days


def test_an_equal_range_in_a_time_field_is_one_value() -> None:
    # croniter 7 reads `5-5` as every hour: 1,488 times in 62 days instead of 62
    s = compile_schedule({"schedule": "0 0 5-5 * * *"}, "c1", now=NOW)

    assert len(s.fires_in(utc(2026, 1, 1), utc(2026, 3, 3, 23, 59, 59))) == 62
    assert s.fires_in(utc(2026, 1, 1), utc(2026, 1, 2, 23), 10) == [
        utc(2026, 1, 1, 5),
        utc(2026, 1, 2, 5),
    ]


def test_time_steps_and_lists_mean_their_values() -> None:
    assert fires("*/20 5/25 12 1 1 *", utc(2026, 1, 1, 12), utc(2026, 1, 1, 13)) == [
        utc(2026, 1, 1, 12, m, s) for m in (5, 30, 55) for s in (0, 20, 40)
    ]
    assert fires("0 0 1-2,22 1 1 *", utc(2026, 1, 1), utc(2026, 1, 2)) == [
        utc(2026, 1, 1, 1),
        utc(2026, 1, 1, 2),
        utc(2026, 1, 1, 22),
    ]


@pytest.mark.parametrize(
    ("expression", "says"),
    [
        pytest.param(
            "0 0 22-2 * * *", "cron ranges do not wrap, so write `22-23,0-2`", id="backwards hours"
        ),
        pytest.param("0 0 0 * * SAT-SUN", "so write `6-7`", id="SAT-SUN"),
        pytest.param("0 0 0 * * FRI-MON", "`5-6,0-1`", id="FRI-MON"),
        pytest.param("0 0 0 1 NOV-FEB *", "`11-12,1-2`", id="NOV-FEB"),
        pytest.param("0 */90 * * * *", "a step of at most 59", id="step longer than the minutes"),
        pytest.param("0 0 */24 * * *", "a step of at most 23", id="step longer than the hours"),
        pytest.param("0 0 0 */31 * *", "a step of at most 30", id="step longer than the month"),
        pytest.param("0 0 0 1 */12 *", "a step of at most 11", id="step longer than the year"),
        pytest.param("0 0 0 * * */8", "a step of at most 7", id="step longer than the week"),
        pytest.param("0 0 0 1-31/40 * *", "a step of at most 30", id="step longer on a range"),
        pytest.param("0 0 0 *,15 * *", "`*` already matches every value", id="star in a list"),
        pytest.param("0 0 0 */2 * MON", "write `1-31/2`", id="star step beside a weekday"),
        pytest.param("0 0 0 15 * */2", "write `0-6/2`", id="star step beside a day"),
        pytest.param("0 0 0 * * SAT/2", "write the range", id="a start step in day-of-week"),
        pytest.param("0 0 0 W15 * *", "`15W`", id="W before the day"),
        pytest.param("0 0 0 1W,15 * *", "alone in the field", id="W in a list"),
        pytest.param("0 0 0 LW * *", "alone in the field", id="LW"),
        pytest.param("0 0 0 L-3 * *", "offsets such as `L-3`", id="L-3"),
        pytest.param("0 0 0 * * 5L", "`L5`: the last Friday", id="5L"),
        pytest.param("0 0 0 * * L", "`L5`: the last Friday", id="L alone in day-of-week"),
        pytest.param("0 0 0 * * LFRI", "`L5`: the last Friday", id="LFRI"),
        pytest.param("0 0 0 * * MON-SUN", "`1-7`", id="MON-SUN: 7 is Sunday too"),
        pytest.param("0 0 0 * * MON-FRI#2", "`MON#2,TUE#2`", id="# on a range"),
        pytest.param("0 0 0 * * MON,FRI#3", "mixes plain weekdays", id="plain and nth mixed"),
        pytest.param("0 0 0 * * 5#6", "1 to 5", id="a sixth Friday"),
        pytest.param("0 0 ? * * *", "write `*`", id="? in the hours"),
        pytest.param("0 0 0 * * 8", "8 is out of range; allowed: 0-7 or SUN-SAT", id="weekday 8"),
        pytest.param("0 0 0 32 * *", "32 is out of range", id="day 32"),
        pytest.param("0 0 0 0 * *", "0 is out of range", id="day 0"),
        pytest.param("0 0 0 1 13 *", "13 is out of range; allowed: 1-12 or JAN-DEC", id="month 13"),
        pytest.param("0 0 0 1 January *", "`January` is not a value", id="a full month name"),
        pytest.param("0 -5 * * * *", "is not a value", id="a negative minute"),
        pytest.param("0 0 0 31W 4 *", "never fires in the next 5 years", id="31W in April only"),
        pytest.param("0 0 0 31 2,4 *", "never fires in the next 5 years", id="31st of Feb and Apr"),
        pytest.param("@daily", "`0 0 0 * * *`", id="a nickname"),
    ],
)
def test_a_form_without_a_plain_meaning_is_refused_with_how_to_write_it(
    expression: str, says: str
) -> None:
    with pytest.raises(ScheduleInvalid) as caught:
        compile_schedule({"schedule": expression}, "c1", now=NOW)

    (error,) = caught.value.errors
    assert (error.path, error.code) == ("transport_config.schedule", "invalid")
    assert says in error.message


def docs_table(heading: str) -> list[list[str]]:
    """The rows of the first table after `heading` in the docs' schedule page, as lists of cells."""
    text = (Path(__file__).parents[2] / "docs" / "concepts" / "schedules.md").read_text()
    section = text.split(heading, 1)[1]
    rows = []
    for line in section.splitlines():
        if line.startswith("|"):
            rows.append([cell.strip() for cell in line.strip("|").split("|")])
        elif rows:
            break
    return rows[2:]  # past the header and its rule


def expressions_in(cell: str) -> list[str]:
    return [c for c in re.findall(r"`([^`]+)`", cell) if len(c.split()) == 6]


def test_every_example_in_the_docs_table_of_forms_compiles() -> None:
    examples = [
        e for row in docs_table("## The expression language") for e in expressions_in(row[3])
    ]

    assert len(examples) >= 15
    for expression in examples:
        compile_schedule({"schedule": expression}, "c1", now=NOW)


def test_every_refused_form_in_the_docs_is_refused_and_its_fix_compiles() -> None:
    rows = docs_table("Refused, each with a message")
    refused = [e for row in rows for e in expressions_in(row[0])]
    fixes = [e for row in rows for e in expressions_in(row[2])]

    assert refused and fixes
    for expression in refused:
        with pytest.raises(ScheduleInvalid):
            compile_schedule({"schedule": expression}, "c1", now=NOW)
    for expression in fixes:
        compile_schedule({"schedule": expression}, "c1", now=NOW)
