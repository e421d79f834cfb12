"""`execute`: an asynchronous invocation of ids only (docs/guarantees.md#dispatch),
`{"occurrence_id", "claimant"}` or, during a burst, `{"occurrence_ids": [...], "claimant"}`,
runs each attempt under the function's own deadline. A batch's targets run side by side, one
thread each, so none waits for another's; their ledger writes go together
(`Executor.run_batch`), each still conditional on its own attempt. A container that dies
abandons them all, and each is recovered when its lease expires.

Every log line of an attempt carries its ids: the executor's `annotate` hook appends them to the
attempt's own log context. The attempt's trace id is this invocation's X-Ray trace.
An occurrence no longer ours is not an error (nothing is written); a malformed event or an
unreachable database is, and lands in the dead-letter queue (the stack allows no retries).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from cronledger.aws import runtime
from cronledger.aws.runtime import logger, metrics, tracer
from cronledger.errors import CronledgerError
from cronledger.execute import AttemptReport, Executor

TRACE_HEADER = "_X_AMZN_TRACE_ID"


class MalformedDispatch(CronledgerError):
    """The event is not `{"occurrence_id": str, "claimant": str}` nor a batch of ids."""


@runtime.per_container
def executor() -> Executor:
    return Executor(
        runtime.ledger(),
        runtime.settings(),
        annotate=logger.thread_safe_append_keys,
        finished=_log_finished,
    )


def _log_finished(report: AttemptReport) -> None:
    answer = dataclasses.asdict(report)
    logger.info("attempt finished", extra={k: v for k, v in answer.items() if k != "occurrence_id"})


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@metrics.log_metrics(capture_cold_start_metric=True)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    occurrence_ids, claimant = dispatched_ids(event)
    logger.append_keys(claimant=claimant)
    deadline, trace_id = runtime.deadline(context), xray_trace_id()

    with runtime.emf_sink.recording():
        reports = executor().run_batch(occurrence_ids, claimant, deadline, trace_id)
    answers = [dataclasses.asdict(report) for report in reports]
    return answers[0] if len(answers) == 1 else {"attempts": answers}


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
