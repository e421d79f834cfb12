"""A pass split into shards by a stable hash of `channel_id`: the shards are disjoint and
together complete, on both backends and in Python alike; a shard that dies mid-pass is
simply redone by the next pass, without a duplicate row; and coordinators that split the
same pass differently, at the same time, leave the ledger a single pass would."""

from __future__ import annotations

import itertools
import threading
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings, strategies as st

from cronledger import reconcile
from cronledger.ledger import CHANNEL_ACTIVE, DatabaseUnavailable, Ledger, OccurrenceFilter, Shard
from cronledger.ledger.shards import KEY_SPACE, shard_key
from cronledger.ledger.tables import channels, schedule_state
from cronledger.reconcile import merged, reconcile_once, reconcile_sharded, shards_for
from cronledger.schedule_cache import ScheduleCache
from cronledger.settings import Settings
from tests.ledger.helpers import empty_tables, holds, upsert_cursor

#: A late instant is not misfired within the hour: every due channel gets its row. Hourly, so
#: a test crosses into the next instant (a second row per channel) only at an hour's turn.
SETTINGS = Settings(misfire_grace_secs=3600)
HOURLY = {"schedule": "0 0 * * * *"}

channel_ids = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), min_size=1, max_size=40
)


@given(ids=st.sets(channel_ids, max_size=30), count=st.integers(1, 12))
def test_every_channel_falls_in_exactly_one_shard(ids: set[str], count: int) -> None:
    shards = Shard.split(count)

    for channel_id in ids:
        assert sum(holds(shard, channel_id) for shard in shards) == 1
    assert shards[0].low == 0 and shards[-1].high == KEY_SPACE
    assert all(a.high == b.low for a, b in itertools.pairwise(shards))


def test_the_shard_key_is_the_documented_hash() -> None:
    # the first 32 bits of the MD5 of the id: PostgreSQL and SQLite must compute the same
    assert shard_key("abc") == 0x90015098


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ids=st.sets(channel_ids, min_size=1, max_size=25), count=st.integers(1, 7))
def test_the_databases_shards_are_disjoint_complete_and_pythons(
    ledger: Ledger, ids: set[str], count: int
) -> None:
    # Given a due cursor for each channel id
    with ledger.engine.begin() as conn:
        conn.execute(sa.delete(schedule_state))
    now = ledger.db_now()
    for channel_id in ids:
        upsert_cursor(ledger, channel_id, 1, "hash", now - timedelta(seconds=1))

    # When each shard reads its due cursors, a page of two at a time
    read = [[w.channel_id for w in pages(ledger, shard, now)] for shard in Shard.split(count)]

    # Then each id was read once, by the shard Python puts it in
    assert Counter(i for shard in read for i in shard) == Counter(ids)
    for shard, found in zip(Shard.split(count), read, strict=True):
        assert set(found) == {i for i in ids if holds(shard, i)}


def pages(ledger: Ledger, shard: Shard, now: Any) -> list[Any]:
    found: list[Any] = []
    after = None
    while page := ledger.cursors.due_cursors(now, shard, after=after, limit=2):
        found += page
        last = max(page, key=lambda w: (w.state.next_fire_at, w.channel_id))
        after = (last.state.next_fire_at, last.channel_id)
    return found


def due_channels(ledger: Ledger, count: int) -> list[str]:
    """`count` active hourly channels, each due at this hour's instant."""
    ids = [
        ledger.channels.create_channel(
            f"job-{n:03d}",
            HOURLY,
            {"type": "python", "callable": "cronledger.demo:hello"},
            1000,
            CHANNEL_ACTIVE,
        ).channel_id
        for n in range(count)
    ]
    reconcile_once(ledger, SETTINGS, ScheduleCache())  # cursors initialised
    hour = ledger.db_now().replace(minute=0, second=0, microsecond=0)
    with ledger.engine.begin() as conn:
        conn.execute(sa.update(schedule_state).values(next_fire_at=hour))
    return ids


