"""Execute attempts: open each under its claim, start, run under a heartbeat, settle.

Ownership is the rule of every step. The attempt acts only as the claimant it was dispatched
under and, with a concurrency key, only with the fencing token its start took; every write is
conditional on both, so a superseded attempt (re-claimed after its lease ran out, cancelled)
matches nothing and writes nothing.

While a target runs, the calling thread renews the claim and the slot every
`heartbeat_interval_secs`. A renewal answering "not yours" stops the attempt at once; one that
*fails* (the database is unreachable) is not lost ownership, but after `claim_lease_secs -
heartbeat_interval_secs` without a success the attempt stops itself, before a peer may take
the lease over. A stopped attempt stops *waiting*: Python cannot kill the target's thread, so
the target is abandoned and whatever it returns later is discarded, never settled.
"""

from __future__ import annotations

import contextvars
import logging
import math
import queue
import random
import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from cronledger import alerts, metrics
from cronledger.cron import RetryPolicy, Schedule, ScheduleInvalid, kept_misfires
from cronledger.ledger import (
    CHANNEL_ACTIVE,
    CLAIMED,
    COMPLETED,
    FAILED,
    PENDING,
    RUNNING,
    SKIPPED_MISFIRE,
    SKIPPED_SINGLETON,
    AttemptStart,
    Channel,
    DatabaseUnavailable,
    MisfireRule,
    Occurrence,
    OpenedAttempt,
    SingletonSpec,
)
from cronledger.ledger.attempts import SettleRequest, StartRequest
from cronledger.pacing import SYSTEM_CLOCK, Clock
from cronledger.ports import AttemptPort
from cronledger.schedule_cache import SHARED_SCHEDULES, ScheduleCache
from cronledger.settings import Settings
from cronledger.targets import run_target
from cronledger.targets.clients import AwsClients
from cronledger.targets.envelope import Envelope, build_envelope
from cronledger.targets.interface import TargetOutcome, timed_out
from cronledger.targets.policy import TargetPolicy

log = logging.getLogger(__name__)

#: How long past its own timeout a target is waited for before it is abandoned: the target
#: modules bound their own waits, this only catches one that does not (a Python callable).
OVERRUN_GRACE_SECS = 1.0
#: The longest pause between two tries of a settle the database did not serve.
SETTLE_RETRY_SECS = 1.0
#: How long a thread that ran a target waits for the next one before it ends.
TARGET_THREAD_IDLE_SECS = 60.0
#: A batch's ends are written together, at most this many at a time...
SETTLE_MOST = 25
#: ...and at most this long after the first of them finished.
SETTLE_EVERY_SECS = 0.05

R = TypeVar("R")
#: Where an idle target thread waits for its next job: (thread name, context, job).
_Inbox = queue.SimpleQueue[tuple[str, contextvars.Context, Callable[[], None]]]


class TargetThreads:
    """Threads that run targets, each kept for the next target once its own returns.

    A target runs on a thread of its own so the attempt can stop waiting for it at once;
    a fresh thread per attempt cost more than the rest of a no-op attempt. Each job runs in
    a copy of the `contextvars` context it was handed over in (its attempt's log keys follow
    it; nothing leaks to the next job). A thread whose target never returns is never handed
    back. Idle threads end after `TARGET_THREAD_IDLE_SECS`."""

    def __init__(self, idle_secs: float = TARGET_THREAD_IDLE_SECS) -> None:
        self.idle_secs = idle_secs
        self._idle: list[_Inbox] = []
        self._lock = threading.Lock()

    def run(self, job: Callable[[], None], name: str = "cronledger-target") -> None:
        """Start `job` on an idle thread, or on a new one, named `name` while it runs."""
        with self._lock:
            inbox = self._idle.pop() if self._idle else None
        if inbox is None:
            inbox = queue.SimpleQueue()
            threading.Thread(target=self._serve, args=(inbox,), name=name, daemon=True).start()
        inbox.put((name, contextvars.copy_context(), job))

    def _serve(self, inbox: _Inbox) -> None:
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
    """How an attempt ended. `outcome` is the status written, or what happened instead:
    `lost` (not this dispatch's to run), `waiting` (a `queue_one` contender, queued for the
    key's next free slot), `stopped` (no renewal within the lease: it stopped itself) or
    `superseded` (cancelled, replaced or taken over while it ran). `status` is what was
    written (`None`: nothing was); `retry_in` is set when a failure went back to `pending`
    to be retried after that many seconds."""

    occurrence_id: str
    outcome: str
    status: str | None = None
    fencing_token: int | None = None
    error: str | None = None
    attempt: int | None = None
    retry_in: float | None = None


