"""The Lambda invoker: a claim's occurrences handed to executor functions as asynchronous
invokes (`InvocationType="Event"`), each answered in milliseconds.

An invoke costs the claim function about a millisecond of botocore CPU whatever it carries, so a
burst goes out on `DISPATCH_LANES` concurrent invokes, each carrying a batch of up to
`MOST_PER_INVOKE` ids once there are more occurrences than lanes (README "Bursts").
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from botocore.exceptions import BotoCoreError, ClientError

from cronledger.invokers import DispatchFailed
from cronledger.targets.clients import default_clients

if TYPE_CHECKING:
    from mypy_boto3_lambda import LambdaClient

#: An asynchronous invoke that stalls is retried (a duplicate dispatch finds its occurrence
#: already started and writes nothing) rather than left to hold the claim loop for a minute.
DISPATCH_TIMEOUT_SECS = 5.0
#: Invokes in flight at once from one claim invocation (and the client's connection pool).
DISPATCH_LANES = 16
#: The most occurrences one executor invocation carries, and runs side by side.
MOST_PER_INVOKE = 25


def dispatch_client() -> LambdaClient:
    """The process's Lambda client for dispatches: short timeout, retried, a connection a lane."""
    return default_clients().lambda_(
        timeout_secs=DISPATCH_TIMEOUT_SECS, retried=True, connections=DISPATCH_LANES
    )


def invoke_async(client: LambdaClient, function_name: str, payload: bytes) -> None:
    """One asynchronous invoke of `function_name`; `DispatchFailed` unless Lambda queued it."""
    try:
        response = client.invoke(
            FunctionName=function_name, InvocationType="Event", Payload=payload
        )
    except (BotoCoreError, ClientError) as exc:
        raise DispatchFailed(f"could not invoke {function_name}: {exc}") from exc
    status = response.get("StatusCode")
    if status != 202:
        raise DispatchFailed(
            f"{function_name} answered {status} to an asynchronous invoke, expected 202"
        )


def invoke_batches(occurrence_ids: Sequence[str]) -> list[Sequence[str]]:
    """The occurrences split into invokes: one each while they fit the lanes, else evenly
    into batches of at most `MOST_PER_INVOKE`, in claim order."""
    size = min(MOST_PER_INVOKE, max(1, -(-len(occurrence_ids) // DISPATCH_LANES)))
    return [occurrence_ids[i : i + size] for i in range(0, len(occurrence_ids), size)]


class LambdaInvoker:
    """Starts executor invocations: `{"occurrence_id", "claimant"}` for one occurrence,
    `{"occurrence_ids": [...], "claimant"}` for a batch."""

    def __init__(self, function_name: str, client: LambdaClient | None = None) -> None:
        self.function_name = function_name
        # Built now (the container's first tick), not by the first burst: loading botocore's
        # Lambda model takes most of a second.
        self._client = client or dispatch_client()
        self._lanes: ThreadPoolExecutor | None = None

    def dispatch_all(self, occurrence_ids: Sequence[str], claimant: str) -> dict[str, str]:
        batches = invoke_batches(occurrence_ids)
        if len(batches) <= 1:
            outcomes = [self._attempt_invoke(batch, claimant) for batch in batches]
        else:
            self._lanes = self._lanes or ThreadPoolExecutor(
                DISPATCH_LANES, thread_name_prefix="cronledger-dispatch"
            )
            outcomes = list(self._lanes.map(lambda b: self._attempt_invoke(b, claimant), batches))
        return {
            occurrence_id: error
            for batch, error in zip(batches, outcomes, strict=True)
            if error is not None
            for occurrence_id in batch
        }

    def _attempt_invoke(self, batch: Sequence[str], claimant: str) -> str | None:
        """One invoke of `batch`: None when Lambda queued it, else why not."""
        ids: dict[str, object] = (
            {"occurrence_id": batch[0]} if len(batch) == 1 else {"occurrence_ids": list(batch)}
        )
        payload = json.dumps({**ids, "claimant": claimant}).encode("utf-8")
        try:
            invoke_async(self._client, self.function_name, payload)
        except DispatchFailed as exc:
            return str(exc)
        return None
