"""Reconcile: stored schedules in, durable occurrences out (docs/guarantees.md#reconcile).

A pass decides where each cursor should be, plans what is due, and writes the rows and the
cursor moves together (`OccurrenceStore.materialise`: one statement on PostgreSQL, one transaction on
SQLite). A channel gets its rows only if its cursor compare-and-set wins, so:

| meanwhile…                     | outcome                                                     |
|--------------------------------|-------------------------------------------------------------|
| the pass dies before writing   | the cursor has not moved: the next pass plans the same      |
| a peer runs the same pass      | one wins each cursor and inserts its rows; the other writes |
|                                | nothing for that channel (and rows are UNIQUE per instant)  |
| an edit resets a cursor        | the stale plan loses the compare-and-set (it also names the |
|                                | scheduling hash it planned under, so a reset onto the same  |
|                                | instant is still a change): none of its rows land           |

No lease guards a pass: two reconcilers produce the same ledger. Planning is pure
(`Schedule.plan_pass`); this module only does the writes, batched: the rows and cursor moves
of up to `WRITE_BATCH` due channels go in one statement, each channel's all in the same one.
A full batch is written on a thread of its own while the pass plans the next, and the next
page of due cursors is read on another while the pass plans this one, so the database's work
overlaps the planning instead of alternating with it; a pass holds two connections at most.
If a batch fails, the pass falls back to one channel at a time, so one bad channel cannot
stop the others.

A pass reads two things, each a page at a time through an index, so its cost follows what is
due and what changed, never the number of channels installed (an idle pass reads two empty
index ranges): the channel changes its writes noted (`CursorStore.noted_changes`), and the running
cursors due by the horizon (`CursorStore.due_cursors`). A cursor is (re)initialised at the first
instant after *now* when it is new, its scheduling hash changed, or it was paused: never
back-filled from when the channel was written; the cursor writes of a page (inits, adopted
versions, pauses) are one statement each, and a note is forgotten with them.

A pass may be split into shards by a stable hash of `channel_id` (`Shard`): each reads and
writes only its own channels, so shards run in parallel (threads here, invocations on AWS),
one that dies is redone by the next pass, and passes split differently still agree.

A schedule bounds itself (`at`, `starts_at`, `ends_at`), so when its last instant is written
the plan's next cursor is None and the cursor parks: the channel has ended, and an idle pass
never looks at it again. Editing it so it has instants again (a later `ends_at`) changes its
scheduling hash, which re-initialises the cursor from now. Each row of a jittered channel is
due at `Schedule.due_at(instant)`; its identity stays the instant.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from cronledger import metrics
from cronledger.cron import PassPlan, Schedule, ScheduleInvalid
from cronledger.ledger import (
    PENDING,
    SKIPPED_MISFIRE,
    WHOLE,
    CursorInit,
    CursorMove,
    CursorWrites,
    DatabaseUnavailable,
    DueChannel,
    NewOccurrence,
    ScheduleState,
    Shard,
)
from cronledger.ledger.cursors import READ_PAGE, page_end
from cronledger.outbox import Sender, sweep
from cronledger.pacing import (
    JOB_HEARTBEAT_EVERY_SECS,
    SYSTEM_CLOCK,
    Backoff,
    Clock,
    Every,
    sleep_until_next,
)
from cronledger.ports import ReconcilePort
from cronledger.schedule_cache import SHARED_SCHEDULES, ScheduleCache
from cronledger.settings import Settings
from cronledger.targets import target_ref

if TYPE_CHECKING:
    from concurrent.futures import Future, ThreadPoolExecutor

    from cronledger.ledger.models import ScheduleWork

log = logging.getLogger(__name__)

JOB = "reconcile"
#: Retention is housekeeping, not a per-pass duty.
RETENTION_EVERY_SECS = 600.0
#: How long retention may hold up a loop's next pass (`after_pass`).
RETENTION_BUDGET_SECS = 5.0
#: Due channels a statement writes. A pass over ten thousand sends four, each planned while
#: the one before is written; a pass over a few hundred sends one, from the pass's thread.
#: The database's fixed cost per statement (planning it, committing) is spread over more
#: channels than at a thousand, which the pass's wall time shows (`make bench`).
WRITE_BATCH = 2_500


@dataclass
class PassReport:
    """What one pass did, for logs, metrics and tests."""

    now: datetime | None = None
    due: int = 0
    inserted: int = 0
    initialised: int = 0
    paused: int = 0
    advanced: int = 0
    failed: dict[str, str] = field(default_factory=dict)
    duration_secs: float = 0.0


@dataclass
class _Planned:
    rows: list[NewOccurrence]
    move: CursorMove
    skipped: int  # missed instants the summary row stands for


@dataclass
class _Written:
    """What writing one batch did: rows inserted, channels whose cursor this pass moved (a
    peer may have moved the others), channels that failed."""

    inserted: int = 0
    moved: set[str] = field(default_factory=set)
    failed: dict[str, str] = field(default_factory=dict)


def reconcile_once(
    ledger: ReconcilePort,
    settings: Settings,
    cache: ScheduleCache | None = None,
    shard: Shard = WHOLE,
) -> PassReport:
    """One pass over every schedule in `shard` that needs work. Raises only when the
    database fails for the whole pass (reading the work or the clock); one channel's failure
    is recorded in the report and the others go on."""
    cache = SHARED_SCHEDULES if cache is None else cache
    started = time.perf_counter()
    report = PassReport()
    with _cycle_collection_paused(), _Writes(ledger, report) as writes:
        now = ledger.db_now()
        report.now = now
        reset = _line_up_changes(ledger, cache, now, shard, report)
        for planned in _plan_due(ledger, settings, cache, now, shard, report, reset):
            writes.add(planned)
        writes.finish()
    report.duration_secs = time.perf_counter() - started
    metrics.record_reconcile_duration(report.duration_secs)
    if report.failed:
        log.warning("reconcile pass: %d channel(s) failed: %s", len(report.failed), report.failed)
    return report


def shards_for(due: int, settings: Settings) -> int:
    """How many shards a pass over `due` channels splits into: one per
    `reconcile_shard_size` started, at most `reconcile_max_shards`."""
    needed = -(-due // settings.reconcile_shard_size)
    return max(1, min(needed, settings.reconcile_max_shards))


#: Starts one shard of a pass elsewhere (on AWS, an asynchronous invocation of the reconcile
#: function); it returns at once, and the shard's own pass writes what it writes.
ShardLauncher = Callable[[Shard], None]


def reconcile_sharded(
    ledger: ReconcilePort,
    settings: Settings,
    cache: ScheduleCache | None = None,
    launch: ShardLauncher | None = None,
) -> PassReport:
    """One pass split into as many shards as what is due needs (`shards_for`: one probe of
    the due index sizes it). With `launch`, every shard but the first is handed to it and
    this process runs the first; without, they all run on threads of this process, their
    reports merged. Each shard reads and writes only its own channels, so shards never wait
    on each other's rows, and a shard that fails is redone by the next pass."""
    bound = settings.reconcile_shard_size * settings.reconcile_max_shards
    count = shards_for(ledger.cursors.due_count(settings.lookahead_secs, bound=bound), settings)
    shards = Shard.split(count)
    if count == 1:
        return reconcile_once(ledger, settings, cache)
    if launch is not None:
        for shard in shards[1:]:
            launch(shard)
        return reconcile_once(ledger, settings, cache, shards[0])
    from concurrent.futures import ThreadPoolExecutor

    with _cycle_collection_paused(), ThreadPoolExecutor(count, "reconcile-shard") as pool:
        return merged(list(pool.map(lambda s: reconcile_once(ledger, settings, cache, s), shards)))


