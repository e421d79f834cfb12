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

A tick whose pass has more due than one shard takes (`CRONLEDGER_RECONCILE_SHARD_SIZE`) splits
it: it invokes this same function asynchronously once per further shard, with
`{"shard": i, "shards": n}`, and runs the first shard itself. A shard's invocation has its
own deadline and its own connections, runs that shard's pass and nothing else (the tick does
the housekeeping), and one that fails or is throttled is simply redone by the next tick.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from cronledger.aws import runtime
from cronledger.aws.runtime import logger, metrics, tracer
from cronledger.errors import CronledgerError
from cronledger.ledger import Shard
from cronledger.reconcile import Housekeeping, OutboxRound, PassReport, run_reconcile_loop

if TYPE_CHECKING:
    from mypy_boto3_lambda import LambdaClient

#: Lambda sets it to the function's own name: shards are invocations of this function.
FUNCTION_NAME = "AWS_LAMBDA_FUNCTION_NAME"
#: How long one launch may take: a shard not started is redone by the next tick.
LAUNCH_TIMEOUT_SECS = 5.0


class ShardInvoker:
    """Starts a shard of a pass as an asynchronous invocation of `function_name`."""

    def __init__(self, function_name: str, client: LambdaClient | None = None) -> None:
        from cronledger.targets.clients import default_clients

        self.function_name = function_name
        self._client = client or default_clients().lambda_(
            timeout_secs=LAUNCH_TIMEOUT_SECS, retried=True, connections=1
        )

    def __call__(self, shard: Shard) -> None:
        payload = json.dumps({"shard": shard.index, "shards": shard.count})
        self._client.invoke(
            FunctionName=self.function_name, InvocationType="Event", Payload=payload.encode()
        )


@runtime.per_container
def shard_invoker() -> ShardInvoker:
    name = os.environ.get(FUNCTION_NAME, "").strip()
    if not name:
        raise CronledgerError(f"{FUNCTION_NAME} is not set: reconcile cannot start its shards")
    return ShardInvoker(name)


def launch(shard: Shard) -> None:
    """A tick's shards but the first: botocore is loaded only by a tick that splits."""
    shard_invoker()(shard)


def shard_of(event: dict[str, Any]) -> Shard | None:
    """The shard an invocation is asked to run; None for a tick."""
    if "shard" not in event:
        return None
    index, count = event.get("shard"), event.get("shards")
    if not (isinstance(index, int) and isinstance(count, int) and 0 <= index < count):
        raise CronledgerError(
            f"a shard invocation needs integers 0 <= shard < shards, got {index!r} of {count!r}"
        )
    return Shard(index, count)


@runtime.per_container
def housekeeping() -> Housekeeping:
    """Heartbeat and retention timing, kept across the container's one-pass invocations, and
    the events round after each pass: detection, the sweep to the bus, the outbox gauges."""
    return Housekeeping(events=OutboxRound(runtime.event_sender()))


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@metrics.log_metrics(capture_cold_start_metric=True)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, int]:
    shard = shard_of(event)
    logger.append_keys(tick=event.get("time"), shard=None if shard is None else shard.index)
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
            housekeeping=housekeeping() if shard is None else None,
            launch=launch if shard is None else None,
            shard=shard,
        )
    logger.info("reconcile finished", extra=totals)
    return totals
