"""Test-side shortcuts: seed rows, and move a row through time by writing it directly.

Time travel writes the database because the clock under test is the database's: a test
cannot wait out a 60-second lease, so it writes the lease into the past instead.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event

from cronledger.errors import NotFound
from cronledger.ledger import (
    CHANNEL_ACTIVE,
    AttemptStart,
    Channel,
    CursorInit,
    CursorMove,
    CursorWrites,
    Ledger,
    NewOccurrence,
    Occurrence,
    OpenedAttempt,
    Shard,
    SingletonSpec,
)
from cronledger.ledger.attempts import SettleRequest, StartRequest
from cronledger.ledger.shards import shard_key
from cronledger.ledger.singletons import release_slot
from cronledger.ledger.tables import metadata, occurrences, singletons

LEASE = 60.0


def holds(shard: Shard, channel_id: str) -> bool:
    """Whether `shard` takes the channel, its key computed in Python (`shard_key`)."""
    return shard.low <= shard_key(channel_id) < shard.high


def with_stores(ledger: Ledger, **stores: Any) -> Ledger:
    """The ledger with the named stores replaced (by a test's wrapper of one), the rest its
    own."""
    view = copy.copy(ledger)
    vars(view).update(stores)
    return view


def held_slots(ledger: Ledger, key: str) -> int:
    """How many slots of a singleton key a live lease holds."""
    return ledger.reporting.channel_activity([], [key]).held_slots.get(key, 0)


def pending_count(ledger: Ledger, channel_id: str) -> int:
    return ledger.reporting.channel_activity([channel_id], []).pending.get(channel_id, 0)


def row(at: datetime, channel_id: str = "ch", **overrides: Any) -> NewOccurrence:
    """A fresh occurrence of `channel_id` at `at` (a new id every call, like a reconciler)."""
    return replace(NewOccurrence(channel_id, "nightly", 1, at), **overrides)


def active_channel(ledger: Ledger, name: str = "nightly", **config: Any) -> Channel:
    """An active channel (every second, a Python target) whose occurrences a test seeds."""
    return ledger.channels.create_channel(
        name,
        {"schedule": "* * * * * *", **config},
        {"type": "python", "callable": "cronledger.demo:hello"},
        1000,
        CHANNEL_ACTIVE,
    )


def empty_tables(ledger: Ledger) -> None:
    with ledger.engine.begin() as conn:
        for table in reversed(metadata.sorted_tables):
            conn.execute(sa.delete(table))


def seed_due(
    ledger: Ledger, channel_id: str = "ch", ago: timedelta = timedelta(seconds=30)
) -> NewOccurrence:
    """Materialise one occurrence that fell due `ago`."""
    new = row(ledger.db_now() - ago, channel_id)
    assert ledger.occurrences.insert_occurrence(new)
    return new


def claim_one(ledger: Ledger, claimant: str) -> Occurrence:
    claimed = ledger.attempts.claim(claimant, 1, LEASE).leased
    assert len(claimed) == 1, claimed
    return claimed[0]


def reclaim(ledger: Ledger, occurrence_id: str, claimant: str) -> Occurrence:
    """Make a waiting row due now and claim it, as the claim loop would after the wait."""
    with ledger.engine.begin() as conn:
        conn.execute(
            sa.update(occurrences)
            .where(occurrences.c.id == occurrence_id)
            .values(due_at=ledger.db_now() - timedelta(hours=1))
        )
    again = claim_one(ledger, claimant)
    assert again.id == occurrence_id
    return again


def open_attempt(
    ledger: Any,
    occurrence_id: str,
    claimant: str,
    lease_secs: float,
    trace_id: str,
    *,
    misfire_grace_secs: float,
) -> OpenedAttempt:
    """`open_attempts` of one occurrence, as the executor opens a lone attempt; NotFound when
    there is no such occurrence."""
    opened = ledger.attempts.open_attempts(
        [occurrence_id], claimant, lease_secs, trace_id, misfire_grace_secs=misfire_grace_secs
    )
    if occurrence_id not in opened:
        raise NotFound(f"occurrence {occurrence_id} not found")
    return opened[occurrence_id]


def start_attempt(
    ledger: Any,
    occurrence: Occurrence | str,
    claimant: str,
    executing_version: int,
    singleton: SingletonSpec | None,
    lease_secs: float,
    *,
    trace_id: str | None = None,
    max_attempts: int | None = None,
    wait_secs: float = 1.0,
) -> AttemptStart:
    """`start_attempts` of one request, as the executor starts a lone attempt."""
    request = StartRequest(occurrence, executing_version, singleton, max_attempts)
    [started] = ledger.attempts.start_attempts(
        [request], claimant, lease_secs, trace_id=trace_id, wait_secs=wait_secs
    )
    return started


def settle(ledger: Any, occurrence_id: str, claimant: str, status: str, **end: Any) -> bool:
    """`settle_many` of one `SettleRequest(occurrence_id, claimant, status, **end)`, as the
    executor settles a lone attempt."""
    [settled] = ledger.attempts.settle_many([SettleRequest(occurrence_id, claimant, status, **end)])
    return settled


def start(
    ledger: Ledger,
    occurrence: Occurrence,
    claimant: str,
    key: str | None = None,
    slots: int = 1,
    policy: str = "forbid",
) -> AttemptStart:
    spec = SingletonSpec(key, slots, policy) if key else None  # type: ignore[arg-type]
    return start_attempt(ledger, occurrence, claimant, 1, spec, LEASE)


def release_singleton(
    ledger: Ledger, key: str, occurrence_id: str, claimant: str, fencing_token: int
) -> bool:
    """Free the slot of `key` the claimant holds for the occurrence under `fencing_token`:
    the release every settle of a slot holder starts with, alone. Conditional on all three,
    so a superseded holder frees nothing."""
    held = sa.select(singletons.c.singleton_key).where(
        singletons.c.occurrence_id == occurrence_id,
        singletons.c.holder == claimant,
        singletons.c.fencing_token == fencing_token,
    )
    with ledger.engine.begin() as conn:
        if key not in conn.execute(held).scalars().all():
            return False
        return release_slot(conn, occurrence_id, fencing_token, holder=claimant)


def advance_cursor(ledger: Ledger, move: CursorMove) -> bool:
    """One cursor move, as a reconcile pass writes it (`materialise`, with no rows). False:
    someone else moved or reset the cursor first, and the plan is stale."""
    _, moved = ledger.occurrences.materialise([], [move])
    return move.channel_id in moved


def upsert_cursor(
    ledger: Ledger,
    channel_id: str,
    channel_version: int,
    config_hash: str,
    next_fire_at: datetime | None,
) -> None:
    """Create or reset one channel's cursor, unpaused, its not-yet-due cron rows dropped: a
    pass's page of cursor writes holding just this one."""
    init = CursorInit(channel_id, channel_version, config_hash, next_fire_at)
    ledger.cursors.write_cursors(CursorWrites(inits=[init]))


def pause_cursor(ledger: Ledger, channel_id: str) -> None:
    """Pause one channel's cursor (its not-yet-due cron rows dropped), as a pass does."""
    ledger.cursors.write_cursors(CursorWrites(pauses=[channel_id]))


def expire_claim(ledger: Ledger, occurrence_id: str) -> None:
    _set(ledger, occurrences, occurrences.c.id == occurrence_id, claimed_until=_an_hour_ago(ledger))


def expire_singleton(ledger: Ledger, key: str) -> None:
    _set(ledger, singletons, singletons.c.singleton_key == key, lease_until=_an_hour_ago(ledger))


def age_completion(ledger: Ledger, occurrence_id: str, by: timedelta) -> None:
    _set(ledger, occurrences, occurrences.c.id == occurrence_id, completed_at=ledger.db_now() - by)


def _an_hour_ago(ledger: Ledger) -> datetime:
    return ledger.db_now() - timedelta(hours=1)


def _set(ledger: Ledger, table: sa.Table, where: sa.ColumnElement[bool], **values: object) -> None:
    with ledger.engine.begin() as conn:
        assert conn.execute(sa.update(table).where(where).values(**values)).rowcount >= 1


def contend(
    ledger: Ledger, claimed: list[Occurrence], spec: SingletonSpec, wait_secs: float = 1.0
) -> tuple[list[str], list[BaseException]]:
    """Start every claimed occurrence at the same moment, one thread each, under `spec`:
    the outcomes, and whatever a thread raised (a thread cannot fail a test itself)."""
    gate = threading.Barrier(len(claimed))
    outcomes: list[str] = []
    errors: list[BaseException] = []

    def start_one(occurrence: Occurrence) -> None:
        try:
            gate.wait()
            claimant = occurrence.claimed_by or ""
            started = start_attempt(
                ledger, occurrence, claimant, 1, spec, LEASE, wait_secs=wait_secs
            )
            outcomes.append(started.outcome)
        except BaseException as exc:  # surfaced by the caller
            errors.append(exc)

    threads = [threading.Thread(target=start_one, args=(o,)) for o in claimed]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcomes, errors


@contextmanager
def sent_statements(engine: sa.Engine) -> Iterator[list[tuple[str, Any]]]:
    """(statement, parameters) of everything sent to the database while inside; the
    listener goes away with the block, even on a session-scoped engine."""
    sent: list[tuple[str, Any]] = []

    def capture(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        sent.append((statement, parameters))

    event.listen(engine, "before_cursor_execute", capture)
    try:
        yield sent
    finally:
        event.remove(engine, "before_cursor_execute", capture)
