"""Billed-seconds benchmark: what `reconcile` + `claim` cost per hour on AWS, measured on the
real handlers (a scratch PostgreSQL, a loopback Lambda API answering in 30 ms, warm
containers) in short windows, and added up over an hour's 60 ticks of each:

(a) 10 hourly channels, all firing at minute 0. 59 of an hour's claim ticks and all 60
    reconcile ticks find nothing due in their minute: each is one measured idle tick. The
    claim tick of the minute they fire in waits for them: its work is measured on a tick
    whose channels fire 3 s in (the wait taken out), and its wait is the expected one, half a
    tick (the tick's phase against minute 0 is arbitrary).
(b) 200 per-second channels. Something is due every second, so claim runs each invocation to
    its deadline (measured: a 10 s window that it stays in to the end, scaled to a minute's
    57 s); reconcile's pass writes one tick's rows, 60 per channel (measured with the cursors
    set back a tick, the database's clock being the one that decides).

Against today's 6,840 s (both loops ~57 s of every minute); target for (a): under 5 %.
"""

from __future__ import annotations

import statistics
import time
from datetime import timedelta

from cronledger.ledger import CHANNEL_ACTIVE, Ledger
from tests.bench.lambda_rig import (
    claim_tick,
    empty,
    function_environment,
    loopback_lambda,
    reconcile_tick,
)
from tests.bench.pg import scratch_database

TODAY_SECS_PER_HOUR = 6_840.0
TARGET_SHARE = 0.05
TICKS_PER_HOUR = 60
TICK_SECS = 60.0
#: A minute's invocation loops until 3 s before its end (`LOOP_MARGIN_SECS`).
BUSY_SECS_PER_TICK = 57.0
SAMPLES = 7
SETTINGS = {"max_in_flight": 10_000, "claim_batch_size": 1000, "lookahead_secs": 150}
TARGET = {"type": "python", "callable": "cronledger.demo:hello"}


def main() -> None:
    with scratch_database("billed") as url, loopback_lambda(0.030) as api:
        ledger = Ledger.connect(url)
        ledger.migrate()
        function_environment(url, api.url, python_targets="cronledger.demo", **SETTINGS)
        hourly(ledger)
        per_second(ledger)
        ledger.dispose()


def hourly(ledger: Ledger) -> None:
    from tests.aws.invocations import forget_container

    empty(ledger)
    forget_container()
    fire_at = ledger.db_now().replace(microsecond=0) + timedelta(seconds=5)
    schedule = f"{fire_at.second} {fire_at.minute} {fire_at.hour} * * *"
    create_channels(ledger, "hourly", 10, schedule)
    reconcile_tick()  # initialises the cursors
    reconcile_tick()  # materialises the instant, 5 s ahead
    wait = (fire_at - ledger.db_now()).total_seconds()
    started = time.perf_counter()
    dispatched = claim_tick()
    fire_work = time.perf_counter() - started - wait
    assert dispatched == 10, f"the fire tick dispatched {dispatched} of 10"
    idle_reconcile = median_secs(reconcile_tick)
    idle_claim = median_secs(claim_tick)
    reconcile_total = TICKS_PER_HOUR * idle_reconcile
    claim_total = (TICKS_PER_HOUR - 1) * idle_claim + TICK_SECS / 2 + fire_work
    report(
        "(a) 10 hourly channels",
        reconcile_total,
        claim_total,
        f"reconcile 60 x {idle_reconcile * 1000:.0f} ms; claim 59 x {idle_claim * 1000:.0f} ms "
        f"+ the fire tick {TICK_SECS / 2:.0f} s expected wait + {fire_work * 1000:.0f} ms work",
        target=True,
    )


def per_second(ledger: Ledger) -> None:
    from tests.aws.invocations import forget_container

    empty(ledger)
    forget_container()
    create_channels(ledger, "every-second", 200, "* * * * * *")
    reconcile_tick()  # initialises the cursors
    reconcile_tick()  # writes the lookahead's rows
    passes = []
    for _ in range(3):
        set_back_a_tick(ledger)
        started = time.perf_counter()
        inserted = reconcile_tick()["inserted"]
        passes.append(time.perf_counter() - started)
        assert inserted >= 200 * 55, f"a tick's pass wrote {inserted} rows"
    window_secs = 10.0
    started = time.perf_counter()
    claim_tick(remaining_ms=int((window_secs + 3) * 1000))
    stayed = (time.perf_counter() - started) / window_secs
    reconcile_total = TICKS_PER_HOUR * statistics.median(passes)
    claim_total = TICKS_PER_HOUR * BUSY_SECS_PER_TICK * min(stayed, 1.0)
    report(
        "(b) 200 per-second channels",
        reconcile_total,
        claim_total,
        f"reconcile 60 x {statistics.median(passes) * 1000:.0f} ms (12,000 rows a pass); "
        f"claim stays {stayed:.0%} of its window: 60 x {BUSY_SECS_PER_TICK * min(stayed, 1):.0f} s",
        target=False,
    )


def create_channels(ledger: Ledger, prefix: str, count: int, schedule: str) -> None:
    for n in range(count):
        ledger.channels.create_channel(
            f"{prefix}-{n}",
            {"schedule": schedule},
            TARGET,
            timeout_ms=10_000,
            status=CHANNEL_ACTIVE,
        )


def set_back_a_tick(ledger: Ledger) -> None:
    """As if a tick had passed since the last pass: each cursor 90 s from now (one tick short
    of the 150 s lookahead), the rows from there on not yet written."""
    with ledger.engine.begin() as conn:
        conn.exec_driver_sql(
            "DELETE FROM cron_occurrences WHERE scheduled_for >= now() + interval '90 seconds'"
        )
        conn.exec_driver_sql(
            "UPDATE cron_schedule_state SET next_fire_at = "
            "date_trunc('second', now()) + interval '90 seconds'"
        )


def median_secs(tick: object) -> float:
    samples = []
    for _ in range(SAMPLES):
        started = time.perf_counter()
        tick()  # type: ignore[operator]
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def report(label: str, reconcile: float, claim: float, detail: str, *, target: bool) -> None:
    total = reconcile + claim
    share = total / TODAY_SECS_PER_HOUR
    verdict = ""
    if target:
        verdict = f", target under {TARGET_SHARE:.0%}: {'ok' if share < TARGET_SHARE else 'OVER'}"
    print(
        f"billed seconds per hour, {label}: {total:,.1f} s = reconcile {reconcile:,.1f} + claim "
        f"{claim:,.1f} ({share:.1%} of today's {TODAY_SECS_PER_HOUR:,.0f} s{verdict}); {detail}",
        flush=True,
    )


if __name__ == "__main__":
    main()
