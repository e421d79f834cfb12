"""Burst benchmark: a midnight's worth of occurrences due at once, handed over by one
invocation of the real claim handler to a loopback Lambda API that takes `LATENCY_SECS` to
accept each asynchronous invoke (what one costs on AWS).

Printed per size: occurrences handed over per second of the invocation, the invokes it took,
and that each occurrence reached the executor exactly once, under the claimant its row is
leased to. The container is warm (a quiet tick runs first, as every minute has one). The
same 3,000 are also dispatched one occurrence per invoke (the lanes alone, no batches): the
figure behind batching (docs: "At scale and at cost"). Then the same burst at the installation's default
settings (the claim waits for room under `max_in_flight`), with executors that settle each
occurrence `SETTLE_SECS` after its invoke was accepted: what a default installation gets,
with no tuning. Target: 1,000/s.
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import sqlalchemy as sa

from cronledger.aws import invoker as lambda_invoker
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
#: How long an executor runs an occurrence after its invoke was accepted, at default settings.
SETTLE_SECS = 0.050


@dataclass
class Burst:
    batched: bool
    label: str
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
        for name in SETTINGS:
            del os.environ[f"CRONLEDGER_{name.upper()}"]
        with settling_executors(ledger):
            bursts.append(burst(ledger, SIZES[0], batched=True, label="default settings"))
        ledger.dispose()
    for run in bursts:
        invokes = run.check(api)
        rate = len(run.leases) / run.elapsed_secs
        shape = "batched" if run.batched else "one occurrence per invoke"
        verdict = ("ok" if rate >= TARGET_PER_SEC else "UNDER") if run.batched else "comparison"
        print(
            f"burst, {len(run.leases):,} due, {LATENCY_SECS * 1000:.0f} ms per invoke, {shape}, "
            f"{run.label}: {rate:,.0f} occurrences/s in {invokes:,} invokes, each dispatched "
            f"exactly once (target {TARGET_PER_SEC:,.0f}/s: {verdict}; load "
            f"{os.getloadavg()[0]:.1f})",
            flush=True,
        )


@contextmanager
def settling_executors(ledger: Ledger) -> Iterator[None]:
    """Executors that complete each claimed occurrence `SETTLE_SECS` after its invoke was
    accepted (`LATENCY_SECS` after its claim), keeping the claimant it ran under."""
    stop = threading.Event()
    done = sa.text(
        "UPDATE cron_occurrences SET status = 'completed', claimed_until = NULL, "
        "completed_at = statement_timestamp() WHERE status = 'claimed' "
        "AND updated_at < statement_timestamp() - make_interval(secs => :after)"
    )

    def settle() -> None:
        while not stop.wait(0.005):
            with ledger.engine.begin() as conn:
                conn.execute(done, {"after": LATENCY_SECS + SETTLE_SECS})

    worker = threading.Thread(target=settle, daemon=True)
    worker.start()
    try:
        yield
    finally:
        stop.set()
        worker.join()


def burst(ledger: Ledger, size: int, *, batched: bool, label: str = "burst-ready") -> Burst:
    """One claim invocation over `size` due occurrences."""
    from cronledger.aws import runtime

    with ledger.engine.begin() as conn:
        conn.exec_driver_sql("DELETE FROM cron_occurrences")
    most = lambda_invoker.MOST_PER_INVOKE
    lambda_invoker.MOST_PER_INVOKE = most if batched else 1
    try:
        runtime.forget_container()
        claim_tick()  # the quiet tick before: the container is warm
        due = seed_due(ledger, size)
        started = time.perf_counter()
        dispatched = claim_tick()
        elapsed = time.perf_counter() - started
    finally:
        lambda_invoker.MOST_PER_INVOKE = most
        runtime.forget_container()
    with ledger.engine.connect() as conn:
        leases = dict(conn.exec_driver_sql("SELECT id, claimed_by FROM cron_occurrences").all())
    assert set(leases) == due and all(leases.values()), "a due occurrence was not leased"
    return Burst(batched, label, elapsed, dispatched, leases)


if __name__ == "__main__":
    main()