def merged(reports: list[PassReport]) -> PassReport:
    """The shards' reports as one pass's: counts added, the earliest clock, the longest shard."""
    total = PassReport()
    for report in reports:
        if report.now is not None and (total.now is None or report.now < total.now):
            total.now = report.now
        total.due += report.due
        total.inserted += report.inserted
        total.initialised += report.initialised
        total.paused += report.paused
        total.advanced += report.advanced
        total.failed.update(report.failed)
        total.duration_secs = max(total.duration_secs, report.duration_secs)
    return total


@contextmanager
def _cycle_collection_paused() -> Iterator[None]:
    """A pass over thousands of channels allocates a few hundred thousand short-lived
    objects, all freed by reference counting when it ends. Left on, the cycle collector
    keeps traversing the process's whole heap while they pile up: about a sixth of a
    10,000-channel pass (`make bench`). It runs again as soon as the pass is over."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _collect_page_cycles() -> None:
    """With the cycle collector paused for the pass, what a page leaves in reference cycles
    would pile up until the pass ends: hundreds of megabytes over a million channels. A
    collection of the young generations after each page frees it, and walks only what was
    allocated since the last one, not the process's heap."""
    if not gc.isenabled():
        gc.collect(1)


def _line_up_changes(
    ledger: ReconcilePort, cache: ScheduleCache, now: datetime, shard: Shard, report: PassReport
) -> set[str]:
    """Bring the cursor of every channel a write noted in line with it, a page at a time:
    initialise or reset it, adopt a new version, or pause it; forget each note made good.
    Answers the channels whose cursor it initialised: the pass plans them no further."""
    reset: set[str] = set()
    after: str | None = None
    while page := ledger.cursors.noted_changes(shard, after=after, limit=READ_PAGE):
        writes = CursorWrites()
        for noted in page:
            work = noted.work
            try:
                _line_up(work.channel, work.state, cache, now, writes, report)
            except DatabaseUnavailable:
                raise
            except Exception as exc:  # one channel must not stop the others
                _fail(report.failed, work.channel_id, exc)
                continue  # noted still: looked at again next pass
            writes.seen.append((work.channel_id, noted.change))
        ledger.cursors.write_cursors(writes)
        reset.update(init.channel_id for init in writes.inits)
        _collect_page_cycles()
        if len(page) < READ_PAGE:
            break
        after = max(noted.work.channel_id for noted in page)
    return reset


