"""Properties over random expressions, zones and windows, against an independent oracle.

The oracle (`tests/cron_oracle.py`) is written without croniter and without cronledger code:
its own field parser, a brute-force walk of local wall-clock times through zoneinfo. So these
properties can find the parsing library's quirks as well as the compiler's (croniter 7 reads
`5-5` as the whole field, and `15W` beside a restricted day-of-week as AND).

Expressions use every accepted form of every field (values, names, equal and ordinary ranges,
`L`, `A-L`, `NW`, `D#N`, `LD`, 7 as Sunday, `?`, the three step forms, mixed lists), with the
day fields restricted together often, since that is where the OR rule lives. Times of day are
kept to a few thousand a day so the oracle stays quick. Zones include half-hour and 45-minute
offsets, a 30-minute DST, DST changes at midnight, negative DST, two that skipped a whole day,
and windows are mostly drawn around one of the zone's real offset changes.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from functools import cache
from zoneinfo import ZoneInfo

from hypothesis import HealthCheck, event, given, settings, strategies as st

from cronledger.cron import Schedule, ScheduleInvalid, compile_schedule
from cronledger.cron.compiled import FEW_DUE
from tests.cron_oracle import Oracle
from tests.profiles import examples

ZONES = [
    "UTC",
    "Europe/London",
    "America/New_York",
    "Asia/Kolkata",  # +05:30
    "Asia/Kathmandu",  # +05:45
    "Australia/Eucla",  # +08:45
    "Australia/Lord_Howe",  # 30-minute DST
    "Pacific/Chatham",  # +12:45 / +13:45
    "America/Santiago",  # DST changes at midnight
    "America/Havana",  # DST changes at midnight
    "Asia/Beirut",  # DST changes at midnight
    "Europe/Dublin",  # negative DST in tzdata
    "Pacific/Apia",  # skipped 2011-12-30 entirely
    "Pacific/Kiritimati",  # skipped 1994-12-31 entirely
    "Antarctica/Troll",  # 2-hour DST
    "Africa/Casablanca",  # DST suspended during Ramadan
    "America/St_Johns",  # -03:30
]
#: Years with a zone's strangest change, drawn half the time for that zone.
SPECIAL_YEARS = {"Pacific/Apia": [2011], "Pacific/Kiritimati": [1994]}
#: The most times of day an expression lists, so the oracle's per-time walk stays cheap.
TIMES_A_DAY = 1500

MONTHS = ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"]
WEEKDAYS = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"]


def spelled(draw: st.DrawFn, value: int, names: list[str], first: int) -> str:
    """A value as a number, or as its name (in any case) when it has one."""
    index = value - first
    if names and 0 <= index < len(names) and draw(st.booleans()):
        return draw(st.sampled_from([str.upper, str.lower, str.title]))(names[index])
    return str(value)


@st.composite
def plain_item(
    draw: st.DrawFn,
    low: int,
    high: int,
    names: list[str] | None = None,
    first: int = 0,
    start_step: bool = True,
) -> str:
    """`A`, `A-A`, `A-B`, `A-B/S`, `A/S` (values, ranges and steps; never backwards)."""
    names = names or []
    span = high - low

    def value() -> int:
        return draw(st.integers(low, high))

    kind = draw(
        st.sampled_from(
            ["value", "value", "equal range", "range", "range step"]
            + (["start step"] if start_step else [])
        )
    )
    a = value()
    if kind == "value":
        return spelled(draw, a, names, first)
    if kind == "equal range":
        return f"{spelled(draw, a, names, first)}-{spelled(draw, a, names, first)}"
    b = draw(st.integers(a, high))
    step = draw(st.integers(1, max(1, span)))
    if kind == "range":
        return f"{spelled(draw, a, names, first)}-{spelled(draw, b, names, first)}"
    if kind == "range step":
        return f"{spelled(draw, a, names, first)}-{spelled(draw, b, names, first)}/{step}"
    return f"{spelled(draw, a, names, first)}/{step}"


@st.composite
def plain_field(
    draw: st.DrawFn,
    low: int,
    high: int,
    names: list[str] | None = None,
    first: int = 0,
    start_step: bool = True,
    star_step_top: int | None = None,
) -> str:
    """`*`, `*/S`, or a list of one to three plain items."""
    kind = draw(st.sampled_from(["star", "star step", "list", "list", "list"]))
    if kind == "star":
        return "*"
    if kind == "star step":
        return f"*/{draw(st.integers(1, (star_step_top or high) - low))}"
    items = draw(st.lists(plain_item(low, high, names, first, start_step), min_size=1, max_size=3))
    return ",".join(items)


@st.composite
def times_of_day(draw: st.DrawFn) -> tuple[str, str, str]:
    """Second, minute and hour fields listing at most `TIMES_A_DAY` times between them."""
    hours = draw(plain_field(0, 23))
    n_hours = len(Oracle(f"0 0 {hours} * * *").hours)
    minutes = draw(plain_field(0, 59))
    n_minutes = len(Oracle(f"0 {minutes} 0 * * *").minutes)
    if n_hours * n_minutes > TIMES_A_DAY:
        minutes = str(draw(st.integers(0, 59)))
        n_minutes = 1
    seconds = draw(plain_field(0, 59))
    if n_hours * n_minutes * len(Oracle(f"{seconds} 0 0 * * *").seconds) > TIMES_A_DAY:
        seconds = draw(st.sampled_from(["0", "30", "59", "0,30", "15-15"]))
    return seconds, minutes, hours


@st.composite
def day_of_month(draw: st.DrawFn, star_step: bool) -> str:
    kind = draw(
        st.sampled_from(
            [
                "*",
                "?",
                "plain",
                "plain",
                "L",
                "nearest weekday",
                "nearest weekday",
                "to last",
                "mixed",
            ]
        )
    )
    if kind in ("*", "?"):
        return kind
    if kind == "plain":
        field = draw(plain_field(1, 31))
        return field if star_step or not field.startswith("*/") else "1-31" + field[1:]
    if kind == "L":
        return "L"
    if kind == "nearest weekday":
        return f"{draw(st.integers(1, 31))}W"
    if kind == "to last":
        a = draw(st.integers(1, 31))
        return f"{a}-L" + (f"/{draw(st.integers(1, 30))}" if draw(st.booleans()) else "")
    items = draw(
        st.lists(
            st.one_of(plain_item(1, 31), st.just("L"), st.integers(1, 31).map(lambda a: f"{a}-L")),
            min_size=2,
            max_size=3,
        )
    )
    return ",".join(items)


@st.composite
def day_of_week(draw: st.DrawFn, star_step: bool) -> str:
    kind = draw(
        st.sampled_from(["*", "?", "plain", "plain", "plain", "nth", "last", "nth and last"])
    )
    if kind in ("*", "?"):
        return kind
    if kind == "plain":
        field = draw(plain_field(0, 7, WEEKDAYS, 0, start_step=False, star_step_top=7))
        return field if star_step or not field.startswith("*/") else "0-6" + field[1:]

    def nth() -> str:
        return f"{spelled(draw, draw(st.integers(0, 7)), WEEKDAYS, 0)}#{draw(st.integers(1, 5))}"

    def last() -> str:
        return f"L{draw(st.integers(0, 7))}"

    make = {"nth": [nth], "last": [last], "nth and last": [nth, last]}[kind]
    return ",".join(draw(st.sampled_from(make))() for _ in range(draw(st.integers(1, 3))))


@st.composite
def expressions(draw: st.DrawFn) -> str:
    seconds, minutes, hours = draw(times_of_day())
    # `*/S` in one day field beside a restricted other is refused (Vixie and others disagree):
    # draw the day-of-week first, and let day-of-month use `*/S` only beside an open one.
    dow = draw(day_of_week(star_step=True))
    dom = draw(day_of_month(star_step=dow in ("*", "?")))
    if dom not in ("*", "?") and dow.startswith("*/"):
        dow = "0-6" + dow[1:]
    month = draw(st.one_of(st.just("*"), plain_field(1, 12, MONTHS, 1)))
    return " ".join((seconds, minutes, hours, dom, month, dow))


@cache
def offset_changes(zone: str, year: int) -> list[datetime]:
    """Roughly when `zone` changed its offset in `year` (to within three hours): windows are
    drawn around these, a day and a half either side."""
    z = ZoneInfo(zone)
    steps = [datetime(year, 1, 1, tzinfo=UTC) + timedelta(hours=3 * h) for h in range(366 * 8)]
    return [
        b
        for a, b in itertools.pairwise(steps)
        if a.astimezone(z).utcoffset() != b.astimezone(z).utcoffset()
    ]


@st.composite
def windows(draw: st.DrawFn, zone: str) -> tuple[datetime, datetime]:
    """`(start, end)`: mostly within a day and a half of one of the zone's offset changes,
    otherwise anywhere in a year. Spans and lead times are drawn in hours plus seconds,
    because hypothesis favours small integers and an empty window proves little."""

    def hours_and_seconds(most: int) -> timedelta:
        return timedelta(hours=draw(st.integers(0, most)), seconds=draw(st.integers(0, 3599)))

    special = SPECIAL_YEARS.get(zone, [])
    year = draw(st.sampled_from(special)) if special and draw(st.booleans()) else None
    year = year or draw(st.integers(2000, 2037))
    changes = offset_changes(zone, year) if zone != "UTC" else []
    if changes and draw(st.integers(0, 3)) > 0:  # three in four windows
        start = draw(st.sampled_from(changes)) - hours_and_seconds(35)
    else:
        start = datetime(year, 1, 1, tzinfo=UTC) + timedelta(days=draw(st.integers(0, 364)))
        start += hours_and_seconds(23)
    start += timedelta(microseconds=draw(st.sampled_from([0, 0, 1, 999_999])))
    # Mostly up to two days; one in three up to ten, so that sparse day rules show too.
    end = (
        start
        + hours_and_seconds(draw(st.sampled_from([47, 47, 239])))
        + timedelta(hours=1, microseconds=draw(st.integers(0, 999_999)))
    )
    return start, end


def crosses_a_change(zone: str, start: datetime, end: datetime) -> bool:
    z = ZoneInfo(zone)
    return start.astimezone(z).utcoffset() != end.astimezone(z).utcoffset()


@st.composite
def cases(draw: st.DrawFn) -> tuple[str, str, datetime, datetime]:
    zone = draw(st.sampled_from(ZONES))
    start, end = draw(windows(zone))
    return draw(expressions()), zone, start, end


def compiled(expression: str, zone: str, start: datetime, **more: object) -> Schedule | None:
    """The compiled schedule, or None when it was refused for never firing in five years
    from `start`, which the oracle must then confirm. Any other refusal fails the test: every
    drawn form is one the compiler accepts."""
    try:
        return compile_schedule({"schedule": expression, "timezone": zone, **more}, "c1", now=start)
    except ScheduleInvalid as refused:
        (error,) = refused.errors
        if error.path == "transport_config.jitter_secs":
            assert "shortest gap" in error.message, error.message
            event("refused: jitter not under the shortest gap")
            return None
        assert "never fires in the next 5 years" in error.message, error.message
        assert Oracle(expression).next_after(zone, start, FIVE_YEARS) is None
        event("refused: never fires")
        return None


FIVE_YEARS = timedelta(days=5 * 366)
PROPERTY = settings(
    max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@PROPERTY
@given(cases())
def test_fires_in_equals_the_oracles_walk_of_wall_clock_times(
    case: tuple[str, str, datetime, datetime],
) -> None:
    expression, zone, start, end = case
    s = compiled(expression, zone, start)
    if s is None:
        return

    fires = s.fires_in(start, end)
    event("window crosses an offset change" if crosses_a_change(zone, start, end) else "steady")
    event("fires" if fires else "empty")

    assert all(a < b for a, b in itertools.pairwise(fires))
    assert all(start <= f <= end and f.tzinfo is UTC for f in fires)
    assert fires == Oracle(expression).fires_in(zone, start, end)


@PROPERTY
@given(cases())
def test_next_after_is_the_oracles_next_instant(
    case: tuple[str, str, datetime, datetime],
) -> None:
    expression, zone, start, _end = case
    s = compiled(expression, zone, start)
    if s is None:
        return

    expected = Oracle(expression).next_after(zone, start, FIVE_YEARS + timedelta(days=366))

    assert expected is not None, "a schedule that compiled fires within five years"
    assert s.next_after(start) == expected


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    cases(),
    st.sampled_from(["skip", "latest", "catch_up"]),
    st.integers(0, 3 * 3600),
    st.integers(1, 4),
    st.integers(1, 4),
    st.one_of(st.just(0), st.integers(1, 3600)),
)
def test_a_plan_accounts_for_every_due_instant_exactly_once(
    case: tuple[str, str, datetime, datetime],
    policy: str,
    grace_seconds: int,
    channel_bound: int,
    instance_bound: int,
    jitter_secs: int,
) -> None:
    # Given a window [cursor, now] and what is due in it, each instant judged by its due time
    expression, zone, cursor, now = case
    grace = timedelta(seconds=grace_seconds)
    s = compiled(
        expression,
        zone,
        cursor,
        misfire_policy=policy,
        max_catch_up=channel_bound,
        jitter_secs=jitter_secs,
    )
    if s is None:
        return
    due = s.fires_in(cursor, now)
    event("a few due: listed at once" if len(due) <= FEW_DUE else "many due: surveyed")
    due_times = [s.due_at(t) for t in due]
    assert all(a < b for a, b in itertools.pairwise(due_times)), "jitter keeps the order"
    late = [t for t in due if s.due_at(t) >= now - grace]
    misfired = [t for t in due if s.due_at(t) < now - grace]

    # When the pass is planned
    p = s.plan_pass(cursor, now, grace, instance_bound)

    # Then the policy picks what runs, and the summary counts exactly the rest
    kept = {
        "skip": [],
        "latest": misfired[-1:],
        "catch_up": misfired[: min(channel_bound, instance_bound)],
    }[policy]
    assert p.materialise == kept + late
    dropped = [t for t in misfired if t not in kept]
    if dropped:
        assert p.skipped is not None
        assert (p.skipped.oldest, p.skipped.newest, p.skipped.count) == (
            dropped[0],
            dropped[-1],
            len(dropped),
        )
    else:
        assert p.skipped is None
    assert p.next_cursor == s.next_after(now)
