"""One-time schedules (`at`), bounds (`starts_at`/`ends_at`) and `jitter_secs`, in the
compiled `Schedule`: validation, the instants it answers, how it plans, and the hash.

Expected instants are written out in UTC from a calendar, not from the code.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from cronledger.cron import Schedule, ScheduleInvalid, compile_schedule
from cronledger.cron.compiled import jitter

NOW = datetime(2026, 1, 1, tzinfo=UTC)
GRACE = timedelta(seconds=5)


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)  # type: ignore[arg-type, misc]


def compiled(**config: Any) -> Schedule:
    return compile_schedule(config, "channel-1", now=NOW)


def refusal(**config: Any) -> tuple[str, str, str]:
    with pytest.raises(ScheduleInvalid) as caught:
        compiled(**config)
    (error,) = caught.value.errors
    return error.path, error.code, error.message


# --- at ---------------------------------------------------------------------------------------


def test_a_one_time_schedule_fires_once_at_its_local_time_and_never_again() -> None:
    s = compiled(at="2026-09-01T02:15:00", timezone="Europe/London")  # BST, +01:00

    assert (s.expression, s.at) == (None, "2026-09-01T02:15:00")
    assert s.fires_in(utc(2026, 1, 1), utc(2030, 1, 1)) == [utc(2026, 9, 1, 1, 15)]
    assert s.next_after(NOW) == utc(2026, 9, 1, 1, 15)
    assert s.next_after(utc(2026, 9, 1, 1, 15)) is None


def test_a_one_time_schedule_at_a_repeated_wall_time_fires_at_the_first_instant() -> None:
    # 2026-11-01 01:30 happens twice in New York: 05:30Z (EDT) and 06:30Z (EST)
    s = compiled(at="2026-11-01T01:30:00", timezone="America/New_York")

    assert s.fires_in(utc(2026, 10, 31), utc(2026, 11, 2)) == [utc(2026, 11, 1, 5, 30)]


def test_a_repeated_wall_time_under_negative_dst_fires_at_the_first_instant() -> None:
    # Dublin's clocks go back 2026-10-25 02:00 IST -> 01:00 GMT: 01:30 is 00:30Z, then 01:30Z
    s = compiled(at="2026-10-25T01:30:00", timezone="Europe/Dublin")

    assert s.fires_in(utc(2026, 10, 24), utc(2026, 10, 26)) == [utc(2026, 10, 25, 0, 30)]


def test_a_one_time_schedule_in_a_spring_forward_gap_is_refused_with_the_gap() -> None:
    path, code, message = refusal(at="2026-03-29T01:30:00", timezone="Europe/London")

    assert (path, code) == ("transport_config.at", "invalid")
    assert "does not exist in Europe/London" in message
    assert "jump from 01:00:00 to 02:00:00" in message


def test_a_one_time_schedule_plans_its_instant_once_then_parks() -> None:
    s = compiled(at="2026-03-01T12:00:00")

    due = s.plan_pass(utc(2026, 3, 1, 12), utc(2026, 3, 1, 12, 0, 2), GRACE, 10)
    missed = s.plan_pass(utc(2026, 3, 1, 12), utc(2026, 3, 2), GRACE, 10)

    assert (due.materialise, due.skipped, due.next_cursor) == ([utc(2026, 3, 1, 12)], None, None)
    assert missed.materialise == [utc(2026, 3, 1, 12)], "latest runs the newest misfire"
    assert missed.next_cursor is None


@pytest.mark.parametrize(
    ("config", "path", "says"),
    [
        pytest.param(
            {"at": "2026-09-01T02:15:00Z"}, "transport_config.at", "carries an offset", id="Z"
        ),
        pytest.param(
            {"at": "2026-09-01T02:15:00+01:00"},
            "transport_config.at",
            "drop the offset",
            id="an offset",
        ),
        pytest.param({"at": "2026-09-01 02:15"}, "transport_config.at", "YYYY-MM-DD", id="shape"),
        pytest.param(
            {"at": "2026-02-30T02:15:00"}, "transport_config.at", "not a real", id="30 Feb"
        ),
        pytest.param({"at": 1_788_000_000}, "transport_config.at", "YYYY-MM-DD", id="a number"),
        pytest.param(
            {"at": "2026-09-01T02:15:00", "schedule": "0 0 * * * *"},
            "transport_config.at",
            "not both",
            id="both",
        ),
        pytest.param(
            {"at": "2026-09-01T02:15:00", "ends_at": "2027-01-01T00:00:00Z"},
            "transport_config.ends_at",
            "fires once",
            id="at with a bound",
        ),
        pytest.param({}, "transport_config.schedule", "or `at`", id="neither"),
    ],
)
def test_a_bad_one_time_schedule_is_refused(config: dict[str, Any], path: str, says: str) -> None:
    found_path, _code, message = refusal(**config)

    assert found_path == path
    assert says in message


# --- bounds -----------------------------------------------------------------------------------

EVERY_10S = "*/10 * * * * *"
START = "2026-05-04T10:00:00Z"
END = "2026-05-04T10:00:30Z"


def test_bounds_are_inclusive_to_the_second_and_nothing_outside_them_fires() -> None:
    s = compiled(schedule=EVERY_10S, starts_at=START, ends_at=END)

    assert s.fires_in(utc(2026, 5, 4, 9), utc(2026, 5, 4, 11)) == [
        utc(2026, 5, 4, 10, 0, s) for s in (0, 10, 20, 30)
    ]
    assert s.next_after(utc(2026, 5, 4, 9)) == utc(2026, 5, 4, 10)
    assert s.next_after(utc(2026, 5, 4, 10, 0, 29)) == utc(2026, 5, 4, 10, 0, 30)
    assert s.next_after(utc(2026, 5, 4, 10, 0, 30)) is None


def test_a_bound_a_microsecond_past_an_instant_excludes_it() -> None:
    s = compiled(
        schedule=EVERY_10S,
        starts_at="2026-05-04T10:00:00.000001Z",
        ends_at="2026-05-04T10:00:29.999999Z",
    )

    assert s.fires_in(utc(2026, 5, 4, 9), utc(2026, 5, 4, 11)) == [
        utc(2026, 5, 4, 10, 0, 10),
        utc(2026, 5, 4, 10, 0, 20),
    ]


def test_bounds_read_any_offset_as_the_same_instant() -> None:
    paris = compiled(
        schedule=EVERY_10S,
        starts_at="2026-05-04T12:00:00+02:00",
        ends_at="2026-05-04T12:00:30+02:00",
    )
    zulu = compiled(schedule=EVERY_10S, starts_at=START, ends_at=END)

    assert paris.starts_at == zulu.starts_at == utc(2026, 5, 4, 10)
    assert paris.fires_in(NOW, utc(2027, 1, 1)) == zulu.fires_in(NOW, utc(2027, 1, 1))
    assert paris.config_hash == zulu.config_hash


def test_a_plan_past_the_end_materialises_up_to_it_and_parks_the_cursor() -> None:
    s = compiled(schedule=EVERY_10S, starts_at=START, ends_at=END, misfire_policy="skip")

    p = s.plan_pass(utc(2026, 5, 4, 9, 59), utc(2026, 5, 4, 10, 0, 32), timedelta(minutes=1), 10)

    assert p.materialise == [utc(2026, 5, 4, 10, 0, s) for s in (0, 10, 20, 30)]
    assert p.next_cursor is None


def test_a_plan_before_the_start_waits_for_it() -> None:
    s = compiled(schedule=EVERY_10S, starts_at=START)

    p = s.plan_pass(utc(2026, 5, 4, 9, 59), utc(2026, 5, 4, 9, 59, 50), GRACE, 10)

    assert (p.materialise, p.next_cursor) == ([], utc(2026, 5, 4, 10))


def test_an_end_already_past_is_accepted_and_the_schedule_has_nothing_left() -> None:
    s = compile_schedule({"schedule": EVERY_10S, "ends_at": "2020-01-01T00:00:00Z"}, "c1", now=NOW)

    assert s.next_after(NOW) is None


@pytest.mark.parametrize(
    ("config", "path", "says"),
    [
        pytest.param(
            {"schedule": EVERY_10S, "starts_at": END, "ends_at": START},
            "transport_config.ends_at",
            "before starts_at",
            id="inverted",
        ),
        pytest.param(
            {"schedule": "0 0 12 * * *", "starts_at": START, "ends_at": "2026-05-04T11:00:00Z"},
            "transport_config.ends_at",
            "would never fire",
            id="no instant inside",
        ),
        pytest.param(
            {"schedule": EVERY_10S, "starts_at": "2026-05-04T10:00:00"},
            "transport_config.starts_at",
            "no offset",
            id="no offset",
        ),
        pytest.param(
            {"schedule": EVERY_10S, "ends_at": "next tuesday"},
            "transport_config.ends_at",
            "RFC 3339",
            id="not a timestamp",
        ),
        pytest.param(
            {"schedule": EVERY_10S, "ends_at": 1_788_000_000},
            "transport_config.ends_at",
            "string",
            id="a number",
        ),
    ],
)
def test_bad_bounds_are_refused(config: dict[str, Any], path: str, says: str) -> None:
    found_path, _code, message = refusal(**config)

    assert found_path == path
    assert says in message


# --- jitter -----------------------------------------------------------------------------------


def test_a_rows_due_time_is_its_instant_plus_a_stable_spread_within_the_jitter() -> None:
    s = compiled(schedule="0 * * * * *", jitter_secs=30)
    instant = utc(2026, 5, 4, 10, 1)

    due = s.due_at(instant)

    assert instant <= due < instant + timedelta(seconds=30)
    assert s.due_at(instant) == due
    assert compiled(schedule="0 * * * * *").due_at(instant) == instant, "no jitter: the instant"


def test_the_spread_is_the_same_in_every_process_whatever_its_hash_seed() -> None:
    # Python's hash() of a string changes with PYTHONHASHSEED; the jitter must not.
    here = jitter("channel-1", utc(2026, 5, 4, 10, 1), 3600)
    code = (
        "from datetime import datetime, UTC; from cronledger.cron.compiled import jitter; "
        "print(jitter('channel-1', datetime(2026, 5, 4, 10, 1, tzinfo=UTC), 3600)"
        ".total_seconds())"
    )
    there = {
        subprocess.run(
            [sys.executable, "-c", code],
            env={"PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        for seed in ("1", "2")
    }

    assert there == {str(here.total_seconds())}
    assert here == timedelta(seconds=2695.67), "pinned: stored due times must not move"


def test_a_thousand_channels_at_one_instant_spread_evenly_across_the_window() -> None:
    instant = utc(2026, 5, 4, 10)
    offsets = [jitter(f"channel-{n}", instant, 60).total_seconds() for n in range(1000)]

    histogram = Counter(int(offset // 6) for offset in offsets)  # ten bins of 6 s

    assert all(0 <= offset < 60 for offset in offsets)
    assert sorted(histogram) == list(range(10))
    assert all(60 <= n <= 140 for n in histogram.values()), histogram


@pytest.mark.parametrize(
    ("config", "says"),
    [
        pytest.param(
            {"schedule": "0 * * * * *", "jitter_secs": 60}, "shortest gap, 60 s", id="per minute"
        ),
        pytest.param(
            {"schedule": "0 0,30 * * * *", "jitter_secs": 1800},
            "shortest gap, 1800 s (00:00:00 to 00:30:00)",
            id="half-hourly",
        ),
        pytest.param(
            {"schedule": "0 0 0,23 * * *", "jitter_secs": 3600},
            "shortest gap, 3600 s (23:00:00 to 00:00:00)",
            id="across midnight",
        ),
        pytest.param(
            {"schedule": "0 30 1 * * *", "timezone": "America/New_York", "jitter_secs": 3600},
            "shortest gap, 3600 s (2026-11-01T05:30:00Z to 2026-11-01T06:30:00Z, a clock change)",
            id="a repeated 01:30",
        ),
        pytest.param(
            {"schedule": "0 0 * * * *", "jitter_secs": 3601}, "must be 0..3600", id="too long"
        ),
        pytest.param({"schedule": "0 0 * * * *", "jitter_secs": -1}, "0..3600", id="negative"),
        pytest.param({"schedule": "0 0 * * * *", "jitter_secs": "60"}, "an integer", id="as text"),
    ],
)
def test_a_jitter_not_shorter_than_the_shortest_gap_is_refused_with_the_gap(
    config: dict[str, Any], says: str
) -> None:
    path, _code, message = refusal(**config)

    assert path == "transport_config.jitter_secs"
    assert says in message


def test_a_jitter_under_every_gap_is_accepted() -> None:
    assert compiled(schedule="0 * * * * *", jitter_secs=59).jitter_secs == 59
    assert compiled(schedule="0 0 0,23 * * MON", jitter_secs=3600).jitter_secs == 3600
    assert compiled(at="2026-09-01T02:15:00", jitter_secs=3600).jitter_secs == 3600
    daily = {"schedule": "0 30 1 * * *", "timezone": "America/New_York"}
    assert compiled(**daily, jitter_secs=3599).jitter_secs == 3599


def test_a_jittered_instant_is_judged_by_its_due_time() -> None:
    # Every minute, jittered up to 50 s; a pass at 10:10:30 with 2 minutes of grace: the
    # cutoff is 10:08:30, so 10:08 is late if its row is due 30 s or more after it.
    cursor, now, grace = utc(2026, 5, 4, 10), utc(2026, 5, 4, 10, 10, 30), timedelta(minutes=2)
    eight = utc(2026, 5, 4, 10, 8)
    ids = [f"channel-{n}" for n in range(50)]
    late_id = next(i for i in ids if jitter(i, eight, 50) >= timedelta(seconds=30))
    missed_id = next(i for i in ids if jitter(i, eight, 50) < timedelta(seconds=30))
    config = {"schedule": "0 * * * * *", "jitter_secs": 50, "misfire_policy": "skip"}

    late = compile_schedule(config, late_id, now=NOW).plan_pass(cursor, now, grace, 10)
    missed = compile_schedule(config, missed_id, now=NOW).plan_pass(cursor, now, grace, 10)

    assert late.materialise == [eight, eight + timedelta(minutes=1), eight + timedelta(minutes=2)]
    assert late.skipped is not None and late.skipped.count == 8
    assert missed.materialise == [eight + timedelta(minutes=1), eight + timedelta(minutes=2)]
    assert missed.skipped is not None and missed.skipped.count == 9


# --- the scheduling hash ----------------------------------------------------------------------

BASE: dict[str, Any] = {
    "schedule": "0 15 2 * * *",
    "timezone": "Europe/London",
    "misfire_policy": "catch_up",
    "max_catch_up": 10,
}


def test_a_schedule_without_the_new_keys_hashes_as_it_always_has() -> None:
    # Pinned: a changed hash resets every stored cursor on the next pass.
    assert compiled(**BASE).config_hash == (
        "06f9822efaff8dc8f7bfdc4192281e55ef7de5ad86b13dc38cd437d451bdf59d"
    )


def test_the_bounds_move_the_hash() -> None:
    hashes = {
        compiled(**BASE).config_hash,
        compiled(**BASE, starts_at=START).config_hash,
        compiled(**BASE, ends_at="2031-01-01T00:00:00Z").config_hash,
        compiled(**BASE, ends_at="2032-01-01T00:00:00Z").config_hash,
        compiled(**BASE, starts_at=START, ends_at="2032-01-01T00:00:00Z").config_hash,
    }

    assert len(hashes) == 5


def test_at_moves_the_hash_and_jitter_does_not() -> None:
    one_time = {k: v for k, v in BASE.items() if k != "schedule"}

    assert (
        compiled(**one_time, at="2026-09-01T02:15:00").config_hash
        != compiled(**one_time, at="2026-09-01T02:16:00").config_hash
    )
    assert compiled(**BASE, jitter_secs=600).config_hash == compiled(**BASE).config_hash


def test_every_problem_with_the_new_keys_is_reported_at_once() -> None:
    with pytest.raises(ScheduleInvalid) as caught:
        compiled(
            at="2026-09-01 02:15",
            starts_at="soon",
            ends_at="2026-01-01T00:00:00Z",
            jitter_secs=7200,
        )

    assert sorted(e.path for e in caught.value.errors) == [
        "transport_config.at",
        "transport_config.ends_at",
        "transport_config.jitter_secs",
        "transport_config.starts_at",
    ]