@dataclass(frozen=True, slots=True)
class Ending:
    """How a finished target's attempt is settled: `status`, the error to record, and
    `retry_in` (seconds) when the occurrence goes back to `pending` for another attempt."""

    status: str
    error: str | None = None
    retry_in: float | None = None
    #: Where the target failed, when it says (a Python target's last frames).
    detail: str | None = None


def ending(
    outcome: TargetOutcome, attempt: int, policy: RetryPolicy, rng: random.Random | None = None
) -> Ending:
    """A failure (an error or a timeout) with attempts left is retried after the policy's
    jittered backoff; the last one is final and says how many there were. A permanent one
    (the target is gone or no longer allowed) is final at once: another attempt would meet
    the same refusal, only later."""
    if outcome.ok:
        return Ending(COMPLETED)
    if outcome.permanent:
        return Ending(
            FAILED, f"{outcome.error} (a permanent error: not retried)", detail=outcome.detail
        )
    if attempt < policy.max_attempts:
        return Ending(
            FAILED, outcome.error, policy.backoff_secs_after(attempt, rng), outcome.detail
        )
    unit = "attempt" if attempt == 1 else "attempts"
    return Ending(FAILED, f"{outcome.error} (after {attempt} {unit})", detail=outcome.detail)


def singleton_of(schedule: Schedule) -> SingletonSpec | None:
    """The concurrency key an attempt of this schedule must hold, and its policy."""
    if schedule.singleton_key is None or schedule.concurrency_policy == "allow":
        return None
    return SingletonSpec(schedule.singleton_key, schedule.slots, schedule.concurrency_policy)


def misfire_rule(schedule: Schedule, settings: Settings) -> MisfireRule:
    """The channel's misfire policy as a judgment at start applies it (`Schedule.plan_pass`'s
    rule, with the instance's `max_catch_up`)."""
    return MisfireRule(
        policy=schedule.misfire_policy,
        grace_secs=settings.misfire_grace.total_seconds(),
        keep=lambda count: kept_misfires(
            schedule.misfire_policy, count, min(schedule.max_catch_up, settings.max_catch_up)
        ),
    )


def busy_reason(spec: SingletonSpec) -> str:
    waits = " and another contender already waits" if spec.policy == "queue_one" else ""
    return (
        f"singleton key {spec.key!r} is held by {spec.slots} running occurrence(s){waits} "
        f'(concurrency.policy "{spec.policy}", slots {spec.slots})'
    )


class _Ended(Exception):
    """An attempt's step ended it before its target's outcome was settled: `ended` is its
    report (it wrote nothing) or the end to write (as a target's end is, with the batch's)."""

    def __init__(self, ended: AttemptReport | Ending) -> None:
        super().__init__(ended)
        self.ended = ended


