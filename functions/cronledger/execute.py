"""Execute one attempt (SPEC §5): resolve, start, run under a heartbeat, settle.

Ownership is the rule of every step. The attempt acts only as the claimant it was dispatched
under and, under `forbid`, only with the fencing token `start_attempt` gave it; every write is
conditional on both, so a superseded attempt (a re-claim after its lease ran out, or an
operator's `cancel`) matches nothing and writes nothing.

While the target runs, the calling thread renews the claim and the slot every
`heartbeat_interval_secs`. A renewal answering "not yours" stops the attempt at once. A
renewal that *fails* (the database is unreachable) is not lost ownership, but after
`claim_lease_secs - heartbeat_interval_secs` without a successful one the attempt stops
itself: by then a peer may take the lease over, and the two must never run side by side.
A stopped attempt stops *waiting*: Python cannot kill the target's thread, so the target is
abandoned and whatever it returns later is discarded, never settled.
"""

from __future__ import annotations

import contextvars
import logging
import queue
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from cronledger import metrics
from cronledger.errors import NotFound
from cronledger.ledger import (
    CHANNEL_ACTIVE,
    CLAIMED,
    COMPLETED,
    FAILED,
    SKIPPED_SINGLETON,
    Channel,
    Ledger,
    Occurrence,
    SingletonSpec,
)
from cronledger.schedule import Schedule, ScheduleInvalid
from cronledger.schedule_cache import SHARED_SCHEDULES, ScheduleCache
from cronledger.settings import Settings
from cronledger.targets import (
    AwsClients,
    TargetOutcome,
    TargetPolicy,
    build_envelope,
    run_target,
)
from cronledger.targets.interface import timed_out

log = logging.getLogger(__name__)

#: How long past its own timeout a target is waited for before it is abandoned: the target
#: modules bound their own waits, this only catches one that does not (a Python callable).
OVERRUN_GRACE_SECS = 1.0
#: How long a thread that ran a target waits for the next one before it ends.
TARGET_THREAD_IDLE_SECS = 60.0


class TargetThreads:
    """Threads that run targets, each kept for the next target once its own returns.

    A target runs on a thread of its own so the attempt can stop waiting for it at once;
    starting a fresh thread for every attempt cost more than the rest of a no-op attempt's
    Python (a new stack, its pages, and the interpreter's thread state). Each job runs in
    a copy of the `contextvars` context it was handed over in (so the log keys its attempt
    appended follow it; nothing it sets leaks back or to the next job), under a thread name
    of its own. A
    thread whose target never returns (abandoned) is simply never handed back: the next
    attempt gets another thread. Idle threads end after `TARGET_THREAD_IDLE_SECS`."""

    def __init__(self, idle_secs: float = TARGET_THREAD_IDLE_SECS) -> None:
        self.idle_secs = idle_secs
        self._idle: list[queue.SimpleQueue[tuple[str, contextvars.Context, Callable[[], None]]]]
        self._idle = []
        self._lock = threading.Lock()

    def run(self, job: Callable[[], None], name: str = "cronledger-target") -> None:
        """Start `job` on an idle thread, or on a new one, named `name` while it runs."""
        with self._lock:
            inbox = self._idle.pop() if self._idle else None
        if inbox is None:
            inbox = queue.SimpleQueue()
            threading.Thread(target=self._serve, args=(inbox,), name=name, daemon=True).start()
        inbox.put((name, contextvars.copy_context(), job))

    def idle_count(self) -> int:
        with self._lock:
            return len(self._idle)

    def _serve(
        self, inbox: queue.SimpleQueue[tuple[str, contextvars.Context, Callable[[], None]]]
    ) -> None:
        thread = threading.current_thread()
        while True:
            try:
                thread.name, context, job = inbox.get(timeout=self.idle_secs)
            except queue.Empty:
                with self._lock:
                    if inbox in self._idle:  # else `run` has just taken it: a job is coming
                        self._idle.remove(inbox)
                        return
                continue
            try:
                context.run(job)
            except Exception:
                log.exception("a target's thread caught what its job raised")
            del job, context  # what the job holds (an envelope, a result) is not kept idle
            thread.name = "cronledger-target-idle"
            with self._lock:
                self._idle.append(inbox)


