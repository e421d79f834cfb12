"""Reconcile: stored schedules in, durable occurrences out (docs/guarantees.md#reconcile).

A pass writes a channel's rows and its cursor move together (`OccurrenceStore.materialise`:
one statement on PostgreSQL, one transaction on SQLite); the rows land only if the cursor's
compare-and-set wins. A pass that dies before writing leaves the cursor where the next pass
plans the same; of two peers running one pass, one wins each cursor (and rows are UNIQUE per
instant); a plan an edit's reset overtook loses, even a reset onto the same instant, since the
move names the scheduling hash it was planned under. So no lease guards a pass: two
reconcilers produce the same ledger. Planning is pure (`Schedule.plan_pass`); this module does
the writes, on two connections at most (`_pages`, `_Writes`).

A pass reads only index ranges, a page at a time: the changes channel writes noted
(`CursorStore.noted_changes`) and the running cursors due by the horizon
(`CursorStore.due_cursors`), so its cost follows what is due and what changed, never the
channels installed. A schedule bounds itself (`at`, `starts_at`, `ends_at`): after its last
instant the plan's next cursor is None and the cursor parks, never looked at again; an edit
that gives it instants again changes its scheduling hash, which restarts the cursor from now.
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
from typing import TYPE_CHECKING, Self, TypeVar

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

    from cronledger.ledger.cursors import NotedChange
    from cronledger.ledger.models import ScheduleWork

log = logging.getLogger(__name__)
_T = TypeVar("_T")
_P = TypeVar("_P")

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

    def read(after: str | None) -> list[NotedChange]:
        return ledger.cursors.noted_changes(shard, after=after, limit=READ_PAGE)

    def last(page: list[NotedChange]) -> str:
        return max(noted.work.channel_id for noted in page)

    for page, writes in _pages(ledger, read, last):
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
        reset.update(init.channel_id for init in writes.inits)
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
    instead, as a noted one is). While a full page is planned, the next is read."""
    window = _Window(now, now + settings.lookahead, settings.misfire_grace, settings.max_catch_up)

    def read(after: tuple[datetime, str] | None) -> list[ScheduleWork]:
        return ledger.cursors.due_cursors(window.horizon, shard, after=after, limit=READ_PAGE)

    with _Worker("reconcile-read") as reader:
        for page, writes in _pages(ledger, read, page_end, reader):
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


class _Worker:
    """A pass's thread for one kind of work, started by its first task: a pass that needs
    none never starts it. Leaving waits for the task running."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._pool: ThreadPoolExecutor | None = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)

    def submit(self, task: Callable[..., _T], *args: object) -> Future[_T]:
        if self._pool is None:
            from concurrent.futures import ThreadPoolExecutor  # most passes need no thread

            self._pool = ThreadPoolExecutor(1, thread_name_prefix=self._name)
        return self._pool.submit(task, *args)


def _pages(
    ledger: ReconcilePort,
    read: Callable[[_P | None], list[_T]],
    after: Callable[[list[_T]], _P],
    reader: _Worker | None = None,
) -> Iterator[tuple[list[_T], CursorWrites]]:
    """The pages `read` answers, each from `after` the one before, each with the cursor
    writes the caller adds for it, written before the next page is asked for. With `reader`,
    the page after a full one is read on it while the caller works through this one, so the
    database's read overlaps the planning instead of preceding it. The pass holds no more
    connections for it: the cursor writes wait for that read, and the next read waits for
    them; the other connection is the writer's (`_Writes`). A failed read raises here."""
    page = read(None)
    while page:
        position = after(page) if len(page) >= READ_PAGE else None
        ahead = None if position is None or reader is None else reader.submit(read, position)
        writes = CursorWrites()
        yield page, writes
        page.clear()  # the caller is done with it: freed before the page's collection
        page = [] if ahead is None else ahead.result()
        ledger.cursors.write_cursors(writes)
        _collect_page_cycles()
        if position is not None and ahead is None:
            page = read(position)


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


class _Writes(_Worker):
    """A pass's writes, `WRITE_BATCH` channels a statement (each channel's rows and cursor
    move in the same one). A full batch goes to the writer thread while the pass plans on;
    `finish` writes the rest on the caller's thread, so a small pass never starts one. One
    batch at most is in flight: the next waits for it, so a database that fails stops the
    pass at the next batch (`DatabaseUnavailable`), not after every batch has waited out its
    timeout. Leaving waits for the one in flight."""

    def __init__(self, ledger: ReconcilePort, report: PassReport) -> None:
        super().__init__("reconcile-write")
        self._ledger = ledger
        self._report = report
        self._batch: list[_Planned] = []
        self._in_flight: tuple[list[_Planned], Future[_Written]] | None = None

    def add(self, planned: _Planned) -> None:
        self._batch.append(planned)
        if len(self._batch) < WRITE_BATCH:
            return
        self._settle()
        batch, self._batch = self._batch, []
        self._in_flight = batch, self.submit(_write_batch, self._ledger, batch)

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