class Executor:
    """Runs attempts against one ledger; safe to share between threads."""

    def __init__(
        self,
        ledger: AttemptPort,
        settings: Settings,
        clients: AwsClients | None = None,
        schedules: ScheduleCache | None = None,
        annotate: Callable[..., object] | None = None,
        clock: Clock = SYSTEM_CLOCK,
        finished: Callable[[AttemptReport], object] | None = None,
    ) -> None:
        """`annotate(**keys)` is told what an attempt learns as it learns it (occurrence and
        channel ids, attempt, fencing token), and `finished(report)` how it ended (unless an
        error struck it), both in that attempt's own `contextvars` context, so a caller can
        put them on its log lines. `clock` times the lease, the renewals and every pause."""
        self.ledger = ledger
        self.clock = clock
        self.settings = settings
        self.policy = TargetPolicy.from_settings(settings)
        self.clients = clients
        self.schedules = schedules or SHARED_SCHEDULES
        self.annotate = annotate or (lambda **keys: None)
        self.finished = finished or (lambda report: None)

    def run_attempt(self, occurrence_id: str, claimant: str) -> AttemptReport:
        """Run one dispatched occurrence to a settled row (or to nothing, if it is not ours),
        as a batch of one."""
        return self.run_batch([occurrence_id], claimant)[0]

    def run_batch(
        self,
        occurrence_ids: Sequence[str],
        claimant: str,
        deadline: float | None = None,
        trace_id: str | None = None,
    ) -> list[AttemptReport]:
        """Run the occurrences dispatched together under `claimant`, answering each one's
        report in order. Their opens are one statement, the starts they need one transaction,
        their ends micro-batches; every write stays conditional on its own attempt, so the
        ledger answers each as it would alone. This thread waits for all their targets and
        renews their leases; a late row's judgment, which may wait for reconcile, has a
        thread of its own. An error fails only the attempts it struck: the others run to
        their ends, and then the first error is raised. `deadline` is the executor's own
        monotonic end (a Lambda's time left)."""
        batch = _Batch(self, claimant, deadline, trace_id or uuid.uuid4().hex)
        return batch.run(list(occurrence_ids))


