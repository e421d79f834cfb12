"""Invokers: how a claimed occurrence reaches an executor.

A dispatch carries ids only, `(occurrence_id, claimant)`: the executor loads the rest under
that claimant, so nothing handed over goes stale. It hands the attempt over or fails
(`DispatchFailed`), and the occurrence is given back or its lease expires. The Lambda invoker
lives in `cronledger.aws.invoker`, so the claim service loads no AWS SDK. A queued dispatch's
lease already runs, so the thread pool reports its `room` and callers claim no more.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Protocol

from cronledger.errors import CronledgerError

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
        self.max_workers = max_workers
        self._run_attempt = run_attempt
        self._pool = ThreadPoolExecutor(max_workers, thread_name_prefix="cronledger-attempt")
        self._idle = threading.Condition()
        self._in_flight = 0
        self._closed = False

    @property
    def room(self) -> int:
        """How many more attempts could start right now: none once the pool is shut down
        (or the interpreter is exiting), so a claim loop claims nothing it cannot hand over."""
        with self._idle:
            return 0 if self._closed else self.max_workers - self._in_flight

    def dispatch(self, occurrence_id: str, claimant: str) -> None:
        shut_down = f"invoker is shut down; {occurrence_id} was not dispatched"
        with self._idle:
            if self._closed:
                raise DispatchFailed(shut_down)
            self._in_flight += 1
        try:
            future = self._pool.submit(self._run_attempt, occurrence_id, claimant)
        except RuntimeError as exc:  # shut down since the check above, or the interpreter exits
            with self._idle:
                self._closed = True
                self._in_flight -= 1
                self._idle.notify_all()
            raise DispatchFailed(shut_down) from exc
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
        with self._idle:
            return self._idle.wait_for(lambda: not self._in_flight, timeout_secs)

    def shutdown(self, timeout_secs: float) -> bool:
        """Refuse new dispatches, then drain. Attempts still running at the deadline are left
        to finish on their own threads (a Python thread cannot be stopped); False says so."""
        with self._idle:
            self._closed = True
        drained = self.drain(timeout_secs)
        self._pool.shutdown(wait=False, cancel_futures=False)
        return drained