def ledger_state(ledger: Ledger) -> tuple[Counter[tuple[str, Any]], dict[str, Any]]:
    """Rows by (channel, instant), and each cursor's position."""
    data = ledger.occurrences.list_occurrences(OccurrenceFilter(limit=1000)).data
    rows = Counter((o.channel_id, o.scheduled_for) for o in data)
    return rows, {s.channel_id: s.next_fire_at for s in ledger.cursors.schedule_states()}


def test_a_shard_that_dies_mid_pass_is_redone_by_the_next_pass_without_duplicates(
    ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given forty due channels, written three to a statement
    ids = due_channels(ledger, 40)
    monkeypatch.setattr(reconcile, "WRITE_BATCH", 3)
    real = ledger.occurrences.materialise
    written: list[int] = []

    def dies_after_two_batches(rows: Any, moves: Any) -> tuple[int, set[str]]:
        if len(written) == 2:
            raise DatabaseUnavailable("the shard's invocation ended")
        written.append(1)
        return real(rows, moves)

    # When shard 0 of 2 dies after writing two batches
    monkeypatch.setattr(ledger.occurrences, "materialise", dies_after_two_batches)
    with pytest.raises(DatabaseUnavailable):
        reconcile_once(ledger, SETTINGS, ScheduleCache(), Shard(0, 2))
    monkeypatch.setattr(ledger.occurrences, "materialise", real)
    rows, _ = ledger_state(ledger)
    assert 0 < len(rows) < len([i for i in ids if holds(Shard(0, 2), i)])

    # And the next pass, split differently, runs whole
    reports = [reconcile_once(ledger, SETTINGS, ScheduleCache(), s) for s in Shard.split(3)]

    # Then every channel has its one row and its cursor moved once
    rows, cursors = ledger_state(ledger)
    assert sorted(channel for channel, _ in rows) == sorted(ids)
    assert set(rows.values()) == {1}
    assert len(set(cursors.values())) == 1
    assert merged(reports).advanced == 40 - 6


def test_two_coordinators_splitting_one_pass_differently_leave_one_passs_ledger(
    ledger: Ledger,
) -> None:
    # Given forty due channels
    ids = due_channels(ledger, 40)
    # When two coordinators run the same pass at once, one in three shards, one in two
    start = threading.Barrier(5)
    reports: list[Any] = []

    def shard(shard: Shard) -> None:
        start.wait(10)
        reports.append(reconcile_once(ledger, SETTINGS, ScheduleCache(), shard))

    threads = [
        threading.Thread(target=shard, args=(s,)) for s in [*Shard.split(3), *Shard.split(2)]
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)

    # Then each channel has exactly its one row, each cursor moved once, and between them
    # the coordinators advanced every cursor exactly once
    rows, cursors = ledger_state(ledger)
    assert sorted(channel for channel, _ in rows) == sorted(ids)
    assert set(rows.values()) == {1}
    assert len(set(cursors.values())) == 1
    total = merged(reports)
    assert (total.advanced, total.failed) == (40, {})


def test_a_sharded_pass_on_threads_does_what_one_pass_does(ledger: Ledger) -> None:
    # Given forty due channels, and shards of ten
    ids = due_channels(ledger, 40)
    split = Settings(misfire_grace_secs=3600, reconcile_shard_size=100, reconcile_max_shards=3)
    assert (
        shards_for(40, split) == 1 and shards_for(250, split) == 3 and shards_for(10**6, split) == 3
    )

    # When the pass sizes itself and runs
    report = reconcile_sharded(ledger, Settings(misfire_grace_secs=3600, reconcile_shard_size=100))

    # Then every channel got its row
    rows, _ = ledger_state(ledger)
    assert sorted(channel for channel, _ in rows) == sorted(ids)
    assert (report.advanced, report.failed) == (40, {})


def test_a_pass_reading_ahead_and_writing_behind_holds_two_connections_at_most(
    ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given forty due channels, three of them no longer active (their cursors are paused
    # as the pass meets them, a page's cursor writes), read five and written three at a time
    ids = due_channels(ledger, 40)
    gone = ids[::13]
    with ledger.engine.begin() as conn:
        conn.execute(
            sa.update(channels).where(channels.c.channel_id.in_(gone)).values(status="paused")
        )
    monkeypatch.setattr(reconcile, "READ_PAGE", 5)
    monkeypatch.setattr(reconcile, "WRITE_BATCH", 3)
    held, most, readers = 0, 0, set()
    lock = threading.Lock()

    def checkout(*_: Any) -> None:
        nonlocal held, most
        with lock:
            held += 1
            most = max(most, held)

    def checkin(*_: Any) -> None:
        nonlocal held
        with lock:
            held -= 1

    real = ledger.cursors.due_cursors

    def due_cursors(*args: Any, **kwargs: Any) -> Any:
        readers.add(threading.current_thread().name)
        return real(*args, **kwargs)

    monkeypatch.setattr(ledger.cursors, "due_cursors", due_cursors)
    sa.event.listen(ledger.engine, "checkout", checkout)
    sa.event.listen(ledger.engine, "checkin", checkin)

    # When a pass runs
    try:
        report = reconcile_once(ledger, SETTINGS, ScheduleCache())
    finally:
        sa.event.remove(ledger.engine, "checkout", checkout)
        sa.event.remove(ledger.engine, "checkin", checkin)

    # Then it read pages ahead on a thread of its own, paused the inactive channels' cursors,
    # wrote every other channel, and never held more than two connections at once
    assert any(name.startswith("reconcile-read") for name in readers)
    assert (report.paused, report.advanced, report.failed) == (len(gone), 40 - len(gone), {})
    rows, _ = ledger_state(ledger)
    assert sorted(channel for channel, _ in rows) == sorted(set(ids) - set(gone))
    assert most <= 2


def test_a_page_read_ahead_that_fails_fails_the_pass(
    ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given twelve due channels, read five at a time, and a database that fails the second read
    due_channels(ledger, 12)
    monkeypatch.setattr(reconcile, "READ_PAGE", 5)
    real = ledger.cursors.due_cursors
    reads: list[int] = []

    def fails_second(*args: Any, **kwargs: Any) -> Any:
        reads.append(1)
        if len(reads) == 2:
            raise DatabaseUnavailable("connection refused")
        return real(*args, **kwargs)

    monkeypatch.setattr(ledger.cursors, "due_cursors", fails_second)

    # When a pass runs, then it fails as the database's failure, having read no further
    with pytest.raises(DatabaseUnavailable):
        reconcile_once(ledger, SETTINGS, ScheduleCache())
    assert len(reads) == 2


def test_new_channels_are_initialised_a_page_at_a_time(
    ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given twelve new channels, read five at a time
    empty_tables(ledger)
    monkeypatch.setattr(reconcile, "READ_PAGE", 5)
    for n in range(12):
        ledger.channels.create_channel(
            f"new-{n}", HOURLY, {"type": "python", "callable": "x:y"}, 1000, CHANNEL_ACTIVE
        )
    statements: list[str] = []
    sa.event.listen(ledger.engine, "before_cursor_execute", record_into(statements))

    # When a pass runs
    report = reconcile_once(ledger, SETTINGS, ScheduleCache())

    # Then every cursor is initialised, and written one statement per page, not per channel
    assert report.initialised == 12
    assert len(ledger.cursors.schedule_states()) == 12
    upserts = [s for s in statements if "INSERT INTO cron_schedule_state" in s]
    assert len(upserts) == 3
    assert ledger.cursors.noted_changes() == []


def record_into(statements: list[str]) -> Any:
    def record(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        statements.append(statement.strip())

    return record
