"""Scheduler benchmark (issue 4): the real services on the local PostgreSQL, each figure in a
scratch database of its own (tests/bench/pg.py). The reconcile pass has a module of its own
(bench_reconcile.py).

Lifecycle: claim → start → no-op Python target → settle, through `claim_once` and the
Executor's real path, by 4 workers; occurrences per second, divided by pgbench TPC-B tps
measured in the same run (target at least 0.4). Measured in three shapes: 4 worker threads
in one process (the issue's shape; they share one interpreter lock, so one core of Python),
4 worker processes of one thread each (the shape on AWS, where every attempt is a Lambda
invocation of its own), and 4 worker processes that each run a claim of 25 as one batch
(a burst's executor invocation: `Executor.run_batch`; target ratio 1.0).
CPU per occurrence is the workers' own (`time.process_time`: every thread of the process
that runs them, kernel time included), the figure to compare two trees by (A/B, one run).
Writing transactions are counted by the server (transaction ids it handed out, which
autocommitted statements take too) beyond the claims that leased rows (target at most 2 per
occurrence, 0.5 batched). `python -m tests.bench.bench_scheduler [shape ...]` runs only those
shapes' lifecycle figures. Each shape keeps its workers for all its runs and first
drains one untimed batch (connections opened, statements prepared, target threads started,
as in a long-lived executor); the threads shape counts the statements sent there, not in the
timed runs, because a statement listener slows every execution down.

Lag: 200 per-second channels in one `LocalScheduler` with the settings `cronledger dev` uses
(rows materialised 3 s ahead), twice for about 20 s;
lag = started_at - scheduled_for read back from the rows, after a warm-up.
Each figure is the median of several runs (three; two for the lag).
"""

from __future__ import annotations

import multiprocessing
import os
import re
import statistics
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from datetime import timedelta
from typing import Any

import sqlalchemy as sa

from cronledger.aws.invoker import MOST_PER_INVOKE
from cronledger.claim import claim_once
from cronledger.execute import AttemptReport, Executor
from cronledger.invokers import OneByOne
from cronledger.ledger import CHANNEL_ACTIVE, COMPLETED, Ledger, NewOccurrence
from cronledger.ledger.tables import occurrences
from cronledger.local import DEMO_MODULE, DEV_LOOKAHEAD_SECS, LocalScheduler
from cronledger.settings import Settings
from tests.bench.pg import (
    PGBENCH_CLIENTS,
    PGBENCH_SCALE,
    pgbench_init,
    pgbench_run,
    scratch_database,
)
from tests.ledger.helpers import sent_statements

RUNS = 3
VERB = re.compile(r"\b(INSERT|UPDATE|DELETE)\b", re.IGNORECASE)
TARGET = {"type": "python", "callable": "cronledger.demo:hello"}

EVERY_MINUTE = {"schedule": "0 * * * * *", "timezone": "UTC"}

LIFECYCLE_WORKERS = 4
LIFECYCLE_OCCURRENCES = 3_000
LIFECYCLE_CHANNELS = 50
#: Per shape: (target ratio to pgbench, most writing transactions per occurrence).
LIFECYCLE_TARGETS = {"threads": (0.4, 2.0), "processes": (0.4, 2.0), "batched": (1.0, 0.5)}
BATCH_SIZE = MOST_PER_INVOKE
PGBENCH_SECS = 5
LIFECYCLE_GRACE_SECS = 300

LAG_CHANNELS = 200
LAG_RUNS = 2
LAG_WARM_UP_SECS = 5
LAG_MEASURE_SECS = 12
LAG_DRAIN_SECS = 2


def main(shapes: list[str]) -> None:
    lifecycle_figures(shapes or list(LIFECYCLE_TARGETS))
    if not shapes:
        lag_figures()


# --- statements ----------------------------------------------------------------------------


