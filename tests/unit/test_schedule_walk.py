"""When a schedule fires: zones, both DST directions, window edges, caps and strictness.

Every expected instant is written out literally, in UTC, so a reader can check it against a
calendar rather than against the code.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from cronledger.cron import WALK_LIMIT, Schedule, compile_schedule


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)  # type: ignore[arg-type, misc]


def schedule(expression: str, zone: str = "UTC") -> Schedule:
    return compile_schedule({"schedule": expression, "timezone": zone}, "channel-1")


def test_a_daily_schedule_east_of_utc_without_dst_fires_the_previous_utc_evening() -> None:
    s = schedule("0 15 2 * * *", "Asia/Kolkata")  # 02:15 at +05:30, all year

    assert s.fires_in(utc(2026, 6, 1), utc(2026, 6, 3), 10) == [
        utc(2026, 6, 1, 20, 45),
        utc(2026, 6, 2, 20, 45),
    ]
    assert s.fires_in(utc(2026, 12, 1), utc(2026, 12, 2), 10) == [utc(2026, 12, 1, 20, 45)]


def test_london_spring_forward_skips_a_time_that_does_not_exist() -> None:
    # 2026-03-29 01:00 GMT jumps to 02:00 BST: 01:30 never happens that day
    s = schedule("0 30 1 * * *", "Europe/London")

    assert s.fires_in(utc(2026, 3, 27, 12), utc(2026, 3, 31), 10) == [
        utc(2026, 3, 28, 1, 30),
        utc(2026, 3, 30, 0, 30),
    ]


def test_london_fall_back_fires_a_repeated_time_twice() -> None:
    # 2026-10-25 02:00 BST falls back to 01:00 GMT: 01:30 happens at 00:30Z and again at 01:30Z
    s = schedule("0 30 1 * * *", "Europe/London")

    assert s.fires_in(utc(2026, 10, 24, 12), utc(2026, 10, 27), 10) == [
        utc(2026, 10, 25, 0, 30),
        utc(2026, 10, 25, 1, 30),
        utc(2026, 10, 26, 1, 30),
    ]


def test_new_york_spring_forward_skips_a_time_that_does_not_exist() -> None:
    # 2026-03-08 02:00 EST jumps to 03:00 EDT: 02:30 never happens that day
    s = schedule("0 30 2 * * *", "America/New_York")

    assert s.fires_in(utc(2026, 3, 7), utc(2026, 3, 10), 10) == [
        utc(2026, 3, 7, 7, 30),
        utc(2026, 3, 9, 6, 30),
    ]


def test_new_york_fall_back_fires_a_repeated_time_twice() -> None:
    # 2026-11-01 02:00 EDT falls back to 01:00 EST: 01:30 happens at 05:30Z and again at 06:30Z
    s = schedule("0 30 1 * * *", "America/New_York")

    assert s.fires_in(utc(2026, 10, 31, 12), utc(2026, 11, 3), 10) == [
        utc(2026, 11, 1, 5, 30),
        utc(2026, 11, 1, 6, 30),
        utc(2026, 11, 2, 6, 30),
    ]


def test_the_repeated_hour_interleaves_in_utc_order() -> None:
    # Every half hour through London's repeated 01:00-02:00: the BST pass, then the GMT pass
    s = schedule("0 0,30 * * * *", "Europe/London")

    assert s.fires_in(utc(2026, 10, 24, 23, 30), utc(2026, 10, 25, 2), 10) == [
        utc(2026, 10, 24, 23, 30),  # 00:30 BST
        utc(2026, 10, 25, 0, 0),  # 01:00 BST
        utc(2026, 10, 25, 0, 30),  # 01:30 BST
        utc(2026, 10, 25, 1, 0),  # 01:00 GMT
        utc(2026, 10, 25, 1, 30),  # 01:30 GMT
        utc(2026, 10, 25, 2, 0),  # 02:00 GMT
    ]


def test_the_short_spring_day_has_twenty_three_hours_of_minutes() -> None:
    # London's local 2026-03-29 runs from 00:00Z to 23:00Z
    s = schedule("0 * * * * *", "Europe/London")

    fires = s.fires_in(utc(2026, 3, 29), utc(2026, 3, 29, 22, 59, 59), WALK_LIMIT)

    assert len(fires) == 23 * 60
    assert (fires[0], fires[-1]) == (utc(2026, 3, 29), utc(2026, 3, 29, 22, 59))


def test_a_local_day_that_a_zone_skipped_never_fires() -> None:
    # Samoa crossed the date line from -10 to +14: local 2011-12-30 did not exist in Pacific/Apia
    s = schedule("0 15 2 * * *", "Pacific/Apia")

    fires = s.fires_in(utc(2011, 12, 28), utc(2012, 1, 1, 23), 10)

    assert fires == [
        utc(2011, 12, 28, 12, 15),  # 28th, at -10
        utc(2011, 12, 29, 12, 15),  # 29th, at -10
        utc(2011, 12, 30, 12, 15),  # 31st, at +14
        utc(2011, 12, 31, 12, 15),  # 1st
        utc(2012, 1, 1, 12, 15),  # 2nd
    ]
    assert [f.astimezone(ZoneInfo("Pacific/Apia")).day for f in fires] == [28, 29, 31, 1, 2]


def test_a_per_second_schedule_enumerates_without_drift() -> None:
    s = schedule("* * * * * *")

    fires = s.fires_in(utc(2026, 1, 1, 0, 0, 0, 250_000), utc(2026, 1, 1, 1), WALK_LIMIT)

    assert len(fires) == 3600
    assert (fires[0], fires[-1]) == (utc(2026, 1, 1, 0, 0, 1), utc(2026, 1, 1, 1))
    assert all(b - a == timedelta(seconds=1) for a, b in itertools.pairwise(fires))
    assert all(f.microsecond == 0 for f in fires)


def test_a_per_second_schedule_stays_on_the_second_across_a_dst_change() -> None:
    s = schedule("*/15 * * * * *", "America/New_York")

    fires = s.fires_in(utc(2026, 3, 8, 6, 59), utc(2026, 3, 8, 7, 1), WALK_LIMIT)

    assert fires == [utc(2026, 3, 8, 6, 59) + timedelta(seconds=15 * k) for k in range(9)]


def test_both_ends_of_a_window_are_inclusive() -> None:
    s = schedule("0 15 2 * * *")

    assert s.fires_in(utc(2026, 5, 1, 2, 15), utc(2026, 5, 3, 2, 15), 10) == [
        utc(2026, 5, 1, 2, 15),
        utc(2026, 5, 2, 2, 15),
        utc(2026, 5, 3, 2, 15),
    ]
    assert s.fires_in(utc(2026, 5, 1, 2, 15), utc(2026, 5, 1, 2, 15), 10) == [
        utc(2026, 5, 1, 2, 15)
    ]


def test_a_window_one_microsecond_past_each_end_excludes_it() -> None:
    s = schedule("0 15 2 * * *")
    tick = timedelta(microseconds=1)

    assert s.fires_in(utc(2026, 5, 1, 2, 15) + tick, utc(2026, 5, 3, 2, 15) - tick, 10) == [
        utc(2026, 5, 2, 2, 15)
    ]


def test_the_cap_keeps_the_earliest_instants() -> None:
    s = schedule("0 0 * * * *")

    assert s.fires_in(utc(2026, 1, 1), utc(2026, 1, 2), 3) == [
        utc(2026, 1, 1, 0),
        utc(2026, 1, 1, 1),
        utc(2026, 1, 1, 2),
    ]
    assert s.fires_in(utc(2026, 1, 1), utc(2026, 1, 2), 0) == []


def test_no_cap_returns_more_than_the_walk_limit() -> None:
    s = schedule("* * * * * *")

    fires = s.fires_in(utc(2026, 1, 1), utc(2026, 1, 4), 10**6)

    assert len(fires) == WALK_LIMIT == 200_000
    assert fires[-1] == utc(2026, 1, 1) + timedelta(seconds=WALK_LIMIT - 1)


def test_an_inverted_window_is_empty() -> None:
    s = schedule("* * * * * *")

    assert s.fires_in(utc(2026, 1, 2), utc(2026, 1, 1), 10) == []


def test_next_after_is_strictly_after() -> None:
    s = schedule("0 15 2 * * *")

    assert s.next_after(utc(2026, 5, 1, 2, 15)) == utc(2026, 5, 2, 2, 15)
    assert s.next_after(utc(2026, 5, 1, 2, 14, 59, 999_999)) == utc(2026, 5, 1, 2, 15)
    assert s.next_after(utc(2026, 5, 1, 2, 15, 0, 1)) == utc(2026, 5, 2, 2, 15)


def test_next_after_the_first_of_a_repeated_time_is_the_second() -> None:
    s = schedule("0 30 1 * * *", "Europe/London")

    assert s.next_after(utc(2026, 10, 25, 0, 30)) == utc(2026, 10, 25, 1, 30)


def test_day_fields_keep_cron_semantics() -> None:
    last_day = schedule("0 0 9 L * *")
    first_monday = schedule("0 0 9 * * MON#1")
    the_13th_or_a_friday = schedule("0 0 9 13 * FRI")

    assert last_day.next_after(utc(2028, 2, 1)) == utc(2028, 2, 29, 9)
    assert first_monday.next_after(utc(2026, 6, 1, 10)) == utc(2026, 7, 6, 9)
    assert the_13th_or_a_friday.fires_in(utc(2026, 3, 9), utc(2026, 3, 21), 10) == [
        utc(2026, 3, 13, 9),  # a Friday the 13th fires once
        utc(2026, 3, 20, 9),
    ]


def test_instants_in_another_zone_come_back_in_utc() -> None:
    s = schedule("0 0 12 * * *", "Europe/Paris")
    paris = ZoneInfo("Europe/Paris")

    fires = s.fires_in(datetime(2026, 7, 1, tzinfo=paris), datetime(2026, 7, 2, tzinfo=paris))
    nxt = s.next_after(datetime(2026, 7, 1, 13, tzinfo=paris))

    assert fires == [utc(2026, 7, 1, 10)]
    assert nxt == utc(2026, 7, 2, 10)
    assert fires[0].tzinfo is UTC and nxt is not None and nxt.tzinfo is UTC


def test_naive_datetimes_are_refused() -> None:
    s = schedule("0 0 * * * *")

    with pytest.raises(ValueError, match="naive"):
        s.fires_in(datetime(2026, 1, 1), utc(2026, 1, 2), 10)
    with pytest.raises(ValueError, match="naive"):
        s.next_after(datetime(2026, 1, 1))


def test_a_negative_cap_is_refused() -> None:
    with pytest.raises(ValueError, match="cap"):
        schedule("0 0 * * * *").fires_in(utc(2026, 1, 1), utc(2026, 1, 2), -1)