TARGET_THREADS = TargetThreads()


@dataclass(frozen=True, slots=True)
class AttemptReport:
    """How an attempt ended. `status` is what was written (`None`: nothing was, because
    ownership was lost or the attempt stopped itself)."""

    occurrence_id: str
    outcome: str
    status: str | None = None
    fencing_token: int | None = None
    error: str | None = None


class Executor:
    """Runs attempts against one ledger; safe to share between threads."""

    def __init__(
        self,
        ledger: Ledger,
        settings: Settings,
        clients: AwsClients | None = None,
        schedules: ScheduleCache | None = None,
        annotate: Callable[..., object] | None = None,
    ) -> None:
        """`annotate(**keys)` is told what the attempt learns as it learns it (channel id,
        attempt, fencing token), so a caller can put them on its log lines."""
        self.ledger = ledger
        self.settings = settings
        self.policy = TargetPolicy.from_settings(settings)
        self.clients = clients
        self.schedules = schedules or SHARED_SCHEDULES
        self.annotate = annotate or (lambda **keys: None)

    def run_attempt(
        self,
        occurrence_id: str,
        claimant: str,
        deadline: float | None = None,
        trace_id: str | None = None,
    ) -> AttemptReport:
        """Run one dispatched occurrence to a settled row (or to nothing, if it is not ours).
        `deadline` is the executor's own monotonic end (a Lambda's time left)."""
        trace_id = trace_id or uuid.uuid4().hex
        lease = self.settings.claim_lease_secs
        try:
            # A plain attempt (overlap allowed, channel active) starts in this same read.
            occurrence, current, start = self.ledger.open_attempt(
                occurrence_id, claimant, lease, trace_id
            )
        except NotFound:
            return AttemptReport(occurrence_id, "lost", error="occurrence no longer exists")
        self.annotate(channel_id=occurrence.channel_id, attempt=occurrence.attempt)
        if occurrence.status != CLAIMED or occurrence.claimed_by != claimant:
            return AttemptReport(occurrence_id, "lost", error="not claimed by this dispatch")

        resolved = self._resolve(occurrence, current)
        if isinstance(resolved, str):
            return self._settle(occurrence, claimant, None, FAILED, error=resolved)
        channel, schedule = resolved

        singleton = (
            SingletonSpec(schedule.singleton_key, schedule.slots)
            if schedule.singleton_key is not None
            else None
        )
        if start is None:
            start = self.ledger.start_attempt(
                occurrence, claimant, channel.version, singleton, lease, trace_id=trace_id
            )
        self.annotate(fencing_token=start.fencing_token)
        if start.outcome == "singleton_busy":
            assert singleton is not None
            metrics.record_singleton_contention()
            reason = (
                f"singleton key {singleton.key!r} is held by {singleton.slots} running "
                f'occurrence(s) (concurrency.policy "forbid", slots {singleton.slots})'
            )
            return self._settle(occurrence, claimant, None, SKIPPED_SINGLETON, error=reason)
        if not start.started or start.started_at is None:
            return AttemptReport(occurrence_id, "lost", error="lost the claim before starting")

        metrics.record_schedule_lag((start.started_at - occurrence.due_at).total_seconds())
        envelope = build_envelope(
            payload=schedule.payload,
            trigger=occurrence.trigger,  # type: ignore[arg-type]
            occurrence_id=occurrence.id,
            channel_id=channel.channel_id,
            channel_name=channel.name,
            scheduled_for=occurrence.scheduled_for,
            started_at=start.started_at,
            timezone=schedule.timezone,
            attempt=occurrence.attempt,
            singleton_key=singleton.key if singleton else None,
            fencing_token=start.fencing_token,
        )
        budget = channel.timeout_ms / 1000 if channel.timeout_ms else self._default_timeout()
        if deadline is not None:
            budget = min(budget, deadline - time.monotonic() - self._margin())
        if budget <= 0:
            outcome = timed_out(0, "no time left in this executor")
        else:
            ran = self._run_with_heartbeat(
                occurrence, claimant, start.fencing_token, channel, envelope, budget
            )
            if isinstance(ran, AttemptReport):
                return ran
            outcome = ran
        return self._settle(
            occurrence,
            claimant,
            start.fencing_token,
            COMPLETED if outcome.ok else FAILED,
            error=outcome.error,
            result=outcome.result,
        )

    def _resolve(
        self, occurrence: Occurrence, channel: Channel | None
    ) -> tuple[Channel, Schedule] | str:
        """The channel (read by id with the occurrence, as it is now) and its compiled
        schedule; or why it cannot run."""
        if channel is None:
            return f"channel_unavailable: channel {occurrence.channel_id} no longer exists"
        if channel.status != CHANNEL_ACTIVE:
            return f"channel_unavailable: channel {channel.name!r} is {channel.status}, not active"
        try:
            return channel, self.schedules.get(channel)
        except ScheduleInvalid as exc:
            return f"channel_unavailable: stored schedule of {channel.name!r} is invalid: {exc}"

    def _run_with_heartbeat(
        self,
        occurrence: Occurrence,
        claimant: str,
        fencing_token: int | None,
        channel: Channel,
        envelope: object,
        budget: float,
    ) -> TargetOutcome | AttemptReport:
        """Run the target on its own thread while this one renews the lease. Answers the
        target's outcome, or an `AttemptReport` when the attempt must stop writing nothing."""
        done = threading.Event()
        box: list[TargetOutcome] = []

        def target() -> None:
            try:
                outcome = run_target(
                    channel.target,
                    envelope,  # type: ignore[arg-type]
                    budget,
                    self.clients,
                    policy=self.policy,
                )
                box.append(outcome)
            finally:
                done.set()

        TARGET_THREADS.run(target, name=f"target-{occurrence.id}")
        beat = self.settings.heartbeat_interval.total_seconds()
        give_up = self.settings.renewal_give_up.total_seconds()
        give_up_at = time.monotonic() + budget + OVERRUN_GRACE_SECS
        last_renewed = time.monotonic()
        while not done.wait(max(0.0, min(beat, give_up_at - time.monotonic()))):
            if time.monotonic() >= give_up_at:
                return timed_out(budget, "the target did not return; abandoned")
            try:
                renewed = self.ledger.renew(
                    occurrence.id, claimant, fencing_token, self.settings.claim_lease_secs
                )
            except Exception as exc:
                metrics.record_renewal_failure()
                log.warning("renewing %s failed: %s", occurrence.id, exc)
                if time.monotonic() - last_renewed >= give_up:
                    return AttemptReport(
                        occurrence.id,
                        "stopped",
                        fencing_token=fencing_token,
                        error="no successful renewal within the lease; stopped before a peer could take over",
                    )
                continue
            if not renewed:
                log.warning("attempt %s lost ownership (cancelled or taken over)", occurrence.id)
                return AttemptReport(
                    occurrence.id, "lost", fencing_token=fencing_token, error="ownership lost"
                )
            last_renewed = time.monotonic()
        return box[0]

    def _settle(
        self,
        occurrence: Occurrence,
        claimant: str,
        fencing_token: int | None,
        status: str,
        *,
        error: str | None = None,
        result: str | None = None,
    ) -> AttemptReport:
        settled = self.ledger.settle(
            occurrence.id,
            claimant,
            status,
            fencing_token=fencing_token,
            error_message=error,
            result=result,
        )
        if not settled:
            return AttemptReport(occurrence.id, "lost", fencing_token=fencing_token, error=error)
        metrics.record_occurrences(status)
        return AttemptReport(occurrence.id, status, status, fencing_token, error)

    def _default_timeout(self) -> float:
        return self.settings.default_timeout.total_seconds()

    def _margin(self) -> float:
        return self.settings.execute_margin.total_seconds()