@contextmanager
def counting_statements(engine: sa.Engine) -> Iterator[Counter[str]]:
    """Statements sent to the database while inside, by the verbs they carry (a
    statement that updates and inserts is one `UPDATE+INSERT`), counted as the block ends."""
    seen: Counter[str] = Counter()
    with sent_statements(engine) as sent:
        yield seen
    for statement, _ in sent:
        verbs = dict.fromkeys(v.upper() for v in VERB.findall(statement))  # in order, once
        seen["+".join(verbs) or "SELECT"] += 1


@contextmanager
def counting_commits(engine: sa.Engine) -> Iterator[list[int]]:
    """Writing transactions this engine committed while inside: each COMMIT, and each
    writing statement sent in autocommit (a transaction of its own), counted by the engine
    (the server's transaction ids count every database's)."""
    count = [0]

    def committed(conn: sa.Connection) -> None:
        count[0] += 1

    def sent(conn: sa.Connection, cursor: Any, statement: str, *_: Any) -> None:
        if conn.connection.driver_connection.autocommit and VERB.search(statement):
            count[0] += 1

    sa.event.listen(engine, "commit", committed)
    sa.event.listen(engine, "before_cursor_execute", sent)
    try:
        yield count
    finally:
        sa.event.remove(engine, "commit", committed)
        sa.event.remove(engine, "before_cursor_execute", sent)


# --- lifecycle -------------------------------------------------------------------------------


class _Handover(OneByOne):
    """An invoker that hands each dispatched occurrence back to the worker that claimed it,
    so the worker runs the attempt on its own thread (4 workers = 4 attempts at a time)."""

    def __init__(self) -> None:
        self.batch: list[tuple[str, str]] = []

    def dispatch(self, occurrence_id: str, claimant: str) -> None:
        self.batch.append((occurrence_id, claimant))


def lifecycle_figures(shapes: list[str]) -> None:
    with scratch_database("lifecycle") as url, scratch_database("pgbench") as pgbench_url:
        pgbench_init(pgbench_url)
        ledger = Ledger.connect(url)
        ledger.migrate()
        channel_ids = [
            ledger.channels.create_channel(
                f"noop-{n}", EVERY_MINUTE, TARGET, 10_000, status=CHANNEL_ACTIVE
            ).channel_id
            for n in range(LIFECYCLE_CHANNELS)
        ]
        for shape in shapes:
            lifecycle_shape(ledger, url, channel_ids, pgbench_url, shape)
        ledger.dispose()


def lifecycle_shape(
    ledger: Ledger, url: str, channel_ids: list[str], pgbench_url: str, shape: str
) -> None:
    rates: list[float] = []
    cpus: list[float] = []
    tps: list[float] = []
    counts: Counter[str] = Counter()
    workers = (
        _Threads(url, channel_ids)
        if shape == "threads"
        else _Processes(url, channel_ids, batched=shape == "batched")
    )
    try:
        # Untimed: connections opened, statements prepared, target threads started, as in
        # a long-lived executor; the threads shape counts the statements here.
        seed_due(ledger, channel_ids, LIFECYCLE_OCCURRENCES)
        counts["statements"], counts["engine writes"] = workers.warm_up()
        assert_all_completed(ledger, "warm-up")
        for run in range(RUNS):
            seed_due(ledger, channel_ids, LIFECYCLE_OCCURRENCES)
            first_xid = next_transaction_id(ledger)
            rate, claims, cpu = workers.drain()
            counts["writes"] += next_transaction_id(ledger) - first_xid
            counts["claims"] += claims
            rates.append(rate)
            cpus.append(cpu)
            assert_all_completed(ledger, f"run {run}")
            tps.append(pgbench_run(pgbench_url, PGBENCH_SECS))
    finally:
        workers.close()
    rate, yardstick = statistics.median(rates), statistics.median(tps)
    total = LIFECYCLE_OCCURRENCES * RUNS
    beyond_claim = (counts["writes"] - counts["claims"]) / total
    ratio = rate / yardstick
    target_ratio, target_commits = LIFECYCLE_TARGETS[shape]
    statements = (
        f", {counts['statements'] / LIFECYCLE_OCCURRENCES:.2f} statements (warm-up run)"
        if counts["statements"]
        else f", {counts['engine writes'] / LIFECYCLE_OCCURRENCES:.2f} writing transactions "
        "beyond the claim as the executors' engines counted them (warm-up run)"
    )
    load = ", ".join(f"{n:.1f}" for n in os.getloadavg())
    print(
        f"lifecycle, {LIFECYCLE_WORKERS} worker {shape}, claim → start → no-op → settle "
        f"(load average {load}): "
        f"{rate:,.0f} occurrences/s; pgbench TPC-B (scale {PGBENCH_SCALE}, "
        f"{PGBENCH_CLIENTS} clients, {PGBENCH_SECS} s) {yardstick:,.0f} tps; ratio {ratio:.2f} "
        f"(target {target_ratio}: {'ok' if ratio >= target_ratio else 'UNDER'})",
        flush=True,
    )
    print(
        f"  per occurrence: {beyond_claim:.2f} writing transactions beyond the claim "
        f"(target ≤ {target_commits}: {'ok' if beyond_claim <= target_commits else 'OVER'}), "
        f"{counts['claims'] / total:.3f} claims{statements}; "
        f"CPU {statistics.median(cpus) * 1000:.2f} ms (median of {RUNS} runs)",
        flush=True,
    )


