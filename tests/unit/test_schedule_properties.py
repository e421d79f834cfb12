"""Properties over random expressions, zones and windows, against a brute-force oracle.

The oracle is the naive algorithm the module avoids: step croniter through every local
wall-clock match, resolve each with zoneinfo (`fold` 0 and 1), keep those that exist, sort.
It shares none of the module's segment, time-of-day or transition code, and windows are often
drawn around a zone's real offset changes, found here by scanning zoneinfo hour by hour.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from functools import cache
from zoneinfo import ZoneInfo

from croniter import croniter
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from cronledger.schedule import Schedule, compile_schedule

ZONES = [
    "UTC",
    "Europe/London",
    "America/New_York",
    "Asia/Kolkata",
    "Europe/Dublin",  # negative DST in tzdata
    "Australia/Lord_Howe",  # 30-minute DST
    "Pacific/Chatham",  # +12:45 / +13:45
    "Antarctica/Troll",  # 2-hour DST
    "America/Sao_Paulo",  # DST abolished in 2019
    "Africa/Casablanca",  # DST suspended during Ramadan
    "Pacific/Apia",  # skipped 2011-12-30 entirely
    "America/St_Johns",
]
# Sparse enough that the oracle's per-instant walk stays cheap, rich enough to hit the gap,
# the repeat, L, # and the OR of day-of-month and day-of-week. Day specs carry one restriction
# at most, and every day is the most likely, so most windows actually contain instants.
SECONDS = ["0", "30", "0,30", "15"]
MINUTES = ["0", "30", "*/30", "0,45", "59", "1-2"]
HOURS = ["*", "*", "*", "0", "1", "2", "0-3", "*/6", "1,2", "23"]
DAYS = ["* * *"] * 8 + [
    "? * *",
    "* * ?",
    "1 * *",
    "L * *",
    "15 * *",
    "29 * *",
    "31 * *",
    "*/10 * *",
    "* 3 *",
    "* 10,11 *",
    "* */2 *",
    "* MAR-APR *",
    "* * SUN",
    "* * MON-FRI",
    "* * 0#2",
    "* * L5",
    "13 * FRI",  # the 13th or any Friday
]

expressions = st.tuples(*(st.sampled_from(f) for f in (SECONDS, MINUTES, HOURS, DAYS))).map(
    " ".join
)


@cache
def offset_changes(zone: str, year: int) -> list[datetime]:
    z = ZoneInfo(zone)
    hours = [datetime(year, 1, 1, tzinfo=UTC) + timedelta(hours=h) for h in range(366 * 24)]
    return [
        b
        for a, b in itertools.pairwise(hours)
        if a.astimezone(z).utcoffset() != b.astimezone(z).utcoffset()
    ]


@st.composite
def windows(draw: st.DrawFn, zone: str) -> tuple[datetime, datetime]:
    """`(start, end)`: mostly within a day and a half of one of the zone's offset changes,
    otherwise anywhere in 2005-2035. Spans and lead times are drawn in hours plus seconds,
    because hypothesis favours small integers and an empty window proves little."""

    def hours_and_seconds(most: int) -> timedelta:
        return timedelta(hours=draw(st.integers(0, most)), seconds=draw(st.integers(0, 3599)))

    year = draw(st.integers(2005, 2035))
    changes = offset_changes(zone, year) if zone != "UTC" else []
    if changes and draw(st.integers(0, 3)) > 0:  # three in four windows
        start = draw(st.sampled_from(changes)) - hours_and_seconds(35)
    else:
        start = datetime(year, 1, 1, tzinfo=UTC) + timedelta(days=draw(st.integers(0, 364)))
        start += hours_and_seconds(23)
    start += timedelta(microseconds=draw(st.sampled_from([0, 0, 1, 999_999])))
    end = (
        start
        + hours_and_seconds(47)
        + timedelta(hours=1, microseconds=draw(st.integers(0, 999_999)))
    )
    return start, end


def crosses_a_change(zone: str, start: datetime, end: datetime) -> bool:
    z = ZoneInfo(zone)
    return start.astimezone(z).utcoffset() != end.astimezone(z).utcoffset()


def oracle(expression: str, zone: str, start: datetime, end: datetime) -> list[datetime]:
    z = ZoneInfo(zone)
    # Every UTC offset lies within [-12 h, +14 h], so local matches outside this range cannot map
    # into the window.
    local = croniter(
        expression,
        start.replace(tzinfo=None) - timedelta(hours=13),
        second_at_beginning=True,
    )
    last_local = end.replace(tzinfo=None) + timedelta(hours=15)
    found: set[datetime] = set()
    while (wall := local.get_next(datetime)) <= last_local:
        for fold in (0, 1):
            instant = wall.replace(tzinfo=z, fold=fold).astimezone(UTC)
            exists = instant.astimezone(z).replace(tzinfo=None) == wall
            if exists and start <= instant <= end:
                found.add(instant)
    return sorted(found)


def compiled(expression: str, zone: str, start: datetime, **more: object) -> Schedule:
    return compile_schedule({"schedule": expression, "timezone": zone, **more}, "c1", now=start)


@st.composite
def cases(draw: st.DrawFn) -> tuple[str, str, datetime, datetime]:
    zone = draw(st.sampled_from(ZONES))
    start, end = draw(windows(zone))
    return draw(expressions), zone, start, end


PROPERTY = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(cases())
def test_fires_in_is_ascending_unique_in_the_window_and_equals_the_brute_force_walk(
    case: tuple[str, str, datetime, datetime],
) -> None:
    expression, zone, start, end = case
    s = compiled(expression, zone, start)

    fires = s.fires_in(start, end, 10_000)
    event("window crosses an offset change" if crosses_a_change(zone, start, end) else "steady")
    event("fires" if fires else "empty")

    assert all(a < b for a, b in itertools.pairwise(fires))
    assert all(start <= f <= end and f.tzinfo is UTC for f in fires)
    assert fires == oracle(expression, zone, start, end)


@PROPERTY
@given(cases())
def test_next_after_is_the_first_instant_of_the_window_that_follows(
    case: tuple[str, str, datetime, datetime],
) -> None:
    expression, zone, start, _end = case
    s = compiled(expression, zone, start)
    horizon = start + timedelta(days=6 * 366)

    following = s.fires_in(start + timedelta(microseconds=1), horizon, 1)

    assert following, "every drawn expression fires within six years"
    assert s.next_after(start) == following[0]


@PROPERTY
@given(
    cases(),
    st.sampled_from(["skip", "latest", "catch_up"]),
    st.integers(0, 3 * 3600),
    st.integers(1, 4),
    st.integers(1, 4),
)
def test_a_plan_accounts_for_every_due_instant_exactly_once(
    case: tuple[str, str, datetime, datetime],
    policy: str,
    grace_seconds: int,
    channel_bound: int,
    instance_bound: int,
) -> None:
    # Given a window [cursor, now] and what is due in it
    expression, zone, cursor, now = case
    grace = timedelta(seconds=grace_seconds)
    s = compiled(expression, zone, cursor, misfire_policy=policy, max_catch_up=channel_bound)
    due = s.fires_in(cursor, now, 10_000)
    late = [t for t in due if t >= now - grace]
    misfired = [t for t in due if t < now - grace]

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
