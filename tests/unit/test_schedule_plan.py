"""Planning a reconcile pass: the grace window, each misfire policy, the clamps, exact counts.

The common scene: a schedule firing every minute, a cursor left at 10:00 and a pass at 10:10:30
with two minutes of grace. Eleven instants are due, 10:00 to 10:10; 10:09 and 10:10 are merely
late, 10:00 to 10:08 (nine) are misfired.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from cronledger.cron import (
    WALK_LIMIT,
    PassPlan,
    Schedule,
    SkipSummary,
    compile_schedule,
    is_misfired,
    kept_misfires,
)
from tests.profiles import examples

GRACE = timedelta(minutes=2)
CURSOR = datetime(2026, 5, 4, 10, 0, tzinfo=UTC)
NOW = datetime(2026, 5, 4, 10, 10, 30, tzinfo=UTC)


def at(minute: int, second: int = 0) -> datetime:
    return datetime(2026, 5, 4, 10, minute, second, tzinfo=UTC)


def every_minute(policy: str, **more: Any) -> Schedule:
    return compile_schedule({"schedule": "0 * * * * *", "misfire_policy": policy, **more}, "c1")


def plan(s: Schedule, instance_max_catch_up: int = 1000) -> PassPlan:
    return s.plan_pass(CURSOR, NOW, GRACE, instance_max_catch_up)


def test_skip_runs_only_the_late_and_summarises_every_misfire() -> None:
    p = plan(every_minute("skip"))

    assert p.materialise == [at(9), at(10)]
    assert p.skipped == SkipSummary(
        oldest=at(0),
        newest=at(8),
        count=9,
        reason="skipped 9 missed occurrence(s) between 2026-05-04T10:00:00Z and "
        '2026-05-04T10:08:00Z (misfire_policy "skip")',
    )
    assert p.next_cursor == at(11)


def test_latest_runs_the_newest_misfire_and_the_late() -> None:
    p = plan(every_minute("latest"))

    assert p.materialise == [at(8), at(9), at(10)]
    assert p.skipped is not None
    assert (p.skipped.oldest, p.skipped.newest, p.skipped.count) == (at(0), at(7), 8)
    assert p.skipped.reason.endswith('(misfire_policy "latest")')
    assert p.next_cursor == at(11)


def test_catch_up_runs_the_oldest_misfires_up_to_the_channel_bound() -> None:
    p = plan(every_minute("catch_up", max_catch_up=3))

    assert p.materialise == [at(0), at(1), at(2), at(9), at(10)]
    assert p.skipped is not None
    assert (p.skipped.oldest, p.skipped.newest, p.skipped.count) == (at(3), at(8), 6)


def test_the_instance_bound_clamps_a_larger_channel_bound() -> None:
    p = plan(every_minute("catch_up", max_catch_up=5), instance_max_catch_up=2)

    assert p.materialise == [at(0), at(1), at(9), at(10)]
    assert p.skipped is not None
    assert (p.skipped.oldest, p.skipped.newest, p.skipped.count) == (at(2), at(8), 7)


def test_catch_up_within_its_bound_drops_nothing() -> None:
    p = plan(every_minute("catch_up", max_catch_up=100))

    assert p.materialise == [at(m) for m in range(11)]
    assert p.skipped is None


def test_a_single_misfire_under_latest_is_run_not_summarised() -> None:
    s = every_minute("latest")

    p = s.plan_pass(at(8), NOW, GRACE, 1000)

    assert p.materialise == [at(8), at(9), at(10)]
    assert p.skipped is None


@pytest.mark.parametrize("policy", ["skip", "latest", "catch_up"])
def test_an_instant_within_the_grace_window_is_late_not_misfired(policy: str) -> None:
    # Given a pass 90 s after 10:00 with 5 minutes of grace: 10:00 and 10:01 are late
    s = every_minute(policy, **({"max_catch_up": 1} if policy == "catch_up" else {}))

    p = s.plan_pass(at(0), at(1, 30), timedelta(minutes=5), 1)

    assert p.materialise == [at(0), at(1)]
    assert p.skipped is None
    assert p.next_cursor == at(2)


def test_an_instant_exactly_at_the_grace_edge_is_late() -> None:
    p = every_minute("skip").plan_pass(at(0), at(2), timedelta(minutes=1), 1)

    assert p.materialise == [at(1), at(2)]
    assert p.skipped is not None and p.skipped.newest == at(0)


def test_with_no_grace_only_the_instant_at_now_is_late() -> None:
    p = every_minute("skip").plan_pass(at(0), at(3), timedelta(0), 1)

    assert p.materialise == [at(3)]
    assert p.skipped is not None and p.skipped.count == 3


def test_a_cursor_not_yet_due_plans_nothing_and_stays_put() -> None:
    p = every_minute("latest").plan_pass(at(5), at(2, 30), GRACE, 1)

    assert p == PassPlan(materialise=[], skipped=None, next_cursor=at(5))


def test_a_day_long_outage_of_a_per_second_schedule_is_counted_exactly() -> None:
    # Given a per-second schedule whose cursor stopped 24 hours before the pass
    s = compile_schedule({"schedule": "* * * * * *", "misfire_policy": "latest"}, "c1")
    cursor = datetime(2026, 3, 1, tzinfo=UTC)
    now = datetime(2026, 3, 1, 23, 59, 59, 500_000, tzinfo=UTC)

    # When the pass plans with no grace
    p = s.plan_pass(cursor, now, timedelta(0), 1000)

    # Then 86,400 instants were missed: the newest runs, 86,399 are one summary
    assert p.materialise == [datetime(2026, 3, 1, 23, 59, 59, tzinfo=UTC)]
    assert p.skipped is not None
    assert p.skipped.count == 86_399
    assert p.skipped.oldest == cursor
    assert p.skipped.newest == datetime(2026, 3, 1, 23, 59, 58, tzinfo=UTC)
    assert p.next_cursor == datetime(2026, 3, 2, tzinfo=UTC)


def ten_minutely_at_one_am(zone: str) -> Schedule:
    return compile_schedule(
        {"schedule": "0 */10 1 * * *", "timezone": zone, "misfire_policy": "skip"}, "c1"
    )


def test_an_outage_across_spring_forward_counts_no_instant_in_the_gap() -> None:
    # Given six instants a day at local 01:xx, and London's 01:xx missing on 2026-03-29
    s = ten_minutely_at_one_am("Europe/London")

    # When a pass plans local days 03-26 to 04-01
    p = s.plan_pass(
        datetime(2026, 3, 26, tzinfo=UTC), datetime(2026, 4, 1, 23, 59, tzinfo=UTC), timedelta(0), 1
    )

    # Then six of seven days count: 36 misses, from 01:00 GMT to 01:50 BST
    assert p.materialise == []
    assert p.skipped is not None
    assert p.skipped.count == 36
    assert p.skipped.oldest == datetime(2026, 3, 26, 1, 0, tzinfo=UTC)
    assert p.skipped.newest == datetime(2026, 4, 1, 0, 50, tzinfo=UTC)


def test_an_outage_across_fall_back_counts_the_repeated_hour_twice() -> None:
    # Given six instants a day at local 01:xx, and New York's 01:xx twice on 2026-11-01
    s = ten_minutely_at_one_am("America/New_York")

    # When a pass plans local days 10-29 to 11-03
    p = s.plan_pass(
        datetime(2026, 10, 29, tzinfo=UTC), datetime(2026, 11, 4, tzinfo=UTC), timedelta(0), 1
    )

    # Then six days count once and one twice: 42 misses, from 01:00 EDT to 01:50 EST
    assert p.skipped is not None
    assert p.skipped.count == 42
    assert p.skipped.oldest == datetime(2026, 10, 29, 5, 0, tzinfo=UTC)
    assert p.skipped.newest == datetime(2026, 11, 3, 6, 50, tzinfo=UTC)


def test_late_instants_beyond_the_walk_limit_resume_next_pass() -> None:
    # Given three days of per-second instants all inside a very long grace window
    s = compile_schedule({"schedule": "* * * * * *"}, "c1")
    cursor = datetime(2026, 1, 1, tzinfo=UTC)

    p = s.plan_pass(cursor, cursor + timedelta(days=3), timedelta(days=7), 1)

    # Then the first WALK_LIMIT run, nothing is summarised, and the cursor resumes after them
    assert len(p.materialise) == WALK_LIMIT
    assert p.materialise[-1] == cursor + timedelta(seconds=WALK_LIMIT - 1)
    assert p.skipped is None
    assert p.next_cursor == cursor + timedelta(seconds=WALK_LIMIT)


def test_a_schedule_with_no_instant_left_parks_the_cursor() -> None:
    s = compile_schedule({"schedule": "0 0 0 29 2 *"}, "c1", now=datetime(9996, 1, 1, tzinfo=UTC))

    p = s.plan_pass(datetime(9996, 1, 1, tzinfo=UTC), datetime(9996, 3, 1, tzinfo=UTC), GRACE, 1)

    assert p.materialise == [datetime(9996, 2, 29, tzinfo=UTC)]
    assert p.next_cursor is None


def test_bad_plan_arguments_are_refused() -> None:
    s = every_minute("latest")

    with pytest.raises(ValueError, match="naive"):
        s.plan_pass(datetime(2026, 5, 4, 10), NOW, GRACE, 1)
    with pytest.raises(ValueError, match="naive"):
        s.plan_pass(CURSOR, datetime(2026, 5, 4, 10), GRACE, 1)
    with pytest.raises(ValueError, match="grace"):
        s.plan_pass(CURSOR, NOW, timedelta(seconds=-1), 1)
    with pytest.raises(ValueError, match="instance_max_catch_up"):
        s.plan_pass(CURSOR, NOW, GRACE, 0)


def test_an_instant_is_misfired_only_when_its_due_time_is_older_than_the_grace() -> None:
    assert not is_misfired(NOW - GRACE, NOW, GRACE), "exactly at the edge is late"
    assert is_misfired(NOW - GRACE - timedelta(microseconds=1), NOW, GRACE)
    assert not is_misfired(NOW + timedelta(seconds=5), NOW, GRACE), "not yet due at all"


@pytest.mark.parametrize(
    ("policy", "count", "bound", "kept"),
    [
        ("skip", 5, 3, []),
        ("latest", 5, 3, [4]),
        ("latest", 1, 3, [0]),
        ("catch_up", 5, 3, [0, 1, 2]),
        ("catch_up", 2, 3, [0, 1]),
        ("latest", 0, 3, []),
        ("catch_up", 0, 3, []),
    ],
)
def test_each_policy_keeps_a_prefix_or_a_suffix_of_the_misfired(
    policy: Any, count: int, bound: int, kept: list[int]
) -> None:
    assert list(kept_misfires(policy, count, bound)) == kept


# --- plans shared within a pass ---------------------------------------------------------------


def test_channels_of_one_calendar_due_from_one_cursor_share_one_plan() -> None:
    # Given three channels on one expression, differing in all else, due from one cursor
    schedules = [
        compile_schedule({"schedule": "0 * * * * *", **more}, channel_id)
        for channel_id, more in [
            ("c1", {}),
            ("c2", {"misfire_policy": "skip", "jitter_secs": 30}),
            ("c3", {"misfire_policy": "catch_up", "max_catch_up": 3}),
        ]
    ]
    shared: dict[Any, PassPlan] = {}

    # When a pass plans them with the instant late, not misfired
    plans = [s.plan_pass(at(10), NOW, GRACE, 1000, shared) for s in schedules]

    # Then the first one's plan serves all three, as each would have planned alone
    assert len(shared) == 1 and plans[1] is plans[0] and plans[2] is plans[0]
    assert plans == [s.plan_pass(at(10), NOW, GRACE, 1000) for s in schedules]
    assert plans[0].materialise == [at(10)] and plans[0].next_cursor == at(11)


def test_a_plan_with_a_misfired_instant_stays_its_channels_own() -> None:
    # Given two channels of one jittered calendar whose newest misfired instant, 10:08, is due
    # after the cutoff (10:08:30) for one of them and before it for the other
    config = {"schedule": "0 * * * * *", "misfire_policy": "skip", "jitter_secs": 50}
    candidates = [compile_schedule(config, f"c{n}") for n in range(100)]
    cutoff = NOW - GRACE
    kept = next(s for s in candidates if not is_misfired(s.due_at(at(8)), NOW, GRACE))
    dropped = next(s for s in candidates if is_misfired(s.due_at(at(8)), NOW, GRACE))
    assert kept.due_at(at(8)) >= cutoff > dropped.due_at(at(8))
    shared: dict[Any, PassPlan] = {}

    # When a pass plans both from one cursor, 10:08
    plans = [s.plan_pass(at(8), NOW, GRACE, 1000, shared) for s in (kept, dropped)]

    # Then each got the plan it would have got alone: 10:08 runs for one only
    assert plans == [s.plan_pass(at(8), NOW, GRACE, 1000) for s in (kept, dropped)]
    assert (plans[0].materialise, plans[0].skipped) == ([at(8), at(9), at(10)], None)
    assert plans[1].materialise == [at(9), at(10)]
    assert plans[1].skipped is not None and plans[1].skipped.count == 1
    assert not shared


#: Expressions with their shortest gap (a jitter must be shorter).
SHARED_CALENDARS = [("0 * * * * *", 60), ("*/10 * * * * *", 10), ("0 0 * * * *", 3600)]


@settings(max_examples=examples(200), deadline=None)
@given(data=st.data())
def test_a_plan_made_through_the_shared_plans_is_the_one_made_alone(data: st.DataObject) -> None:
    # Given channels on a few calendars, each with its own policy, jitter and cursor (drawn
    # from a few, so that some share one), and one pass's now and grace
    now = CURSOR + timedelta(seconds=data.draw(st.integers(-60, 3 * 3600)))
    grace = timedelta(seconds=data.draw(st.integers(0, 900)))
    shared: dict[Any, PassPlan] = {}
    for n in range(data.draw(st.integers(2, 12))):
        expression, gap = data.draw(st.sampled_from(SHARED_CALENDARS))
        config = {
            "schedule": expression,
            "misfire_policy": data.draw(st.sampled_from(["skip", "latest", "catch_up"])),
            "max_catch_up": data.draw(st.integers(1, 5)),
            "jitter_secs": data.draw(st.integers(0, gap - 1)),
        }
        schedule = compile_schedule(config, f"c{n}-{data.draw(st.integers(0, 99))}")
        cursor = CURSOR + timedelta(seconds=data.draw(st.sampled_from([0, 10, 60, 3600])))

        # When the pass plans it through the plans shared so far, then it gets its own plan
        assert schedule.plan_pass(cursor, now, grace, 3, shared) == schedule.plan_pass(
            cursor, now, grace, 3
        )