def assert_all_completed(ledger: Ledger, run: str) -> None:
    with ledger.engine.connect() as conn:
        done = conn.execute(
            sa.select(sa.func.count()).where(occurrences.c.status == COMPLETED)
        ).scalar_one()
    assert done == LIFECYCLE_OCCURRENCES, f"{run}: {done} completed"


def next_transaction_id(ledger: Ledger) -> int:
    """The id the server will hand the next writing transaction (asking assigns none)."""
    with ledger.engine.connect() as conn:
        return int(
            conn.execute(
                sa.text("SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint")
            ).scalar_one()
        )


def seed_due(ledger: Ledger, channel_ids: list[str], count: int) -> None:
    with ledger.engine.begin() as conn:
        conn.execute(sa.text("TRUNCATE cron_attempts, cron_occurrences"))
    now = ledger.db_now()
    names = {cid: f"noop-{n}" for n, cid in enumerate(channel_ids)}
    ledger.occurrences.insert_occurrences(
        NewOccurrence(
            channel_id=cid,
            channel_name=names[cid],
            channel_version=1,
            scheduled_for=now - timedelta(milliseconds=count - i),
            target_ref="python:cronledger.demo:hello",
        )
        for i in range(count)
        for cid in [channel_ids[i % len(channel_ids)]]
    )
    with ledger.engine.begin() as conn:
        conn.execute(sa.text("ANALYZE cron_occurrences"))


class _Worker:
    """One lifecycle worker's ledger and executor, its schedules compiled; `batched`: each
    claim of `BATCH_SIZE` runs as one executor batch."""

    def __init__(self, url: str, channel_ids: list[str], batched: bool = False) -> None:
        self.ledger = Ledger.connect(url)
        # The seeded backlog is drained in a few seconds; a generous grace keeps its last rows
        # on the plain path (a judgment at start is for rows late past an outage).
        self.settings = Settings(
            database_url=url,
            python_targets=(DEMO_MODULE,),
            misfire_grace_secs=LIFECYCLE_GRACE_SECS,
            claim_batch_size=BATCH_SIZE if batched else Settings().claim_batch_size,
        )
        self.batched = batched
        self.executor = Executor(self.ledger, self.settings)
        for channel_id in channel_ids:
            self.executor.schedules.get(self.ledger.channels.get_channel(channel_id))

    def work(self) -> tuple[int, int]:
        """Claim and run until nothing is due: (occurrences settled, claims that leased)."""
        invoker = _Handover()
        done = rounds = 0
        while True:
            invoker.batch.clear()
            round_ = claim_once(self.ledger, self.settings, invoker)
            assert round_.error is None, round_.error
            if not invoker.batch:
                return done, rounds
            rounds += 1
            for report in self._run(invoker.batch):
                assert report.status == COMPLETED, report
                done += 1

    def _run(self, dispatched: list[tuple[str, str]]) -> list[AttemptReport]:
        if not self.batched:
            return [self.executor.run_attempt(i, claimant) for i, claimant in dispatched]
        return self.executor.run_batch([i for i, _ in dispatched], dispatched[0][1])


