"""Execute one attempt: open it under its claim, start, run under a heartbeat, settle.

Ownership is the rule of every step. The attempt acts only as the claimant it was dispatched
under and, with a concurrency key, only with the fencing token its start took; every write is
conditional on both, so a superseded attempt (re-claimed after its lease ran out, cancelled)
matches nothing and writes nothing.

While the target runs, the calling thread renews the claim and the slot every
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
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

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
from cronledger.targets import (
    AwsClients,
    Envelope,
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
#: The longest pause between two tries of a settle the database did not serve.
SETTLE_RETRY_SECS = 1.0
#: How long a thread that ran a target waits for the next one before it ends.
TARGET_THREAD_IDLE_SECS = 60.0
#: A batch's ends are written together, at most this many at a time...
SETTLE_MOST = 25
#: ...and at most this long after the first of them finished.
SETTLE_EVERY_SECS = 0.05

R = TypeVar("R")
A = TypeVar("A")
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

    def idle_count(self) -> int:
        with self._lock:
            return len(self._idle)

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
    """An attempt's step ended it before its target's outcome was settled: `report` says how."""

    def __init__(self, report: AttemptReport) -> None:
        super().__init__(report.outcome)
        self.report = report


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
    ) -> None:
        """`annotate(**keys)` is told what the attempt learns as it learns it (channel id,
        attempt, fencing token), so a caller can put them on its log lines. `clock` times
        the lease, the renewals and every pause."""
        self.ledger = ledger
        self.clock = clock
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
        batch: Batch | None = None,
    ) -> AttemptReport:
        """Run one dispatched occurrence to a settled row (or to nothing, if it is not ours).
        `deadline` is the executor's own monotonic end (a Lambda's time left). Its writes go
        with those of `batch` (see `Executor.batch`), or alone, as a batch of one."""
        writes = _Writes(batch or self.batch(claimant, 1, trace_id))
        try:
            return _Attempt(self, writes, claimant, deadline).run(occurrence_id)
        except _Ended as ended:
            return ended.report
        finally:
            writes.close()

    def batch(self, claimant: str, size: int, trace_id: str | None = None) -> Batch:
        """The writes of `size` attempts dispatched together under `claimant`, each run by
        `run_attempt(..., batch=)` on a thread of its own: their opens are one statement,
        their starts one transaction, their ends written in micro-batches."""
        return Batch(self, claimant, size, trace_id or uuid.uuid4().hex)


class _Attempt:
    """One attempt of an occurrence under `claimant`: open it under the claim, resolve its
    channel, judge a late row, take the concurrency key and go `running`, run the target
    while renewing the lease, settle. A step that ends the attempt early raises `_Ended`
    with its report. `leased_at` is when its lease was last granted or renewed, timed from
    the call: the database writes a lease after the call, maybe well before its answer."""

    occurrence: Occurrence

    def __init__(
        self, executor: Executor, writes: _Writes, claimant: str, deadline: float | None
    ) -> None:
        self.executor, self.writes = executor, writes
        self.claimant, self.deadline = claimant, deadline
        self.ledger, self.settings, self.clock = executor.ledger, executor.settings, executor.clock
        self.leased_at = self.clock.monotonic()
        self.fencing_token: int | None = None

    def run(self, occurrence_id: str) -> AttemptReport:
        opened = self._open(occurrence_id)
        channel, schedule = self._resolve(opened.channel)
        if opened.misfire_due:
            self._judge_misfire(schedule)
        start = opened.start
        if start is None:
            self.leased_at = self.clock.monotonic()
            start = self._start(channel, schedule)
        self.fencing_token = start.fencing_token
        outcome = self._run(channel, schedule, start)
        end = ending(outcome, self.occurrence.attempt, schedule.retry)
        return self._settle(end, outcome.result, alerts.COMPLETED in schedule.alerts.on)

    def _open(self, occurrence_id: str) -> OpenedAttempt:
        """Read the occurrence and its channel (a plain attempt may start in this read)."""
        opened = self.writes.open(occurrence_id)
        if opened is None:
            raise _Ended(AttemptReport(occurrence_id, "lost", error="occurrence no longer exists"))
        self.occurrence = occurrence = opened.occurrence
        self.executor.annotate(channel_id=occurrence.channel_id, attempt=occurrence.attempt)
        if occurrence.status != CLAIMED or occurrence.claimed_by != self.claimant:
            raise self._lost("not claimed by this dispatch")
        return opened

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
        raise _Ended(self._settle(Ending(FAILED, why)))

    def _judge_misfire(self, schedule: Schedule) -> None:
        """Return when a late cron row may run under its channel's misfire policy. While
        reconcile has yet to plan the late window (after an outage) it waits, a poll interval
        at a time, as long as the lease allows; then the claim is handed back."""
        occurrence, rule = self.occurrence, misfire_rule(schedule, self.settings)
        poll = self.settings.poll_interval.total_seconds()
        wait_until = self.clock.monotonic() + self.settings.renewal_give_up.total_seconds()
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

    def _start(self, channel: Channel, schedule: Schedule) -> AttemptStart:
        """Take the concurrency key (if any) and go `running`, in one transaction; the
        overlap policy decides, in the ledger, what a contender for a held key does."""
        occurrence, singleton = self.occurrence, singleton_of(schedule)
        request = StartRequest(occurrence, channel.version, singleton, schedule.retry.max_attempts)
        start = self.writes.start(request)
        self.executor.annotate(fencing_token=start.fencing_token)
        if start.outcome in ("singleton_busy", "waiting"):
            metrics.record_singleton_contention()
        if start.outcome == "singleton_busy" and occurrence.waits_for_key:
            # A backfill run one after another: its turn comes when the key frees.
            wait = self.settings.poll_interval.total_seconds()
            if not self.ledger.attempts.wait_for_key(occurrence.id, self.claimant, wait):
                raise self._lost("lost the claim before waiting")
            raise _Ended(self._report("waiting"))
        if start.outcome == "singleton_busy":
            assert singleton is not None
            raise _Ended(self._settle(Ending(SKIPPED_SINGLETON, busy_reason(singleton))))
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
        return start

    def _run(self, channel: Channel, schedule: Schedule, start: AttemptStart) -> TargetOutcome:
        """Deliver the envelope under the deadline while the lease is renewed."""
        occurrence = self.occurrence
        assert start.started_at is not None
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
        return self._run_with_heartbeat(channel, envelope, budget)

    def _run_with_heartbeat(
        self, channel: Channel, envelope: Envelope, budget: float
    ) -> TargetOutcome:
        """Run the target on its own thread while this one renews the lease: the outcome,
        or `_Ended` when the attempt must stop, writing nothing."""
        done = threading.Event()
        box: list[TargetOutcome] = []
        clients, policy = self.executor.clients, self.executor.policy
        clock, occurrence = self.clock, self.occurrence

        def target() -> None:
            try:
                box.append(run_target(channel.target, envelope, budget, clients, policy=policy))
            except BaseException as exc:  # run_target answers for the target; this is the rest
                box.append(TargetOutcome(ok=False, error=f"{type(exc).__name__}: {exc}"))
            finally:
                done.set()

        TARGET_THREADS.run(target, name=f"target-{occurrence.id}")
        beat = self.settings.heartbeat_interval.total_seconds()
        give_up = self.settings.renewal_give_up.total_seconds()
        give_up_at = clock.monotonic() + budget + OVERRUN_GRACE_SECS
        while not clock.wait(done, max(0.0, min(beat, give_up_at - clock.monotonic()))):
            if clock.monotonic() >= give_up_at:
                return timed_out(budget, "the target did not return; abandoned")
            asked = clock.monotonic()  # as the start's lease, timed from the call
            try:
                renewed = self.ledger.attempts.renew(
                    occurrence.id, self.claimant, self.fencing_token, self.settings.claim_lease_secs
                )
            except Exception as exc:
                metrics.record_renewal_failure()
                log.warning("renewing %s failed: %s", occurrence.id, exc)
                if clock.monotonic() - self.leased_at >= give_up:
                    raise self._stopped(
                        "stopped",
                        "no successful renewal within the lease; stopped before a peer could "
                        "take over",
                    ) from None
                continue
            if not renewed:
                raise self._stopped("superseded", self._why_lost())
            self.leased_at = asked
        return box[0]

    def _settle(
        self, end: Ending, result: str | None = None, completed_is_told: bool = False
    ) -> AttemptReport:
        """Write the end (or the retry) under ownership, releasing the slot, before the
        lease last renewed passes its margin (the heartbeat's give-up point)."""
        occurrence, token = self.occurrence, self.fencing_token
        request = SettleRequest(
            occurrence.id,
            self.claimant,
            end.status,
            fencing_token=token,
            error_message=end.error,
            error_detail=end.detail,
            result=result,
            retry_in=end.retry_in,
            # Not started: a place or slot it holds from before (the row shows its key)
            # is given back now, not when its lease runs out.
            release_held=token is None and occurrence.singleton_key is not None,
            completed_is_told=completed_is_told,
        )
        latest = self.leased_at + self.settings.renewal_give_up.total_seconds()
        if not self._settle_through_blips(lambda: self.writes.settle(request, latest)):
            return self._stopped("superseded", self._why_lost()).report
        status = PENDING if end.retry_in is not None else end.status
        if end.retry_in is None:
            metrics.record_occurrences(end.status)
        return self._report(status, status, end.error, end.retry_in)

    def _settle_through_blips(self, settle: Callable[[], bool]) -> bool:
        """`settle()`, tried again while the database is unavailable, as long as an attempt
        may go without a renewal: it is conditional on ownership, so trying again is safe,
        while giving up would leave a finished run to be run again by a peer. (A commit lost
        with its answer matches nothing when tried again: it reads as superseded.)"""
        give_up_at = self.clock.monotonic() + self.settings.renewal_give_up.total_seconds()
        pause = min(self.settings.heartbeat_interval.total_seconds(), SETTLE_RETRY_SECS)
        while True:
            try:
                return settle()
            except DatabaseUnavailable as exc:
                if self.clock.monotonic() + pause >= give_up_at:
                    raise
                log.warning("settling failed, trying again: %s", exc)
                self.clock.sleep(pause)

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

    def _stopped(self, outcome: str, reason: str) -> _Ended:
        """An attempt that stops writing nothing says so, once."""
        occurrence = self.occurrence
        log.warning(
            "occurrence %s attempt %d %s: %s", occurrence.id, occurrence.attempt, outcome, reason
        )
        return _Ended(self._report(outcome, error=reason))

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


class Batch:
    """The writes of one dispatch's attempts (one claimant, one trace): their opens in one
    statement, their starts in one transaction, their ends in micro-batches of at most
    `SETTLE_MOST`, each written `SETTLE_EVERY_SECS` after its first end at the latest, at
    once when no other attempt of the batch can still join it, and never later than an
    end's lease margin. Every write stays conditional on its own attempt's claimant and
    token: the ledger answers each one as it would alone."""

    def __init__(self, executor: Executor, claimant: str, size: int, trace_id: str) -> None:
        ledger, settings, clock = executor.ledger, executor.settings, executor.clock
        lease = settings.claim_lease_secs

        def open_all(ids: list[str]) -> list[OpenedAttempt | None]:
            grace = settings.misfire_grace.total_seconds()
            found = ledger.attempts.open_attempts(
                ids, claimant, lease, trace_id, misfire_grace_secs=grace
            )
            return [found.get(i) for i in ids]

        def start_all(requests: list[StartRequest]) -> list[AttemptStart]:
            wait = settings.poll_interval.total_seconds()
            return ledger.attempts.start_attempts(
                requests, claimant, lease, trace_id=trace_id, wait_secs=wait
            )

        self.opens = _Together(open_all, size, clock)
        self.starts = _Together(start_all, size, clock)
        self.settles = _Together(
            ledger.attempts.settle_many, size, clock, SETTLE_MOST, SETTLE_EVERY_SECS
        )


class _Writes:
    """One attempt's open, start and settle, written through its batch (of one, when it was
    dispatched alone). Each `_Together` of the batch waits for every attempt that may still
    join it: an attempt that will not, or that ends, says so."""

    def __init__(self, batch: Batch) -> None:
        self.batch = batch
        self.owed: set[_Together[Any, Any]] = {batch.opens, batch.starts, batch.settles}

    def open(self, occurrence_id: str) -> OpenedAttempt | None:
        opened = self._call(self.batch.opens, occurrence_id)
        if opened is not None and opened.start is not None:
            self._leave(self.batch.starts)
        return opened

    def start(self, request: StartRequest) -> AttemptStart:
        return self._call(self.batch.starts, request)

    def settle(self, request: SettleRequest, latest: float) -> bool:
        return self._call(self.batch.settles, request, latest)

    def _call(self, together: _Together[R, A], request: R, latest: float = math.inf) -> A:
        if together is not self.batch.opens:
            self._leave(self.batch.opens)
        if together is self.batch.settles:
            self._leave(self.batch.starts)
        self.owed.discard(together)
        try:
            return together.call(request, latest)
        except BaseException:
            self.owed.add(together)
            raise

    def _leave(self, together: _Together[Any, Any]) -> None:
        if together in self.owed:
            self.owed.discard(together)
            together.leave()

    def close(self) -> None:
        for together in list(self.owed):
            self._leave(together)


@dataclass(eq=False)
class _Group(Generic[R, A]):
    requests: list[R] = field(default_factory=list)
    first_at: float = 0.0
    latest: float = math.inf
    answers: Sequence[A] | None = None
    error: BaseException | None = None


class _Together(Generic[R, A]):
    """Calls from the attempts of a batch, each on its own thread, written as one group by
    `write` (a list of requests in, their answers in order out). A group is written once
    every attempt that may still call has called, once it holds `most`, `wait_secs` after
    its first call, or at the earliest `latest` a call names, whichever comes first, by
    the thread that finds it due; each caller gets its own answer (or the write's error,
    after which it may call again)."""

    def __init__(
        self,
        write: Callable[[list[R]], Sequence[A]],
        parties: int,
        clock: Clock,
        most: int = 1_000,
        wait_secs: float = SETTLE_EVERY_SECS,
    ) -> None:
        self._write, self._clock, self._most, self._wait_secs = write, clock, most, wait_secs
        self._to_come = parties
        self._group: _Group[R, A] = _Group()
        self._done = threading.Condition()

    def call(self, request: R, latest: float = math.inf) -> A:
        with self._done:
            self._to_come -= 1
            group, index = self._group, len(self._group.requests)
            group.requests.append(request)
            if index == 0:
                group.first_at = self._clock.monotonic()
            group.latest = min(group.latest, latest)
            mine = self._take_if_due()
            while mine is None and group.answers is None and group.error is None:
                self._done.wait(self._left(group) if group is self._group else None)
                mine = self._take_if_due()
        if mine is not None:
            self._write_group(mine)
        if group.error is not None:
            with self._done:
                self._to_come += 1
            raise group.error
        assert group.answers is not None
        return group.answers[index]

    def leave(self) -> None:
        """One attempt that will not call (again)."""
        with self._done:
            self._to_come -= 1
            mine = self._take_if_due()
        if mine is not None:
            self._write_group(mine)

    def _take_if_due(self) -> _Group[R, A] | None:
        """The group being gathered, taken for this thread to write, if it is due."""
        group = self._group
        if not group.requests or self._left(group) > 0:
            return None
        self._group = _Group()
        return group

    def _left(self, group: _Group[R, A]) -> float:
        if self._to_come <= 0 or len(group.requests) >= self._most:
            return 0.0
        due = min(group.first_at + self._wait_secs, group.latest)
        return due - self._clock.monotonic()

    def _write_group(self, group: _Group[R, A]) -> None:
        answers: Sequence[A] | None = None
        error: BaseException | None = None
        try:
            answers = self._write(group.requests)
        except BaseException as exc:
            error = exc
        with self._done:
            group.answers, group.error = answers, error
            self._done.notify_all()
