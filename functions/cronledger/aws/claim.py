"""`claim`: the minute's tick, or a wake from the API, runs the claim loop while something is
due, handing what it claims to the executor (`CRONLEDGER_EXECUTE_FUNCTION_NAME`) as
asynchronous invocations of ids only (docs/guarantees.md#dispatch, `cronledger.aws.invoker`).
With nothing due it returns at once: a quiet minute costs one claim round.
"""

from __future__ import annotations

import os
from typing import Any

# Every invocation calls Lambda's API: botocore is loaded (and traced) now, not by the first.
import botocore.session  # noqa: F401
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from cronledger.aws import runtime
from cronledger.aws.invoker import LambdaInvoker
from cronledger.aws.runtime import logger, metrics, tracer
from cronledger.claim import run_claim_loop
from cronledger.errors import CronledgerError

EXECUTE_FUNCTION_NAME = "CRONLEDGER_EXECUTE_FUNCTION_NAME"


@runtime.per_container
def invoker() -> LambdaInvoker:
    name = os.environ.get(EXECUTE_FUNCTION_NAME, "").strip()
    if not name:
        raise CronledgerError(
            f"{EXECUTE_FUNCTION_NAME} is not set: claim has no executor to invoke"
        )
    return LambdaInvoker(name)


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@metrics.log_metrics(capture_cold_start_metric=True)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, int]:
    logger.append_keys(tick=event.get("time"), wake=event.get("wake"))
    with runtime.emf_sink.recording():
        dispatched = run_claim_loop(
            runtime.ledger(),
            runtime.settings(),
            invoker(),
            runtime.loop_until(context),
            while_due=True,
        )
    metrics.add_metric(name=runtime.DISPATCHED, unit=MetricUnit.Count, value=dispatched)
    logger.info("claim finished", extra={"dispatched": dispatched})
    return {"dispatched": dispatched}