class _Threads:
    """4 threads sharing one worker, kept for every run."""

    def __init__(self, url: str, channel_ids: list[str]) -> None:
        self.worker = _Worker(url, channel_ids)

    def warm_up(self) -> tuple[int, int]:
        """Drain once, untimed, and answer the statements sent (a statement listener slows
        every execution down, so the timed runs go without one)."""
        with counting_statements(self.worker.ledger.engine) as sent:
            self.drain()
        return sum(sent.values()), 0

    def drain(self) -> tuple[float, int, float]:
        """Occurrences settled per second, from the first claim to the last settle, how
        many claims leased rows, and the seconds of CPU per occurrence settled."""
        ready = threading.Barrier(LIFECYCLE_WORKERS + 1)
        results: list[tuple[int, int]] = []

        def run() -> None:
            ready.wait()
            results.append(self.worker.work())

        threads = [threading.Thread(target=run) for _ in range(LIFECYCLE_WORKERS)]
        for thread in threads:
            thread.start()
        ready.wait()
        started, cpu = time.monotonic(), time.process_time()
        for thread in threads:
            thread.join()
        elapsed, cpu = time.monotonic() - started, time.process_time() - cpu
        settled, claims = (sum(column) for column in zip(*results, strict=True))
        return settled / elapsed, claims, cpu / settled

    def close(self) -> None:
        self.worker.ledger.dispose()


class _Processes:
    """4 processes of one worker each, kept for every run (statements not counted). A
    worker's failure comes back as an error here; the processes are daemons, ended by
    `close` (or with this process), never left waiting."""

    def __init__(self, url: str, channel_ids: list[str], batched: bool = False) -> None:
        context = multiprocessing.get_context("spawn")
        self.out = context.Queue()
        self.inboxes = [context.Queue() for _ in range(LIFECYCLE_WORKERS)]
        self.results: list[Any] = []
        self.processes = [
            context.Process(
                target=_work_in_process,
                args=(url, channel_ids, batched, inbox, self.out),
                daemon=True,
            )
            for inbox in self.inboxes
        ]
        for process in self.processes:
            process.start()
        try:
            self._answers(60)
        except BaseException:
            self.close()
            raise

    def warm_up(self) -> tuple[int, int]:
        """Drain once, untimed, and answer the writing transactions beyond the claims that
        the workers' engines committed (a listener slows every execution down, so the timed
        runs go without one)."""
        self.drain("count")
        return 0, sum(r[3] - r[1] for r in self.results)

    def drain(self, order: str = "go") -> tuple[float, int, float]:
        started = time.monotonic()
        for inbox in self.inboxes:
            inbox.put(order)
        results = self.results = self._answers(300)
        elapsed = max(r[2] for r in results) - started
        settled = sum(r[0] for r in results)
        return settled / elapsed, sum(r[1] for r in results), sum(r[4] for r in results) / settled

    def _answers(self, timeout: float) -> list[Any]:
        answers = [self.out.get(timeout=timeout) for _ in self.processes]
        failed = [a for a in answers if isinstance(a, str) and a != "ready"]
        assert not failed, f"a worker process failed: {failed[0]}"
        return answers

    def close(self) -> None:
        for inbox in self.inboxes:
            inbox.put(None)
        for process in self.processes:
            process.join(10)
            if process.is_alive():
                process.terminate()


