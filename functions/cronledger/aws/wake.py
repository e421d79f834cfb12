"""Waking `claim` from the API: a trigger, retry or backfill writes rows due at once, and
`claim` runs only while something is due, so once such a request is answered `api` invokes
`claim` asynchronously and the run starts within seconds, not at the next tick. The wake
carries nothing: a duplicate is a round that finds nothing, a lost one waits for the next tick.
"""

from __future__ import annotations

import logging

from cronledger.aws.invoker import dispatch_client, invoke_async
from cronledger.invokers import DispatchFailed

log = logging.getLogger(__name__)

CLAIM_FUNCTION_NAME = "CRONLEDGER_CLAIM_FUNCTION_NAME"
#: The operator API's routes whose success leaves rows due now (docs/guarantees.md#api).
RUN_MAKING_SUFFIXES = ("/trigger", "/backfill", "/retry")
WAKE_EVENT = b'{"wake": "api"}'


def makes_due_runs(method: str | None, path: str | None, status: int | None) -> bool:
    """Whether an answered request wrote occurrences that are due at once."""
    return (
        method == "POST"
        and status is not None
        and 200 <= status < 300
        and (path or "").endswith(RUN_MAKING_SUFFIXES)
    )


def wake_claim(function_name: str) -> None:
    """Invoke the claim function asynchronously, once; a refusal is logged, never raised."""
    try:
        invoke_async(dispatch_client(), function_name, WAKE_EVENT)
    except DispatchFailed as exc:
        log.warning(
            "could not wake %s; the next tick claims the run: %s",
            function_name,
            exc.__cause__ or exc,
        )