class _Attempt:
    """One attempt of an occurrence under its batch's claimant, as steps its batch takes; a
    step that ends it early raises `_Ended`. Steps run in the attempt's own `contextvars`
    context, on one thread at a time, so what `annotate` adds follows the attempt and its
    target. `leased_at` is when its lease was last granted or renewed, timed from the call:
    the database writes a lease after the call, maybe well before its answer."""

    occurrence: Occurrence
    channel: Channel
    schedule: Schedule

    def __init__(self, batch: _Batch, occurrence_id: str) -> None:
        self.executor, self.ledger, self.settings = batch.executor, batch.ledger, batch.settings
        self.clock, self.claimant, self.deadline = batch.clock, batch.claimant, batch.deadline
        self.occurrence_id = occurrence_id
        self.leased_at = self.clock.monotonic()
        self.fencing_token: int | None = None
        self.start: AttemptStart | None = None
        self.context = contextvars.copy_context()
        self.context.run(self.executor.annotate, occurrence_id=occurrence_id)

    def step(self, method: Callable[..., R], *args: Any) -> R:
        """`method(*args)` in this attempt's context."""
        return self.context.run(method, *args)

    def open(self, opened: OpenedAttempt | None) -> bool:
        """Take the batch's read of the occurrence and its channel (a plain attempt may have
        started in it); True when a late row must be judged before it may start."""
        if opened is None:
            raise _Ended(
                AttemptReport(self.occurrence_id, "lost", error="occurrence no longer exists")
            )
        self.occurrence = occurrence = opened.occurrence
        self.executor.annotate(channel_id=occurrence.channel_id, attempt=occurrence.attempt)
        if occurrence.status != CLAIMED or occurrence.claimed_by != self.claimant:
            raise self._lost("not claimed by this dispatch")
        self.channel, self.schedule = self._resolve(opened.channel)
        self.start = opened.start
        self.fencing_token = opened.start.fencing_token if opened.start else None
        return opened.misfire_due

    def _resolve(self, channel: Channel | None) -> tuple[Channel, Schedule]:
        """The channel (read by id with the occurrence, as it is now) and its compiled
        schedule; an occurrence whose channel cannot run is settled `failed`, saying why."""
        if channel is None:
            why = f"channel_unavailable: channel {self.occurrence.channel_id} no longer exists"
        elif channel.status != CHANNEL_ACTIVE:
            why = f"channel_unavailable: channel {channel.name!r} is {channel.status}, not active"
        else:
            try:
                return channel, self.executor.schedules.get(channel)
            except ScheduleInvalid as exc:
                why = f"channel_unavailable: stored schedule of {channel.name!r} is invalid: {exc}"
        raise _Ended(Ending(FAILED, why))

    def judge(self) -> None:
        """A late row: return once the misfire policy lets it run. While reconcile has yet to
        plan the late window (after an outage) the judgment waits, a poll interval at a time,
        as long as the lease allows; then the claim is handed back."""
        occurrence, rule = self.occurrence, misfire_rule(self.schedule, self.settings)
        poll = self.settings.poll_interval.total_seconds()
        wait_until = self.latest()
        if self.deadline is not None:
            wait_until = min(wait_until, self.deadline - self._margin())
        while True:
            judged = self.ledger.misfires.judge_misfires(
                occurrence.id, self.claimant, occurrence.channel_id, rule
            )
            if judged.dropped:
                metrics.record_occurrences(SKIPPED_MISFIRE, judged.dropped)
            if judged.verdict == "run":
                return
            if judged.verdict == "skipped":
                raise _Ended(self._report(SKIPPED_MISFIRE, SKIPPED_MISFIRE))
            if judged.verdict == "lost":
                raise self._lost("lost the claim before starting")
            if self.clock.monotonic() + poll > wait_until:
                self.ledger.attempts.release_claim(occurrence.id, self.claimant)
                raise self._lost(
                    "misfire judgment waits for reconcile to catch up; claim handed back"
                )
            self.clock.sleep(poll)

    def start_request(self) -> StartRequest:
        singleton, attempts = singleton_of(self.schedule), self.schedule.retry.max_attempts
        return StartRequest(self.occurrence, self.channel.version, singleton, attempts)

    def started(self, start: AttemptStart) -> None:
        """What the start decided: running, or the attempt ends here (busy, waiting, lost)."""
        occurrence, singleton = self.occurrence, singleton_of(self.schedule)
        self.executor.annotate(fencing_token=start.fencing_token)
        if start.outcome in ("singleton_busy", "waiting"):
            metrics.record_singleton_contention()
        if start.outcome == "singleton_busy" and occurrence.waits_for_key:
            # A backfill run one after another: its turn comes when the key frees.
            wait = self.settings.poll_interval.total_seconds()
            if not self.ledger.attempts.release_claim(occurrence.id, self.claimant, wait):
                raise self._lost("lost the claim before waiting")
            raise _Ended(self._report("waiting"))
        if start.outcome == "singleton_busy":
            assert singleton is not None
            raise _Ended(Ending(SKIPPED_SINGLETON, busy_reason(singleton)))
        if start.outcome == "waiting":
            raise _Ended(self._report("waiting"))
        if not start.started or start.started_at is None:
            raise self._lost("lost the claim before starting")
        if start.replaced is not None:
            log.info(
                'occurrence %s replaced %s (concurrency.policy "replace")',
                occurrence.id,
                start.replaced,
            )
        self.start = start
        self.fencing_token = start.fencing_token

    def delivery(self) -> tuple[Envelope, float] | TargetOutcome:
        """What the target is sent and the seconds it has, or its outcome when no time is
        left in this executor."""
        occurrence, channel, start = self.occurrence, self.channel, self.start
        schedule = self.schedule
        assert start is not None and start.started_at is not None
        metrics.record_schedule_lag((start.started_at - occurrence.due_at).total_seconds())
        singleton = singleton_of(schedule)
        envelope = build_envelope(
            payload=schedule.payload,
            trigger=occurrence.trigger,  # type: ignore[arg-type]
            occurrence_id=occurrence.id,
            channel_id=channel.channel_id,
            channel_name=channel.name,
            scheduled_for=occurrence.scheduled_for,
            due_at=occurrence.due_at,
            started_at=start.started_at,
            timezone=schedule.timezone,
            attempt=occurrence.attempt,
            singleton_key=singleton.key if singleton else None,
            fencing_token=start.fencing_token,
        )
        default = self.settings.default_timeout.total_seconds()
        budget = channel.timeout_ms / 1000 if channel.timeout_ms else default
        if self.deadline is not None:
            budget = min(budget, self.deadline - self.clock.monotonic() - self._margin())
        if budget <= 0:
            return timed_out(0, "no time left in this executor")
        return envelope, budget

    def renew(self) -> None:
        """Extend the claim and the slot; raises `_Ended` when the attempt must stop, writing
        nothing: another owns it, or no renewal succeeded within the lease's give-up."""
        asked = self.clock.monotonic()  # as the start's lease, timed from the call
        try:
            renewed = self.ledger.attempts.renew(
                self.occurrence.id,
                self.claimant,
                self.fencing_token,
                self.settings.claim_lease_secs,
            )
        except Exception as exc:
            metrics.record_renewal_failure()
            log.warning("renewing %s failed: %s", self.occurrence.id, exc)
            if self.clock.monotonic() >= self.latest():
                why = (
                    "no successful renewal within the lease; stopped before a peer could take over"
                )
                raise _Ended(self._stopped("stopped", why)) from None
            return
        if not renewed:
            raise _Ended(self._stopped("superseded", self._why_lost()))
        self.leased_at = asked

    def ending(self, outcome: TargetOutcome) -> tuple[SettleRequest, Ending]:
        """The settle a target's outcome asks for."""
        end = ending(outcome, self.occurrence.attempt, self.schedule.retry)
        return self.settle_request(end, outcome), end

    def settle_request(self, end: Ending, outcome: TargetOutcome | None = None) -> SettleRequest:
        """How `end` is written: a target's, with its `outcome`, or one before a target ran."""
        occurrence, token = self.occurrence, self.fencing_token
        return SettleRequest(
            occurrence.id,
            self.claimant,
            end.status,
            fencing_token=token,
            error_message=end.error,
            error_detail=end.detail,
            result=outcome.result if outcome else None,
            retry_in=end.retry_in,
            # Not started: a place or slot it holds from before (the row shows its key)
            # is given back now, not when its lease runs out.
            release_held=token is None and occurrence.singleton_key is not None,
            completed_is_told=outcome is not None and alerts.COMPLETED in self.schedule.alerts.on,
        )

    def latest(self) -> float:
        """When its end must be written by: the lease last renewed, less its margin (the
        heartbeat's give-up point)."""
        return self.leased_at + self.settings.renewal_give_up.total_seconds()

    def settled(self, end: Ending, written: bool) -> AttemptReport:
        """The report of an end written (or, not written, lost to another owner)."""
        if not written:
            return self._stopped("superseded", self._why_lost())
        status = PENDING if end.retry_in is not None else end.status
        if end.retry_in is None:
            metrics.record_occurrences(end.status)
        return self._report(status, status, end.error, end.retry_in)

    def _report(
        self,
        outcome: str,
        status: str | None = None,
        error: str | None = None,
        retry_in: float | None = None,
    ) -> AttemptReport:
        occurrence = self.occurrence
        return AttemptReport(
            occurrence.id, outcome, status, self.fencing_token, error, occurrence.attempt, retry_in
        )

    def _lost(self, why: str) -> _Ended:
        """The attempt is not this dispatch's to run (any more), and wrote nothing."""
        return _Ended(self._report("lost", error=why))

    def _stopped(self, outcome: str, reason: str) -> AttemptReport:
        """An attempt that stops writing nothing says so, once."""
        occurrence = self.occurrence
        log.warning(
            "occurrence %s attempt %d %s: %s", occurrence.id, occurrence.attempt, outcome, reason
        )
        return self._report(outcome, error=reason)

    def _why_lost(self) -> str:
        """What became of an occurrence this attempt no longer owns, as a log can say it."""
        try:
            now = self.ledger.occurrences.get_occurrence(self.occurrence.id)
        except Exception as exc:  # the reason is for a log line; not knowing it changes nothing
            return f"ownership lost ({type(exc).__name__} reading why)"
        if now.claimed_by != self.claimant and now.status in (CLAIMED, RUNNING):
            return f"ownership lost: taken over by a later attempt ({now.attempt}) after this lease expired"
        return f"ownership lost: the occurrence is {now.status} ({now.error_message or 'no reason given'})"

    def _margin(self) -> float:
        return self.settings.execute_margin.total_seconds()