def _work_in_process(url: str, channel_ids: list[str], batched: bool, inbox: Any, out: Any) -> None:
    try:
        worker = _Worker(url, channel_ids, batched)
        out.put("ready")
        while (order := inbox.get()) is not None:
            with (
                counting_commits(worker.ledger.engine)
                if order == "count"
                else nullcontext([0]) as commits
            ):
                cpu = time.process_time()
                done, rounds = worker.work()
                cpu = time.process_time() - cpu
            # CLOCK_MONOTONIC: one clock for all
            out.put((done, rounds, time.monotonic(), commits[0], cpu))
        worker.ledger.dispose()
    except BaseException as exc:
        out.put(f"{type(exc).__name__}: {exc}")
        raise


# --- lag -------------------------------------------------------------------------------------


def lag_figures() -> None:
    """Schedule lag of 200 per-second channels in one process, read back from the rows.
    Instants of the warm-up (cursors initialised, schedules compiled, pools filling) are left
    out. An instant of the window that had not started when the scheduler stopped is counted
    at its lag so far, so a scheduler that falls behind shows it (the figures become lower
    bounds, printed with "≥")."""
    runs = [lag_run() for _ in range(LAG_RUNS)]
    started = sum(r[1] for r in runs)
    late = sum(r[2] for r in runs)
    at_least = "≥ " if late else ""
    p50 = statistics.median(percentile(r[0], 50) for r in runs)
    p99 = statistics.median(percentile(r[0], 99) for r in runs)
    print(
        f"schedule lag, {LAG_CHANNELS} per-second channels, one process "
        f"(`cronledger dev` settings: lookahead {DEV_LOOKAHEAD_SECS} s), "
        f"{LAG_MEASURE_SECS} s after {LAG_WARM_UP_SECS} s warm-up: "
        f"p50 {at_least}{p50:,.0f} ms, p99 {at_least}{p99:,.0f} ms "
        f"({started:,} started, {late:,} not started by the end)",
        flush=True,
    )


def lag_run() -> tuple[list[float], int, int]:
    """One run: the lags in ms of every instant of the window, how many started, how many
    had not."""
    with scratch_database("lag") as url:
        ledger = Ledger.connect(url)
        ledger.migrate()
        every_second = {"schedule": "* * * * * *", "timezone": "UTC"}
        for n in range(LAG_CHANNELS):
            ledger.channels.create_channel(
                f"tick-{n}", every_second, TARGET, 10_000, CHANNEL_ACTIVE
            )
        settings = Settings(
            database_url=url, lookahead_secs=DEV_LOOKAHEAD_SECS, python_targets=(DEMO_MODULE,)
        )
        scheduler = LocalScheduler(ledger, settings)
        began = ledger.db_now()
        scheduler.start()
        time.sleep(LAG_WARM_UP_SECS + LAG_MEASURE_SECS + LAG_DRAIN_SECS)
        scheduler.shutdown()
        stopped = ledger.db_now()
        since = began + timedelta(seconds=LAG_WARM_UP_SECS)
        until = since + timedelta(seconds=LAG_MEASURE_SECS)
        window = sa.and_(occurrences.c.scheduled_for >= since, occurrences.c.scheduled_for < until)
        with ledger.engine.connect() as conn:
            rows = conn.execute(
                sa.select(occurrences.c.scheduled_for, occurrences.c.started_at).where(window)
            ).all()
        ledger.dispose()
    lags = [
        ((started or stopped) - scheduled).total_seconds() * 1000 for scheduled, started in rows
    ]
    started_count = sum(1 for _, started in rows if started is not None)
    # Instants not even materialised by the end: late by at least the time since the window.
    unmade = LAG_CHANNELS * LAG_MEASURE_SECS - len(rows)
    lags += [(stopped - until).total_seconds() * 1000] * unmade
    return lags, started_count, len(lags) - started_count


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1)))]


if __name__ == "__main__":
    main(sys.argv[1:])
