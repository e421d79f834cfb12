"""`execute`: an asynchronous invocation of ids only (docs/guarantees.md#dispatch), `{"occurrence_id", "claimant"}`
for one occurrence or, during a burst, `{"occurrence_ids": [...], "claimant"}` for a batch
(`cronledger.aws.invoker`), runs each attempt under the function's own deadline; a batch's
attempts run side by side, one thread each, so each keeps its own timeout and none waits for
another's target. Their ledger writes go together (`Executor.batch`): the opens in one
statement, the starts in one transaction, the ends in micro-batches, each write still
conditional on its own attempt. What they share is the container: one that dies (out of
memory, the function's timeout) abandons them all, and each is recovered when its lease
expires.

Every log line of the attempt (this handler's, the executor's, a target module's) carries the
occurrence id and claimant from the event and, as soon as the executor learns them, the channel
id, the attempt number and the fencing token (absent under `allow`, where there is none). The
executor announces them through its `annotate` hook, which appends them to the log context
of the attempt's own thread.

The attempt's trace id is the X-Ray trace of this invocation (`_X_AMZN_TRACE_ID`'s `Root`),
so the ledger row leads to the trace; without X-Ray the executor mints one. An attempt that
finds its occurrence no longer its own is not an error: it writes nothing and returns. A
malformed event, or a database that cannot be reached, is: the invocation fails, and with no
retries (the stack's async config) lands in the executor's dead-letter queue.
"""

from __future__ import annotations

import dataclasses
import os
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from cronledger.aws import runtime
from cronledger.aws.runtime import logger, metrics, tracer
from cronledger.errors import CronledgerError
from cronledger.execute import Batch, Executor

TRACE_HEADER = "_X_AMZN_TRACE_ID"


class MalformedDispatch(CronledgerError):
    """The event is not `{"occurrence_id": str, "claimant": str}` nor a batch of ids."""


@runtime.per_container
def executor() -> Executor:
    return Executor(runtime.ledger(), runtime.settings(), annotate=logger.thread_safe_append_keys)


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@metrics.log_metrics(capture_cold_start_metric=True)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    occurrence_ids, claimant = dispatched_ids(event)
    logger.append_keys(claimant=claimant)
    deadline, trace_id = runtime.deadline(context), xray_trace_id()

    def attempt(occurrence_id: str, batch: Batch | None = None) -> dict[str, Any]:
        logger.thread_safe_append_keys(occurrence_id=occurrence_id)
        try:
            report = executor().run_attempt(occurrence_id, claimant, deadline, trace_id, batch)
            answer = dataclasses.asdict(report)
            logger.info(
                "attempt finished", extra={k: v for k, v in answer.items() if k != "occurrence_id"}
            )
            return answer
        finally:
            logger.thread_safe_clear_keys()

    with runtime.emf_sink.recording():
        if len(occurrence_ids) == 1:
            return attempt(occurrence_ids[0])
        batch = executor().batch(claimant, len(occurrence_ids), trace_id)
        with ThreadPoolExecutor(len(occurrence_ids), thread_name_prefix="cronledger-batch") as side:
            return {"attempts": list(side.map(partial(attempt, batch=batch), occurrence_ids))}


def dispatched_ids(event: Any) -> tuple[list[str], str]:
    """The ids of a dispatch (one occurrence or a batch) and its claimant; anything else is
    refused, naming what arrived."""
    if isinstance(event, dict):
        claimant = event.get("claimant")
        ids = event.get("occurrence_ids", [event.get("occurrence_id")])
        if (
            isinstance(claimant, str)
            and claimant
            and isinstance(ids, list)
            and ids
            and all(isinstance(i, str) and i for i in ids)
            and len(set(ids)) == len(ids)
        ):
            return [str(i) for i in ids], claimant
    raise MalformedDispatch(
        'an executor event is {"occurrence_id": "<id>", "claimant": "<id>"} or '
        '{"occurrence_ids": ["<id>", ...], "claimant": "<id>"}; got ' + _describe(event)
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
