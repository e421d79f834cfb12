"""Invokers: how a claimed occurrence reaches an executor.

The claim service hands over ids only, `(occurrence_id, claimant)`; the executor loads the rest
itself under that claimant, so a dispatch carries no payload that could go stale or leak. A
dispatch either hands the attempt over or raises `DispatchFailed`; the occurrence then stays
claimed and is recovered when its lease expires.

A queued dispatch's lease is already running, so the thread pool reports `in_flight` and callers
claim no more than `max_workers - in_flight`, rather than letting claims wait in a queue.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
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
    def dispatch(self, occurrence_id: str, claimant: str) -> None: ...


class ThreadPoolInvoker:
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

    def dispatch(self, occurrence_id: str, claimant: str) -> None:
        with self._idle:
            if self._closed:
                raise DispatchFailed(f"invoker is shut down; {occurrence_id} was not dispatched")
            self._in_flight += 1
        try:
            future = self._pool.submit(self._run_attempt, occurrence_id, claimant)
        except RuntimeError as exc:  # shut down between the check above and the submit
            with self._idle:
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


def dispatch_client() -> LambdaClient:
    """The process's Lambda client for dispatches: short timeout, retried."""
    return default_clients().lambda_(timeout_secs=DISPATCH_TIMEOUT_SECS, retried=True)


class LambdaInvoker:
    """Starts one asynchronous executor invocation per attempt (`InvocationType="Event"`)."""

    def __init__(self, function_name: str, client: LambdaClient | None = None) -> None:
        self.function_name = function_name
        self._client = client

    def dispatch(self, occurrence_id: str, claimant: str) -> None:
        client = self._client = self._client or dispatch_client()  # built on first use
        payload = json.dumps({"occurrence_id": occurrence_id, "claimant": claimant})
        try:
            response = client.invoke(
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