def _line_up(
    channel: DueChannel | None,
    state: ScheduleState | None,
    cache: ScheduleCache,
    now: datetime,
    writes: CursorWrites,
    report: PassReport,
) -> Schedule | None:
    """Add to `writes` what brings the cursor in line with the channel. Answers the schedule
    when the cursor may be planned from as it is (None: paused, or reset from now)."""
    if channel is None:
        # Archived, paused, drafted back or deleted: stop materialising, keep history.
        if state is not None and state.paused_at is None:
            writes.pauses.append(state.channel_id)
            report.paused += 1
        return None
    schedule = cache.get(channel)
    if state is None or state.config_hash != schedule.config_hash or state.paused_at is not None:
        # No position this schedule can resume from: new, changed, or reactivated. Never
        # back-filled from when the channel was written.
        first = schedule.next_after(now)
        log.debug("initialising cursor of channel %s: next fire at %s", channel.channel_id, first)
        writes.inits.append(
            CursorInit(channel.channel_id, channel.version, schedule.config_hash, first)
        )
        report.initialised += 1
        return None
    if state.channel_version < channel.version:
        # A new version with the same scheduling hash keeps its place in time.
        writes.adopts.append((channel.channel_id, channel.version))
    return schedule


def _plan_due(
    ledger: ReconcilePort,
    settings: Settings,
    cache: ScheduleCache,
    now: datetime,
    shard: Shard,
    report: PassReport,
    reset: set[str],
) -> Iterator[_Planned]:
    """The plan of every due cursor in the shard, a page at a time, but those `reset` this
    pass (a cursor whose channel changed since the notes were read is brought in line
    instead, as a noted one is). While a full page is planned, the next is read (`_ReadAhead`)."""
    window = _Window(now, now + settings.lookahead, settings.misfire_grace, settings.max_catch_up)
    with _ReadAhead(ledger, window.horizon, shard) as pages:
        page = pages.read()
        while page:
            pages.read_after(page)
            writes = CursorWrites()
            for work in page:
                state = work.state
                assert state is not None and state.next_fire_at is not None
                if work.channel_id in reset:
                    continue
                planned: _Planned | None = None
                try:
                    schedule = _line_up(work.channel, state, cache, now, writes, report)
                    if schedule is not None:
                        assert work.channel is not None
                        planned = _plan(work.channel, schedule, state, window)
                except DatabaseUnavailable:
                    raise  # the whole pass failed: not one channel's problem
                except Exception as exc:  # one channel must not stop the others
                    _fail(report.failed, work.channel_id, exc)
                if planned is not None:
                    yield planned
            # The page read ahead is in: its connection is free for the page's cursor writes.
            page = pages.next()
            ledger.cursors.write_cursors(writes)
            del writes  # freed now: the collection need not walk them
            _collect_page_cycles()