@dataclass(eq=False, slots=True)
class _Running:
    """A target running for an attempt: its budget, when its lease is next renewed and when
    it is abandoned."""

    budget: float
    beat_at: float
    give_up_at: float


#: What `_Batch._step` answers for a step that ended its attempt, or failed it.
_ENDED: Final = object()
#: What a batch's inbox hears of an attempt: its target's outcome, or its judgment's (None:
#: it may start; else how it ended, an `_Ended`, or its error).
_Answer = TargetOutcome | BaseException | None


class _Ends:
    """A batch's ends waiting to be written together: at most `SETTLE_MOST` at a time, each
    written `SETTLE_EVERY_SECS` after its first end at the latest, at once when no target of
    the batch can still join it, and never later than an end's lease margin."""

    def __init__(self, batch: _Batch) -> None:
        self.ledger, self.settings, self.clock = batch.ledger, batch.settings, batch.clock
        #: Each end with when it came.
        self.waiting: list[tuple[_Attempt, SettleRequest, Ending, float]] = []

    def add(self, attempt: _Attempt, request: SettleRequest, end: Ending) -> None:
        self.waiting.append((attempt, request, end, self.clock.monotonic()))

    def due(self, joinable: bool) -> float:
        """When the ends waiting must be written: at once if no target can join them."""
        if not self.waiting:
            return math.inf
        if not joinable:
            return -math.inf
        latest = min(attempt.latest() for attempt, *_ in self.waiting)
        return min(self.waiting[0][3] + SETTLE_EVERY_SECS, latest)

    def group(self, joinable: bool) -> list[tuple[_Attempt, SettleRequest, Ending, float]]:
        """The next ends to write together, once they are due (else none)."""
        if len(self.waiting) < SETTLE_MOST and self.due(joinable) > self.clock.monotonic():
            return []
        group, self.waiting = self.waiting[:SETTLE_MOST], self.waiting[SETTLE_MOST:]
        return group

    def write(self, requests: list[SettleRequest]) -> list[bool]:
        """The ends written, tried again while the database is unavailable, as long as an
        attempt may go without a renewal: each is conditional on ownership, so trying again is
        safe, while giving up would leave a finished run to be run again by a peer. (A commit
        lost with its answer matches nothing when tried again: it reads as superseded.)"""
        give_up_at = self.clock.monotonic() + self.settings.renewal_give_up.total_seconds()
        pause = min(self.settings.heartbeat_interval.total_seconds(), SETTLE_RETRY_SECS)
        while True:
            try:
                return self.ledger.attempts.settle_many(requests)
            except DatabaseUnavailable as exc:
                if self.clock.monotonic() + pause >= give_up_at:
                    raise
                log.warning("settling failed, trying again: %s", exc)
                self.clock.sleep(pause)


