"""How long planning takes after an outage: the pass must count what it missed, not walk it.

croniter costs about 35 µs a step, so walking 86,400 missed per-second instants one by one
would take seconds. The target is at most 50 ms for each plan below. "first" is a fresh
process's first call (zone transitions not yet cached); "best" is the best of the repeats.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from cronledger.cron import PassPlan, compile_schedule
from cronledger.cron.walk import _transitions

REPEATS = 20
GRACE = timedelta(seconds=60)
INSTANCE_MAX_CATCH_UP = 100


def timed(run: Callable[[], PassPlan]) -> tuple[float, float, PassPlan]:
    _transitions.cache_clear()  # "first" as a fresh process: no zone transitions cached
    started = time.perf_counter()
    plan = run()
    first = time.perf_counter() - started
    best = first
    for _ in range(REPEATS):
        started = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - started)
    return first * 1000, best * 1000, plan


def report(
    label: str,
    expression: str,
    zone: str,
    outage: timedelta,
    now: datetime = datetime(2026, 9, 1, 12, tzinfo=UTC),
    **more: object,
) -> None:
    s = compile_schedule(
        {"schedule": expression, "timezone": zone, "misfire_policy": "latest", **more},
        "bench",
        now=now - outage,
    )
    first, best, plan = timed(lambda: s.plan_pass(now - outage, now, GRACE, INSTANCE_MAX_CATCH_UP))
    skipped = plan.skipped.count if plan.skipped else 0
    print(
        f"plan_pass {label}: first {first:.2f} ms, best {best:.2f} ms "
        f"(skipped {skipped:,}, materialised {len(plan.materialise)})",
        flush=True,
    )


def main() -> None:
    report("per-second, 24 h outage, latest", "* * * * * *", "UTC", timedelta(days=1))
    report(
        "per-second, 24 h outage across London's fall-back, latest",
        "* * * * * *",
        "Europe/London",
        timedelta(days=1),
        now=datetime(2026, 10, 25, 12, tzinfo=UTC),
    )
    report("hourly, one-year outage, latest", "0 0 * * * *", "Europe/London", timedelta(days=365))
    report(
        "hourly on weekdays (day rule walk), one-year outage, latest",
        "0 0 * * * MON-FRI",
        "America/New_York",
        timedelta(days=365),
    )

    report(
        "every 10 s, jittered up to 9 s, 24 h outage, latest",
        "*/10 * * * * *",
        "Europe/London",
        timedelta(days=1),
        jitter_secs=9,
    )
    report(
        "per-second, 24 h outage ending at ends_at (mid-outage), latest",
        "* * * * * *",
        "UTC",
        timedelta(days=1),
        ends_at="2026-09-01T00:00:00Z",
    )

    s = compile_schedule({"schedule": "* * * * * *"}, "bench")
    start = datetime(2026, 9, 1, tzinfo=UTC)
    started = time.perf_counter()
    fires = s.fires_in(start, start + timedelta(days=1) - timedelta(seconds=1))
    elapsed = (time.perf_counter() - started) * 1000
    print(f"fires_in per-second, one day: {len(fires):,} instants in {elapsed:.1f} ms", flush=True)


if __name__ == "__main__":
    main()