class _ReadAhead:
    """The pages of a pass's due cursors, read one page ahead: while the pass plans a full
    page, the next is read on a thread of its own, so the database's read overlaps the
    planning instead of preceding it. A pass with one page never starts the thread.

    The pass holds no more connections than it would without it: `next` answers only once
    the read ahead is in, and the next read starts only when the pass asks for it
    (`read_after`), so the pass's own writes between the two (the page's cursor writes) run
    while no read does; the other connection is the writer's (`_Writes`). A read that fails
    raises from `next`, in the pass."""

    def __init__(self, ledger: ReconcilePort, horizon: datetime, shard: Shard) -> None:
        self._ledger = ledger
        self._horizon = horizon
        self._shard = shard
        self._reader: ThreadPoolExecutor | None = None
        self._ahead: Future[list[ScheduleWork]] | None = None

    def __enter__(self) -> _ReadAhead:
        return self

    def __exit__(self, *_: object) -> None:
        if self._reader is not None:
            self._reader.shutdown(wait=True)

    def read_after(self, page: list[ScheduleWork]) -> None:
        """Start reading the page after `page`, if there may be one (`page` is full)."""
        if len(page) < READ_PAGE:
            return
        if self._reader is None:
            from concurrent.futures import ThreadPoolExecutor

            self._reader = ThreadPoolExecutor(1, thread_name_prefix="reconcile-read")
        self._ahead = self._reader.submit(self.read, page_end(page))

    def next(self) -> list[ScheduleWork]:
        """The page read ahead (empty when there is none)."""
        if self._ahead is None:
            return []
        ahead, self._ahead = self._ahead, None
        return ahead.result()

    def read(self, after: tuple[datetime, str] | None = None) -> list[ScheduleWork]:
        """The page of due cursors after `after`, read now."""
        return self._ledger.cursors.due_cursors(
            self._horizon, self._shard, after=after, limit=READ_PAGE
        )


@dataclass(frozen=True)
class _Window:
    """What every due channel of one pass is planned against, worked out once per pass."""

    now: datetime
    horizon: datetime
    grace: timedelta
    max_catch_up: int
    #: Channels of one calendar and cursor share a plan (`Schedule.plan_pass`).
    shared: dict[Hashable, PassPlan] = field(default_factory=dict)


def _plan(
    channel: DueChannel, schedule: Schedule, state: ScheduleState, window: _Window
) -> _Planned:
    assert state.next_fire_at is not None
    plan = schedule.plan_pass(
        state.next_fire_at, window.now, window.grace, window.max_catch_up, window.shared
    )
    instants = plan.materialise
    next_cursor = plan.next_cursor
    if next_cursor is not None and next_cursor <= window.horizon:
        # Lookahead: rows for instants not yet due, claimable only once they are.
        ahead = schedule.fires_in(next_cursor, window.horizon)
        instants = [*instants, *ahead]
        next_cursor = schedule.next_after(ahead[-1]) if ahead else next_cursor

    channel_id, name, version = channel.channel_id, channel.name, channel.version
    ref = target_ref(channel.target)
    attempts = schedule.retry.max_attempts
    overdue = schedule.alerts.overdue_after_secs
    # Jitter spreads when each row is due; its identity stays the instant.
    jittered = schedule.jitter_secs > 0
    rows = [
        NewOccurrence(
            channel_id,
            name,
            version,
            at,
            target_ref=ref,
            due_at=schedule.due_at(at) if jittered else None,
            max_attempts=attempts,
            overdue_after_secs=overdue,
        )
        for at in instants
    ]
    skipped = 0
    if plan.skipped is not None:
        # One row for the whole gap, carried by the newest missed instant: a day of a
        # per-second schedule is one visible record, not 86,400 rows.
        rows.append(
            NewOccurrence.of(
                channel,
                plan.skipped.newest,
                ref,
                status=SKIPPED_MISFIRE,
                error_message=plan.skipped.reason,
                max_attempts=attempts,
                overdue_after_secs=overdue,
                skipped_count=plan.skipped.count,
                skipped_oldest=plan.skipped.oldest,
            )
        )
        skipped = plan.skipped.count
    move = CursorMove(channel_id, state.next_fire_at, next_cursor, schedule.config_hash)
    return _Planned(rows, move, skipped)