class _Batch:
    """The attempts of one dispatch (one claimant, one trace), driven by the calling thread
    as `Executor.run_batch` says: each target on a thread of its own, a late row's judgment
    too (it may wait for reconcile), while this one renews the leases and writes the ends
    (`_Ends`). A target's outcome that comes after its attempt stopped is discarded, never
    settled."""

    def __init__(
        self, executor: Executor, claimant: str, deadline: float | None, trace_id: str
    ) -> None:
        self.executor, self.ledger = executor, executor.ledger
        self.settings, self.clock = executor.settings, executor.clock
        self.claimant, self.deadline, self.trace_id = claimant, deadline, trace_id
        self.inbox: queue.SimpleQueue[tuple[_Attempt, _Answer]] = queue.SimpleQueue()
        self.woken = threading.Event()
        self.reports: dict[_Attempt, AttemptReport] = {}
        self.running: dict[_Attempt, _Running] = {}
        self.judging = 0
        self.failure: BaseException | None = None
        self.ends = _Ends(self)

    def run(self, occurrence_ids: list[str]) -> list[AttemptReport]:
        attempts = [_Attempt(self, i) for i in occurrence_ids]
        found = self.ledger.attempts.open_attempts(
            occurrence_ids,
            self.claimant,
            self.settings.claim_lease_secs,
            self.trace_id,
            misfire_grace_secs=self.settings.misfire_grace.total_seconds(),
        )
        to_start = []
        for attempt in attempts:
            late = self._step(attempt, attempt.open, found.get(attempt.occurrence_id))
            if late is _ENDED:
                continue
            if late:
                self._judge(attempt)
            elif attempt.start is None:
                to_start.append(attempt)
            else:
                self._launch(attempt)
        self._start(to_start)
        while self.running or self.judging or self.ends.waiting:
            self._wait()
            self._beat()
            self._write_ends()
        if self.failure is not None:
            raise self.failure
        return [self.reports[attempt] for attempt in attempts]

    def _step(self, attempt: _Attempt, method: Callable[..., Any], *args: Any) -> Any:
        """`method(*args)` in the attempt's context; `_ENDED` when it ended the attempt, or
        raised (the error is kept for the end of the batch)."""
        try:
            return attempt.step(method, *args)
        except _Ended as ended:
            self._ended(attempt, ended.ended)
        except Exception as exc:
            self._failed(exc)
        return _ENDED

    def _start(self, attempts: list[_Attempt]) -> None:
        """Take the concurrency keys (if any) and go `running`, in one transaction; the
        overlap policy decides, in the ledger, what a contender for a held key does."""
        if not attempts:
            return
        asked = self.clock.monotonic()
        try:
            starts = self.ledger.attempts.start_attempts(
                [a.step(a.start_request) for a in attempts],
                self.claimant,
                self.settings.claim_lease_secs,
                trace_id=self.trace_id,
                wait_secs=self.settings.poll_interval.total_seconds(),
            )
        except Exception as exc:
            self._failed(exc)
            return
        for attempt, start in zip(attempts, starts, strict=True):
            attempt.leased_at = asked
            if self._step(attempt, attempt.started, start) is not _ENDED:
                self._launch(attempt)

    def _judge(self, attempt: _Attempt) -> None:
        """Judge a late row on a thread of its own, which answers in the inbox once out of
        the attempt's context (this thread enters it next)."""
        self.judging += 1

        def answer() -> None:
            verdict: BaseException | None = None
            try:
                attempt.step(attempt.judge)
            except BaseException as exc:
                verdict = exc
            self._tell(attempt, verdict)

        threading.Thread(target=answer, name=f"judge-{attempt.occurrence_id}", daemon=True).start()

    def _launch(self, attempt: _Attempt) -> None:
        """Start the attempt's target on a thread of its own (its context goes with it)."""
        delivery = self._step(attempt, attempt.delivery)
        if delivery is _ENDED:
            return
        if isinstance(delivery, TargetOutcome):
            self._end(attempt, delivery)
            return
        envelope, budget = delivery
        clients, policy = self.executor.clients, self.executor.policy
        target = attempt.channel.target

        def job() -> None:
            try:
                outcome = run_target(target, envelope, budget, clients, policy=policy)
            except BaseException as exc:  # run_target answers for the target; this is the rest
                outcome = TargetOutcome(ok=False, error=f"{type(exc).__name__}: {exc}")
            self._tell(attempt, outcome)

        now = self.clock.monotonic()
        beat = self.settings.heartbeat_interval.total_seconds()
        self.running[attempt] = _Running(budget, now + beat, now + budget + OVERRUN_GRACE_SECS)
        attempt.step(TARGET_THREADS.run, job, f"target-{attempt.occurrence_id}")

    def _tell(self, attempt: _Attempt, answer: _Answer) -> None:
        self.inbox.put((attempt, answer))
        self.woken.set()

    def _wait(self) -> None:
        """Wait for what the batch does next: a target or judgment to answer, a renewal, an
        abandonment or an end's write to fall due."""
        if self.inbox.empty():
            due = self._next_due()
            if due is None:  # only judgments are out: they answer in the inbox
                self._take(*self.inbox.get())
            elif (left := due - self.clock.monotonic()) > 0:
                self.clock.wait(self.woken, left)
        self.woken.clear()
        while True:
            try:
                self._take(*self.inbox.get_nowait())
            except queue.Empty:
                return

    def _next_due(self) -> float | None:
        times = [t for r in self.running.values() for t in (r.beat_at, r.give_up_at)]
        if self.ends.waiting:
            times.append(self.ends.due(bool(self.running or self.judging)))
        return min(times, default=None)

    def _take(self, attempt: _Attempt, answer: _Answer) -> None:
        if isinstance(answer, TargetOutcome):
            if self.running.pop(attempt, None) is not None:  # else it stopped: discarded
                self._end(attempt, answer)
            return
        self.judging -= 1
        if isinstance(answer, _Ended):
            self._ended(attempt, answer.ended)
        elif answer is not None:
            self._failed(answer)
        else:
            self._start([attempt])

    def _beat(self) -> None:
        """Abandon the targets past their budget and renew the leases that are due."""
        beat = self.settings.heartbeat_interval.total_seconds()
        for attempt, running in list(self.running.items()):
            now = self.clock.monotonic()
            if now >= running.give_up_at:
                del self.running[attempt]
                abandoned = timed_out(running.budget, "the target did not return; abandoned")
                self._end(attempt, abandoned)
            elif now >= running.beat_at:
                if self._step(attempt, attempt.renew) is _ENDED:
                    del self.running[attempt]
                else:
                    running.beat_at = self.clock.monotonic() + beat

    def _end(self, attempt: _Attempt, outcome: TargetOutcome) -> None:
        ended = self._step(attempt, attempt.ending, outcome)
        if ended is not _ENDED:
            self.ends.add(attempt, *ended)

    def _write_ends(self) -> None:
        """Write the ends that are due; a write failing for good fails its own attempts only."""
        while group := self.ends.group(bool(self.running or self.judging)):
            try:
                written = self.ends.write([request for _, request, _, _ in group])
            except Exception as exc:
                self._failed(exc)
                continue
            for (attempt, _, end, _), ok in zip(group, written, strict=True):
                report = self._step(attempt, attempt.settled, end, ok)
                if report is not _ENDED:
                    self._ended(attempt, report)

    def _ended(self, attempt: _Attempt, ended: AttemptReport | Ending) -> None:
        """An attempt's report (then `finished` is told), or an end to write with the batch's."""
        if isinstance(ended, Ending):
            self.ends.add(attempt, attempt.settle_request(ended), ended)
            return
        self.reports[attempt] = ended
        self._step(attempt, self.executor.finished, ended)

    def _failed(self, error: BaseException) -> None:
        if self.failure is None:
            self.failure = error
