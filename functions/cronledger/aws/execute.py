"""`execute`: one asynchronous invocation per dispatched occurrence, `{"occurrence_id",
"claimant"}` (ids only, SPEC §4), runs one attempt under the function's own deadline.

Every log line of the attempt (this handler's, the executor's, a target module's) carries the
occurrence id and claimant from the event and, as soon as the executor learns them, the channel
id, the attempt number and the fencing token (absent under `allow`, where there is none). The
executor announces them through its `annotate` hook, which appends them to the log context.

The attempt's trace id is the X-Ray trace of this invocation (`_X_AMZN_TRACE_ID`'s `Root`),
so the ledger row leads to the trace; without X-Ray the executor mints one. An attempt that
finds its occurrence no longer its own is not an error: it writes nothing and returns. A
malformed event, or a database that cannot be reached, is: the invocation fails, and with no
retries (the stack's async config) lands in the executor's dead-letter queue.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from cronledger.aws import runtime
from cronledger.aws.runtime import logger, metrics, tracer
from cronledger.errors import CronledgerError
from cronledger.execute import Executor

TRACE_HEADER = "_X_AMZN_TRACE_ID"


class MalformedDispatch(CronledgerError):
    """The event is not `{"occurrence_id": str, "claimant": str}`."""


@runtime.per_container
def executor() -> Executor:
    return Executor(runtime.ledger(), runtime.settings(), annotate=logger.append_keys)


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@metrics.log_metrics(capture_cold_start_metric=True)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    occurrence_id, claimant = dispatched_ids(event)
    logger.append_keys(occurrence_id=occurrence_id, claimant=claimant)
    with runtime.emf_sink.recording():
        report = executor().run_attempt(
            occurrence_id, claimant, runtime.deadline(context), trace_id=xray_trace_id()
        )
    answer = dataclasses.asdict(report)
    logger.info("attempt finished", extra={k: v for k, v in answer.items() if k != "occurrence_id"})
    return answer


def dispatched_ids(event: Any) -> tuple[str, str]:
    """The two ids of a dispatch; anything else is refused, naming what arrived."""
    if isinstance(event, dict):
        occurrence_id, claimant = event.get("occurrence_id"), event.get("claimant")
        if (
            isinstance(occurrence_id, str)
            and occurrence_id
            and isinstance(claimant, str)
            and claimant
        ):
            return occurrence_id, claimant
    raise MalformedDispatch(
        'an executor event is {"occurrence_id": "<id>", "claimant": "<id>"}; got '
        + _describe(event)
    )


def xray_trace_id() -> str | None:
    """The `Root` of this invocation's X-Ray trace header, when Lambda set one."""
    header = os.environ.get(TRACE_HEADER, "")
    for part in header.split(";"):
        key, _, value = part.strip().partition("=")
        if key == "Root" and value:
            return value
    return None


def _describe(event: Any) -> str:
    if isinstance(event, dict):
        return "keys " + ", ".join(sorted(map(str, event))) if event else "an empty object"
    return f"a {type(event).__name__}"