class _Writes:
    """A pass's writes, `WRITE_BATCH` channels a statement. A full batch goes to a writer
    thread while the pass plans on; `finish` writes the rest on the caller's thread, so a
    small pass never starts one. One batch at most is in flight: the next waits for it, so
    a database that fails stops the pass at the next batch (`DatabaseUnavailable`), not after
    every batch has waited out its timeout. Leaving waits for the one in flight."""

    def __init__(self, ledger: ReconcilePort, report: PassReport) -> None:
        self._ledger = ledger
        self._report = report
        self._batch: list[_Planned] = []
        self._writer: ThreadPoolExecutor | None = None
        self._in_flight: tuple[list[_Planned], Future[_Written]] | None = None

    def __enter__(self) -> _Writes:
        return self

    def __exit__(self, *_: object) -> None:
        if self._writer is not None:
            self._writer.shutdown(wait=True)

    def add(self, planned: _Planned) -> None:
        self._batch.append(planned)
        if len(self._batch) < WRITE_BATCH:
            return
        self._settle()
        if self._writer is None:
            # Loaded by the first pass that needs it: most passes write one batch.
            from concurrent.futures import ThreadPoolExecutor

            self._writer = ThreadPoolExecutor(1, thread_name_prefix="reconcile-write")
        batch, self._batch = self._batch, []
        self._in_flight = batch, self._writer.submit(_write_batch, self._ledger, batch)

    def finish(self) -> None:
        self._settle()
        if self._batch:
            self._count(self._batch, _write_batch(self._ledger, self._batch))
            self._batch = []

    def _settle(self) -> None:
        if self._in_flight is not None:
            batch, written = self._in_flight
            self._in_flight = None
            self._count(batch, written.result())

    def _count(self, batch: list[_Planned], written: _Written) -> None:
        report = self._report
        report.due += len(batch)
        report.inserted += written.inserted
        report.advanced += len(written.moved)
        report.failed.update(written.failed)
        # Counted for what this pass wrote: a peer that won a cursor counts its own rows.
        mine = [p for p in batch if p.move.channel_id in written.moved]
        metrics.record_occurrences(
            PENDING, sum(1 for p in mine for r in p.rows if r.status == PENDING)
        )
        if skipped := sum(p.skipped for p in mine):
            metrics.record_occurrences(SKIPPED_MISFIRE, skipped)


def _write_batch(ledger: ReconcilePort, planned: list[_Planned]) -> _Written:
    """One batch's rows and cursor moves in one statement; if that fails (other than the
    database being unavailable), channel by channel."""
    written = _Written()
    try:
        written.inserted, written.moved = ledger.occurrences.materialise(
            (r for p in planned for r in p.rows), (p.move for p in planned)
        )
    except DatabaseUnavailable:
        raise  # the whole pass failed: channel by channel would only wait out each timeout
    except Exception as exc:
        log.warning("batched reconcile write failed (%s); retrying channel by channel", exc)
        for p in planned:
            try:
                inserted, moved = ledger.occurrences.materialise(p.rows, [p.move])
                written.inserted += inserted
                written.moved |= moved
            except Exception as channel_exc:
                _fail(written.failed, p.move.channel_id, channel_exc)
    return written


def _fail(failed: dict[str, str], channel_id: str, exc: Exception) -> None:
    """Record (and log) a failed channel's message in `failed`."""
    if isinstance(exc, ScheduleInvalid):
        message = f"stored schedule is invalid: {exc}"
    else:
        message = f"{type(exc).__name__}: {exc}"
    log.warning("reconciling channel %s failed: %s", channel_id, message)
    failed[channel_id] = message


def after_pass(
    ledger: ReconcilePort,
    settings: Settings,
    retention: Every,
    heartbeat: Every,
    until: float | None = None,
) -> None:
    """Bookkeeping after a successful pass: the backlog gauges (one read), the job heartbeat
    the health endpoint reads (when `heartbeat` is due), and retention with the sweep for
    channels written without a note (when `retention` is due).

    Retention deletes until a batch comes back short or the monotonic `until` (default:
    `RETENTION_BUDGET_SECS` from now) passes; cut short, it runs again after the next pass,
    so a backlog is trimmed after every pass until it is gone, then every
    `RETENTION_EVERY_SECS`. Its batches touch only terminal rows, which no claim reads."""
    backlog = ledger.reporting.backlog()
    metrics.record_oldest_pending_age(backlog.oldest_pending_age_secs or 0.0)
    metrics.record_pending_count(backlog.pending)
    if heartbeat.due():
        ledger.reporting.record_job_ok(JOB)
    if retention.due():
        if until is None:
            until = time.monotonic() + RETENTION_BUDGET_SECS
        deleted = ledger.occurrences.delete_terminal_older_than(
            settings.retention_hours, until=until
        )
        if deleted:
            log.info("retention removed %d terminal occurrence(s)", deleted)
        ledger.events.delete_events_older_than(settings.retention_hours)
        if noted := ledger.cursors.note_drifted_channels():
            log.info("%d channel(s) written without a note: their cursors follow next pass", noted)
        if time.monotonic() >= until:
            retention.again()  # the budget ran out first: the next pass goes on


