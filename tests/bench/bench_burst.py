"""Burst benchmark: a midnight's worth of occurrences due at once, handed over by one
invocation of the real claim handler to a loopback Lambda API that takes `LATENCY_SECS` to
accept each asynchronous invoke (what one costs on AWS).

Printed per size: occurrences handed over per second of the invocation, the invokes it took,
and that each occurrence reached the executor exactly once, under the claimant its row is
leased to. The container is warm (a quiet tick runs first, as every minute has one). The
same 3,000 are also dispatched one occurrence per invoke (the lanes alone, no batches): the
figure behind batching (docs: "At scale and at cost"). Target: 1,000/s.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass

from cronledger import invokers
from cronledger.ledger import Ledger
from tests.bench.lambda_rig import (
    LoopbackLambda,
    claim_tick,
    function_environment,
    loopback_lambda,
    seed_due,
)
from tests.bench.pg import scratch_database

LATENCY_SECS = 0.030
SIZES = (3_000, 10_000)
TARGET_PER_SEC = 1_000.0
#: What a burst-ready installation sets (docs: "At scale and at cost"): claims of up to a thousand rows,
#: and room for the whole burst in flight.
SETTINGS = {"claim_batch_size": 1000, "max_in_flight": 10_000, "claim_lease_secs": 600}


@dataclass
class Burst:
    batched: bool
    elapsed_secs: float
    dispatched: int
    leases: dict[str, str]  # occurrence id -> the claimant its row is leased to

    def check(self, api: LoopbackLambda) -> int:
        """Each occurrence was carried by exactly one invoke, under the claimant its row is
        leased to; answers how many invokes carried them."""
        payloads = [p for p in api.payloads if self.leases.keys() & set(api.ids_of(p))]
        carried = Counter(i for p in payloads for i in api.ids_of(p))
        assert set(carried) == set(self.leases), "an occurrence was not dispatched"
        assert max(carried.values()) == 1, "an occurrence was dispatched twice"
        assert self.dispatched == len(self.leases), "the handler miscounts"
        for payload in payloads:
            assert {self.leases[i] for i in api.ids_of(payload)} == {payload["claimant"]}
        return len(payloads)


def main() -> None:
    with scratch_database("burst") as url, loopback_lambda(LATENCY_SECS) as api:
        ledger = Ledger.connect(url)
        ledger.migrate()
        function_environment(url, api.url, **SETTINGS)
        bursts = [burst(ledger, size, batched=True) for size in SIZES]
        bursts.append(burst(ledger, SIZES[0], batched=False))
        ledger.dispose()
    for run in bursts:
        invokes = run.check(api)
        rate = len(run.leases) / run.elapsed_secs
        shape = "batched" if run.batched else "one occurrence per invoke"
        verdict = ("ok" if rate >= TARGET_PER_SEC else "UNDER") if run.batched else "comparison"
        print(
            f"burst, {len(run.leases):,} due, {LATENCY_SECS * 1000:.0f} ms per invoke, {shape}: "
            f"{rate:,.0f} occurrences/s in {invokes:,} invokes, each dispatched exactly once "
            f"(target {TARGET_PER_SEC:,.0f}/s: {verdict})",
            flush=True,
        )


def burst(ledger: Ledger, size: int, *, batched: bool) -> Burst:
    """One claim invocation over `size` due occurrences."""
    from cronledger.aws import runtime

    with ledger.engine.begin() as conn:
        conn.exec_driver_sql("DELETE FROM cron_occurrences")
    most = invokers.MOST_PER_INVOKE
    invokers.MOST_PER_INVOKE = most if batched else 1
    try:
        runtime.forget_container()
        claim_tick()  # the quiet tick before: the container is warm
        due = seed_due(ledger, size)
        started = time.perf_counter()
        dispatched = claim_tick()
        elapsed = time.perf_counter() - started
    finally:
        invokers.MOST_PER_INVOKE = most
        runtime.forget_container()
    with ledger.engine.connect() as conn:
        leases = dict(conn.exec_driver_sql("SELECT id, claimed_by FROM cron_occurrences").all())
    assert set(leases) == due and all(leases.values()), "a due occurrence was not leased"
    return Burst(batched, elapsed, dispatched, leases)


if __name__ == "__main__":
    main()
