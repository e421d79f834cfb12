"""`reconcile`: the EventBridge tick (every minute) runs one reconcile pass and returns.

One pass a minute is enough because the stack materialises rows `lookahead_secs` ahead (at
least two ticks, see infra/cronledger_infra/props.py): every instant is written at least a
tick before it falls due, so the claim function knows it is coming and starts it on time. A
pass that fails is retried with a backoff until close to the function's deadline. Two
overlapping invocations are harmless (a pass is idempotent).

After each successful pass it emits `ReconcileSucceeded` = 1, which the reconcile alarm counts
(missing data is breaching), beside the pass's own metrics (`OldestPendingAgeSeconds`,
`PendingCount`, `ReconcileDurationSeconds`, `Occurrences` by status); then it writes the
overdue and stalled events, sweeps the outbox to the bus within the same deadline, and gauges
what is left (`UndeliveredEvents`, `OldestUndeliveredEventAgeSeconds`, which an alarm reads).
A failed pass records `DbUnavailable` and the loop tries again after its backoff; an
invocation in which none succeeded is what the alarm is for.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from cronledger.aws import runtime
from cronledger.aws.runtime import logger, metrics, tracer
from cronledger.reconcile import Housekeeping, OutboxRound, PassReport, run_reconcile_loop


@runtime.per_container
def housekeeping() -> Housekeeping:
    """Heartbeat and retention timing, kept across the container's one-pass invocations, and
    the events round after each pass: detection, the sweep to the bus, the outbox gauges."""
    return Housekeeping(events=OutboxRound(runtime.event_sender()))


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@metrics.log_metrics(capture_cold_start_metric=True)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, int]:
    logger.append_keys(tick=event.get("time"))
    totals = {"passes": 0, "inserted": 0, "initialised": 0, "channel_failures": 0}

    def succeeded(report: PassReport) -> None:
        metrics.add_metric(name=runtime.RECONCILE_SUCCEEDED, unit=MetricUnit.Count, value=1)
        totals["passes"] += 1
        totals["inserted"] += report.inserted
        totals["initialised"] += report.initialised
        totals["channel_failures"] += len(report.failed)

    with runtime.emf_sink.recording():
        run_reconcile_loop(
            runtime.ledger(),
            runtime.settings(),
            runtime.loop_until(context),
            on_pass=succeeded,
            passes=1,
            housekeeping=housekeeping(),
        )
    logger.info("reconcile finished", extra=totals)
    return totals
