"""`reconcile`: the minute's tick runs one reconcile pass and returns.

One pass a minute is enough because the stack materialises rows at least two ticks ahead
(infra/cronledger_infra/props.py), so every instant is written before it falls due. A failed
pass is retried with a backoff until close to the deadline; overlapping invocations are
harmless (a pass is idempotent). Each successful pass emits `ReconcileSucceeded` = 1, which the
reconcile alarm counts (missing data is breaching), then writes the overdue and stalled events,
sweeps the outbox to the bus and gauges what is left.

A tick with more due than one shard takes (`CRONLEDGER_RECONCILE_SHARD_SIZE`) invokes this same
function asynchronously with `{"shard": i, "shards": n}` for each further shard and runs the
first itself. A shard's invocation runs that shard's pass and nothing else; one that fails is
redone by the next tick.
"""

from __future__ import annotations

import json
import os
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from cronledger.aws import runtime
from cronledger.aws.runtime import logger, metrics, tracer
from cronledger.errors import CronledgerError
from cronledger.ledger import Shard
from cronledger.reconcile import Housekeeping, OutboxRound, PassReport, run_reconcile_loop

#: Lambda sets it to the function's own name: shards are invocations of this function.
FUNCTION_NAME = "AWS_LAMBDA_FUNCTION_NAME"


def launch(shard: Shard) -> None:
    """A tick's shards but the first: botocore is loaded only by a tick that splits."""
    from cronledger.aws.invoker import dispatch_client, invoke_async

    name = os.environ.get(FUNCTION_NAME, "").strip()
    if not name:
        raise CronledgerError(f"{FUNCTION_NAME} is not set: reconcile cannot start its shards")
    payload = json.dumps({"shard": shard.index, "shards": shard.count}).encode()
    invoke_async(dispatch_client(), name, payload)


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