@dataclass(frozen=True)
class OutboxRound:
    """Events after a pass: write the overdue instants and stalled channels detection finds,
    sweep the outbox to `sender` (with one) until the loop's deadline, and gauge what is
    left. Detection rides the pass because a pass runs wherever the scheduler does, and only
    the clock makes those events: no write of their own announces them."""

    sender: Sender | None = None

    def __call__(self, ledger: ReconcilePort, until: float) -> None:
        ledger.events.detect_overdue()
        if self.sender is not None:
            done = sweep(ledger, self.sender, until=until)
            if done.failed:
                log.warning("outbox sweep: %d event(s) not accepted", done.failed)
        waiting = ledger.events.outbox()
        metrics.record_outbox(waiting.undelivered, waiting.oldest_age_secs)


@dataclass
class Housekeeping:
    """What runs after a pass besides it: the job heartbeat and retention, each when due, and
    `events` (an `OutboxRound`) after every pass, where no other thread delivers events. A
    loop that lives for one pass (on Lambda) is handed the container's, so retention still
    runs every `RETENTION_EVERY_SECS` rather than after every pass."""

    retention: Every = field(default_factory=lambda: Every(RETENTION_EVERY_SECS))
    heartbeat: Every = field(default_factory=lambda: Every(JOB_HEARTBEAT_EVERY_SECS))
    events: Callable[[ReconcilePort, float], None] | None = None


def run_reconcile_loop(
    ledger: ReconcilePort,
    settings: Settings,
    until: float,
    stop: threading.Event | None = None,
    on_pass: Callable[[PassReport], None] | None = None,
    *,
    passes: int | None = None,
    housekeeping: Housekeeping | None = None,
    clock: Clock = SYSTEM_CLOCK,
    launch: ShardLauncher | None = None,
    shard: Shard | None = None,
) -> int:
    """Run passes every poll interval until the monotonic deadline `until` (or `stop`), or
    until `passes` have succeeded. A failed pass is recorded as DB unavailability and retried
    after a backoff, or as soon as a probe finds the database back: a database blip must not
    end the loop. Answers how many passes succeeded.

    On Lambda `passes=1`: a pass materialises everything due within the lookahead, which the
    stack sets to cover the next tick's claim too, so nothing is due before the next
    invocation that this one could still do; it stays only while its pass keeps failing.
    `launch`: where a pass's shards but the first run (`reconcile_sharded`). `shard`: run
    only that shard of each pass, and no housekeeping (its coordinator does that)."""
    stop = stop or threading.Event()
    housekeeping = housekeeping or Housekeeping()
    poll = settings.poll_interval.total_seconds()
    backoff = Backoff(JOB, poll, log, clock)
    succeeded = 0
    while not stop.is_set() and clock.monotonic() < until:
        try:
            if shard is not None:
                report = reconcile_once(ledger, settings, shard=shard)
            else:
                report = reconcile_sharded(ledger, settings, launch=launch)
                if housekeeping.events is not None:
                    housekeeping.events(ledger, until)
                # The loop's last pass leaves retention the rest of its time; any other, as
                # much as may hold up the next pass.
                last = passes is not None and succeeded + 1 >= passes
                trim_until = min(until, clock.monotonic() + RETENTION_BUDGET_SECS)
                after_pass(
                    ledger,
                    settings,
                    housekeeping.retention,
                    housekeeping.heartbeat,
                    until if last else trim_until,
                )
        except Exception as exc:
            metrics.record_db_unavailable(JOB)
            backoff.wait(exc, stop, until, probe=ledger.db_now)
            continue
        backoff.succeeded()
        succeeded += 1
        if on_pass is not None:
            on_pass(report)
        if passes is not None and succeeded >= passes:
            break
        sleep_until_next(stop, poll, until, clock)
    return succeeded
