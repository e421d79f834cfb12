"""`claim`: the EventBridge tick (every minute) runs the claim loop until close to the
function's deadline, handing each claimed occurrence to the executor as an asynchronous
(`Event`) invocation of ids only (SPEC §4). The executor's name comes from the stack
(`CRONLEDGER_EXECUTE_FUNCTION_NAME`; only this function is told it, and may invoke it).
"""

from __future__ import annotations

import os
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from cronledger.aws import runtime
from cronledger.aws.runtime import logger, metrics, tracer
from cronledger.claim import run_claim_loop
from cronledger.errors import CronledgerError
from cronledger.invokers import LambdaInvoker

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
    logger.append_keys(tick=event.get("time"))
    with runtime.emf_sink.recording():
        dispatched = run_claim_loop(
            runtime.ledger(), runtime.settings(), invoker(), runtime.loop_until(context)
        )
    metrics.add_metric(name=runtime.DISPATCHED, unit=MetricUnit.Count, value=dispatched)
    logger.info("claim finished", extra={"dispatched": dispatched})
    return {"dispatched": dispatched}
