"""Invokers: how a claimed occurrence reaches an executor.

The claim service hands over ids only, `(occurrence_id, claimant)`; the executor loads the rest
itself under that claimant, so a dispatch carries no payload that could go stale or leak. A
dispatch either hands the attempt over or fails (`DispatchFailed`); the claim service then gives
the occurrence back to `pending`, or its lease expires and a later claim recovers it.

`dispatch_all` hands over one claim's occurrences, each exactly once, and answers the ones that
were not handed over. On Lambda a burst goes out on `DISPATCH_LANES` concurrent invokes, and
when there are more occurrences than lanes each invoke carries a batch of up to `MOST_PER_INVOKE`
ids, which the executor runs side by side (README "Bursts"): an invoke costs the claim function
about a millisecond of CPU in botocore whatever it carries, so one occurrence per invoke tops
out at a few hundred a second, well short of a midnight burst. A claim of no more occurrences
than lanes still invokes one executor per occurrence.

A queued dispatch's lease is already running, so the thread pool reports `in_flight` and callers
claim no more than `max_workers - in_flight`, rather than letting claims wait in a queue.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Protocol

from botocore.exceptions import BotoCoreError, ClientError

from cronledger.errors import CronledgerError
from cronledger.targets.clients import default_clients

if TYPE_CHECKING:
    from mypy_boto3_lambda import LambdaClient

_log = logging.getLogger(__name__)


class DispatchFailed(CronledgerError):
    """The executor was not handed the attempt."""


class Invoker(Protocol):
    def dispatch_all(self, occurrence_ids: Sequence[str], claimant: str) -> dict[str, str]:
        """Hand over each occurrence once; answer the ones that were not, with why."""
        ...


class OneByOne:
    """`dispatch_all` as one `dispatch` per occurrence: for invokers that start attempts in
    this process, where a hand-over costs nothing worth batching."""

    def dispatch(self, occurrence_id: str, claimant: str) -> None:
        raise NotImplementedError

    def dispatch_all(self, occurrence_ids: Sequence[str], claimant: str) -> dict[str, str]:
        failed: dict[str, str] = {}
        for occurrence_id in occurrence_ids:
            try:
                self.dispatch(occurrence_id, claimant)
            except DispatchFailed as exc:
                failed[occurrence_id] = str(exc)
        return failed


class ThreadPoolInvoker(OneByOne):
    """Runs each attempt on a worker thread of this process (the local runner)."""

    def __init__(self, run_attempt: Callable[[str, str], object], max_workers: int) -> None:
        if max_workers < 1:
            raise ValueError(f"max_workers must be at least 1, got {max_workers}")
        self.max_workers = max_workers
        self._run_attempt = run_attempt
        self._pool = ThreadPoolExecutor(max_workers, thread_name_prefix="cronledger-attempt")
        self._idle = threading.Condition()
        self._in_flight = 0
        self._closed = False

    @property
    def in_flight(self) -> int:
        """Attempts dispatched and not yet finished, queued ones included."""
        with self._idle:
            return self._in_flight

    @property
    def room(self) -> int:
        """How many more attempts could start right now: none once the pool is shut down
        (or the interpreter is exiting), so a claim loop claims nothing it cannot hand over."""
        with self._idle:
            return 0 if self._closed else self.max_workers - self._in_flight

    def dispatch(self, occurrence_id: str, claimant: str) -> None:
        with self._idle:
            if self._closed:
                raise DispatchFailed(f"invoker is shut down; {occurrence_id} was not dispatched")
            self._in_flight += 1
        try:
            future = self._pool.submit(self._run_attempt, occurrence_id, claimant)
        except RuntimeError as exc:  # shut down since the check above, or the interpreter exits
            with self._idle:
                self._closed = True
                self._in_flight -= 1
                self._idle.notify_all()
            raise DispatchFailed(
                f"invoker is shut down; {occurrence_id} was not dispatched"
            ) from exc
        future.add_done_callback(lambda done: self._finished(occurrence_id, done))

    def _finished(self, occurrence_id: str, done: Future[object]) -> None:
        if not done.cancelled() and done.exception() is not None:
            # The attempt settles its own failures; an escape here is a bug or a dead database,
            # and the lease expiry will hand the occurrence to a peer.
            _log.error("attempt %s raised", occurrence_id, exc_info=done.exception())
        with self._idle:
            self._in_flight -= 1
            self._idle.notify_all()

    def drain(self, timeout_secs: float) -> bool:
        """Wait up to `timeout_secs` for every dispatched attempt to finish; True if they did."""
        deadline = time.monotonic() + timeout_secs
        with self._idle:
            while self._in_flight:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._idle.wait(left)
        return True

    def shutdown(self, timeout_secs: float) -> bool:
        """Refuse new dispatches, then drain. Attempts still running at the deadline are left
        to finish on their own threads (a Python thread cannot be stopped); False says so."""
        with self._idle:
            self._closed = True
        drained = self.drain(timeout_secs)
        self._pool.shutdown(wait=False, cancel_futures=False)
        return drained


#: An asynchronous invoke is queued by Lambda and answered in milliseconds: one that stalls
#: is retried (a duplicate dispatch finds its occurrence already started and writes
#: nothing) rather than allowed to hold the claim loop for botocore's default minute.
DISPATCH_TIMEOUT_SECS = 5.0
#: Invokes in flight at once from one claim invocation (and the client's connection pool).
DISPATCH_LANES = 16
#: The most occurrences one executor invocation carries, and runs side by side.
MOST_PER_INVOKE = 25


def dispatch_client() -> LambdaClient:
    """The process's Lambda client for dispatches: short timeout, retried, a connection per
    lane."""
    return default_clients().lambda_(
        timeout_secs=DISPATCH_TIMEOUT_SECS, retried=True, connections=DISPATCH_LANES
    )


def invoke_batches(occurrence_ids: Sequence[str]) -> list[Sequence[str]]:
    """The occurrences split into invokes: one each while they fit the lanes, else evenly
    into batches of at most `MOST_PER_INVOKE`, in claim order."""
    size = min(MOST_PER_INVOKE, max(1, -(-len(occurrence_ids) // DISPATCH_LANES)))
    return [occurrence_ids[i : i + size] for i in range(0, len(occurrence_ids), size)]


class LambdaInvoker:
    """Starts asynchronous executor invocations (`InvocationType="Event"`): `{"occurrence_id",
    "claimant"}` for one occurrence, `{"occurrence_ids": [...], "claimant"}` for a batch."""

    def __init__(self, function_name: str, client: LambdaClient | None = None) -> None:
        self.function_name = function_name
        # Built now (the container's first tick), not by the first burst: loading botocore's
        # Lambda model takes most of a second.
        self._client = client or dispatch_client()
        self._lanes: ThreadPoolExecutor | None = None

    def dispatch(self, occurrence_id: str, claimant: str) -> None:
        self._invoke([occurrence_id], claimant)

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
        try:
            self._invoke(batch, claimant)
        except DispatchFailed as exc:
            return str(exc)
        return None

    def _invoke(self, batch: Sequence[str], claimant: str) -> None:
        ids: dict[str, object] = (
            {"occurrence_id": batch[0]} if len(batch) == 1 else {"occurrence_ids": list(batch)}
        )
        payload = json.dumps({**ids, "claimant": claimant})
        try:
            response = self._client.invoke(
                FunctionName=self.function_name,
                InvocationType="Event",
                Payload=payload.encode("utf-8"),
            )
        except (BotoCoreError, ClientError) as exc:
            raise DispatchFailed(f"could not invoke {self.function_name}: {exc}") from exc
        status = response.get("StatusCode")
        if status != 202:
            raise DispatchFailed(
                f"{self.function_name} answered {status} to an asynchronous invoke, expected 202"
            )
