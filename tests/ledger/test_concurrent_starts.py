"""Concurrent starts on one key never deadlock: a start locks the key's slot rows in slot
order and frees the occurrence's earlier slot within that same walk, so two starts wait on
each other in one direction only. Each case runs many times from real threads released by
a barrier, on PostgreSQL, and checks the outcomes against the rows read back.

A cancel or purge that waits for a start in flight must still free the slot that start
took: its release ran before the start committed, so it could not see that slot yet."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from datetime import timedelta

import pytest
import sqlalchemy as sa

from cronledger.ledger import (
    CANCELLED,
    CLAIMED,
    PENDING,
    RUNNING,
    Ledger,
    Occurrence,
    SingletonSpec,
)
from cronledger.ledger.driver import sqlstate
from cronledger.ledger.singletons import WAITER_SLOT
from cronledger.ledger.tables import occurrences, singletons
from tests.ledger.helpers import (
    LEASE,
    active_channel,
    claim_one,
    contend,
    empty_tables,
    expire_claim,
    held_slots,
    reclaim,
    row,
    start,
    start_attempt,
)

ROUNDS = 100
WAIT = 30.0


def seeded(ledger: Ledger, count: int, key: str) -> list[Occurrence]:
    """`count` due occurrences of distinct channels, each claimed by its own claimant."""
    now = ledger.db_now()
    ledger.occurrences.insert_occurrences(
        row(now - timedelta(seconds=60 - n), f"{key}-ch-{n}") for n in range(count)
    )
    return [claim_one(ledger, f"{key}-node-{n}") for n in range(count)]


def crash(ledger: Ledger, occurrence: Occurrence, claimant: str) -> Occurrence:
    """The occurrence's executor died: its claim ran out and `claimant` re-claimed it as its
    next attempt (the slot it held stays recorded as its own)."""
    expire_claim(ledger, occurrence.id)
    again = claim_one(ledger, claimant)
    assert again.id == occurrence.id
    return again


def slot_rows(ledger: Ledger, key: str) -> dict[int, tuple[str | None, int]]:
    """slot → (occurrence holding it, fencing token), as stored."""
    with ledger.engine.connect() as conn:
        found = conn.execute(
            sa.select(
                singletons.c.slot, singletons.c.occurrence_id, singletons.c.fencing_token
            ).where(singletons.c.singleton_key == key)
        ).all()
    return {int(slot): (holder, int(token)) for slot, holder, token in found}


def contend_by_id(
    ledger: Ledger, claimed: list[Occurrence], spec: SingletonSpec
) -> tuple[dict[str, str], list[BaseException]]:
    """`contend`, with each outcome under the id of the occurrence that had it."""
    gate = threading.Barrier(len(claimed))
    outcomes: dict[str, str] = {}
    errors: list[BaseException] = []

    def start_one(occurrence: Occurrence) -> None:
        try:
            gate.wait()
            claimant = occurrence.claimed_by or ""
            started = start_attempt(ledger, occurrence, claimant, 1, spec, LEASE, wait_secs=WAIT)
            outcomes[occurrence.id] = started.outcome
        except BaseException as exc:  # surfaced by the caller
            errors.append(exc)

    threads = [threading.Thread(target=start_one, args=(o,)) for o in claimed]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcomes, errors


def no_deadlock(errors: list[BaseException]) -> None:
    deadlocks = [e for e in errors if sqlstate(e) == "40P01"]
    assert deadlocks == [], deadlocks[0]
    assert errors == []


@pytest.mark.slow
def test_a_reclaimed_holder_and_a_fresh_contender_start_together_without_deadlock(
    pg_ledger: Ledger,
) -> None:
    spec = SingletonSpec("k", 3, "forbid")
    for _ in range(ROUNDS):
        empty_tables(pg_ledger)
        # Given slot 0 held live, slot 1 held by an occurrence whose executor died and which
        # is re-claimed as its attempt 2, and slot 2 free
        first, second, fresh = seeded(pg_ledger, 3, "k")
        assert start(pg_ledger, first, first.claimed_by or "", "k", 3).slot == 0
        assert start(pg_ledger, second, second.claimed_by or "", "k", 3).slot == 1
        old_token = slot_rows(pg_ledger, "k")[1][1]
        again = crash(pg_ledger, second, "node-again")

        # When the re-claimed attempt and the fresh contender start at the same moment
        outcomes, errors = contend(pg_ledger, [again, fresh], spec)

        # Then neither deadlocks and both run: the re-claimed one in its own slot under the
        # next token, the fresh one in the free slot
        no_deadlock(errors)
        assert outcomes == ["started", "started"]
        rerun, newcomer = (pg_ledger.occurrences.get_occurrence(o.id) for o in (second, fresh))
        assert (rerun.status, rerun.attempt, rerun.singleton_slot) == (RUNNING, 2, 1)
        assert rerun.fencing_token == old_token + 1
        assert (newcomer.status, newcomer.singleton_slot) == (RUNNING, 2)
        assert slot_rows(pg_ledger, "k") == {
            0: (first.id, 1),
            1: (second.id, old_token + 1),
            2: (fresh.id, 1),
        }
        assert held_slots(pg_ledger, "k") == 3


@pytest.mark.slow
def test_a_queued_waiter_and_a_crashed_holder_taken_over_start_together_without_deadlock(
    pg_ledger: Ledger,
) -> None:
    spec = SingletonSpec("q", 1, "queue_one")
    for _ in range(ROUNDS):
        empty_tables(pg_ledger)
        # Given a holder whose executor died (claim and slot lease both ran out) and a
        # waiter queued behind it; both are re-claimed, the holder as its attempt 2
        holder, waiter = seeded(pg_ledger, 2, "q")
        assert start(pg_ledger, holder, holder.claimed_by or "", "q", 1, "queue_one").started
        outcome = start_attempt(
            pg_ledger, waiter, waiter.claimed_by or "", 1, spec, LEASE, wait_secs=WAIT
        )
        assert outcome.outcome == "waiting"
        _expire_slot(pg_ledger, "q", 0)
        taken_over = crash(pg_ledger, holder, "node-again")
        back = reclaim(pg_ledger, waiter.id, "node-back")

        # When both start at the same moment
        by_id, errors = contend_by_id(pg_ledger, [taken_over, back], spec)

        # Then neither deadlocks and the waiter, first in line, runs in slot 0; the
        # crashed holder either finds the waiter ahead of it (busy, nothing written) or,
        # after the waiter started, queues behind it
        no_deadlock(errors)
        assert by_id[waiter.id] == "started"
        assert by_id[holder.id] in {"singleton_busy", "waiting"}
        ran, behind = (pg_ledger.occurrences.get_occurrence(o.id) for o in (waiter, holder))
        assert (ran.status, ran.singleton_slot) == (RUNNING, 0)
        rows = slot_rows(pg_ledger, "q")
        assert rows[0][0] == waiter.id
        if by_id[holder.id] == "waiting":
            assert (behind.status, behind.singleton_slot) == (PENDING, WAITER_SLOT)
            assert rows[WAITER_SLOT][0] == holder.id
        else:
            assert (behind.status, behind.claimed_by) == (CLAIMED, "node-again")
            assert rows[WAITER_SLOT][0] is None
        assert held_slots(pg_ledger, "q") == 1


SHAPES = [(slots, policy) for slots in (1, 2, 3) for policy in ("forbid", "queue_one", "replace")]


@pytest.mark.slow
@pytest.mark.parametrize(("slots", "policy"), SHAPES)
def test_concurrent_starts_of_every_shape_fill_exactly_the_free_slots(
    pg_ledger: Ledger, slots: int, policy: str
) -> None:
    spec = SingletonSpec("s", slots, policy)  # type: ignore[arg-type]
    for round_ in range(20):
        empty_tables(pg_ledger)
        # Given every slot held, `crashed` of the holders dead and re-claimed (their slots
        # expired), and three fresh contenders
        crashed = round_ % (slots + 1)
        occurrences = seeded(pg_ledger, slots + 3, "s")
        holders, fresh = occurrences[:slots], occurrences[slots:]
        for holder in holders:
            assert start(pg_ledger, holder, holder.claimed_by or "", "s", slots, policy).started
        for slot in range(crashed):
            _expire_slot(pg_ledger, "s", slot)
        retaken = [crash(pg_ledger, h, f"again-{n}") for n, h in enumerate(holders[:crashed])]

        # When the re-claimed ones and the fresh ones all start at the same moment
        outcomes, errors = contend(pg_ledger, retaken + fresh, spec, wait_secs=WAIT)

        # Then nobody deadlocks, and the outcomes are the policy's for `crashed` free slots
        no_deadlock(errors)
        contenders = len(retaken) + len(fresh)
        if policy == "forbid":
            expected = ["started"] * crashed + ["singleton_busy"] * (contenders - crashed)
        elif policy == "queue_one":
            expected = ["started"] * crashed + ["waiting"] + ["singleton_busy"] * 2
        else:
            expected = ["started"] * contenders
        assert sorted(outcomes) == sorted(expected)
        # …and the rows agree: `slots` run, each in its own slot under that slot's token
        stored = [pg_ledger.occurrences.get_occurrence(o.id) for o in occurrences]
        running = [o for o in stored if o.status == RUNNING]
        assert len(running) == slots
        rows = slot_rows(pg_ledger, "s")
        for o in running:
            assert o.singleton_slot is not None
            assert rows[o.singleton_slot] == (o.id, o.fencing_token)
        assert held_slots(pg_ledger, "s") == slots
        cancelled = [o for o in stored if o.status == CANCELLED]
        assert len(cancelled) == (3 if policy == "replace" else 0)
        waiting = [o for o in stored if o.status == PENDING]
        assert len(waiting) == (1 if policy == "queue_one" else 0)
        if waiting:
            assert rows[WAITER_SLOT][0] == waiting[0].id


def _expire_slot(ledger: Ledger, key: str, slot: int) -> None:
    with ledger.engine.begin() as conn:
        conn.execute(
            sa.update(singletons)
            .where(singletons.c.singleton_key == key, singletons.c.slot == slot)
            .values(lease_until=ledger.db_now() - timedelta(hours=1))
        )


def test_a_cancel_that_waited_for_a_start_in_flight_frees_the_slot_the_start_took(
    pg_ledger: Ledger,
) -> None:
    # Given a start of a claimed occurrence that has taken slot 0 and gone running, not yet
    # committed, and a cancel of it that runs meanwhile
    (mine,) = seeded(pg_ledger, 1, "c")
    cancelling = _while_a_start_is_in_flight(
        pg_ledger, mine, lambda: pg_ledger.occurrences.cancel(mine.id)
    )

    # Then the cancel went through after the start, and gave back the slot it took
    assert cancelling == []
    cancelled = pg_ledger.occurrences.get_occurrence(mine.id)
    assert cancelled.status == CANCELLED
    assert slot_rows(pg_ledger, "c")[0] == (None, 1)
    assert held_slots(pg_ledger, "c") == 0


def test_a_channel_delete_that_waited_for_a_start_in_flight_frees_the_slot_it_took(
    pg_ledger: Ledger,
) -> None:
    empty_tables(pg_ledger)
    channel = active_channel(pg_ledger, f"purged-{uuid.uuid4().hex}")
    pg_ledger.occurrences.insert_occurrence(
        row(pg_ledger.db_now() - timedelta(seconds=60), channel.channel_id)
    )
    mine = claim_one(pg_ledger, "p-node-0")
    deleting = _while_a_start_is_in_flight(
        pg_ledger, mine, lambda: pg_ledger.channels.delete_channel(channel.channel_id), key="p"
    )

    assert deleting == []
    with pg_ledger.engine.connect() as conn:
        left = conn.execute(sa.select(occurrences.c.id).where(occurrences.c.id == mine.id))
        assert left.all() == []
    assert slot_rows(pg_ledger, "p")[0] == (None, 1)
    assert held_slots(pg_ledger, "p") == 0


def _while_a_start_is_in_flight(
    ledger: Ledger, occurrence: Occurrence, act: Callable[[], object], key: str | None = None
) -> list[BaseException]:
    """Run `act` in a thread while a start of `occurrence` (the statements a start sends,
    written directly so the test can hold the transaction open) has taken slot 0 of its key
    and moved the occurrence to running; commit the start once `act` waits on it. Answers
    what `act` raised."""
    key = key or occurrence.channel_id.split("-ch-")[0]  # as `seeded` named it
    with ledger.engine.begin() as conn:
        conn.execute(sa.insert(singletons).values(singleton_key=key, slot=0, fencing_token=0))
    errors: list[BaseException] = []

    def run() -> None:
        try:
            act()
        except BaseException as exc:  # surfaced by the caller
            errors.append(exc)

    with ledger.engine.connect() as start:
        with start.begin():
            lease = ledger.db_now() + timedelta(seconds=LEASE)
            start.execute(
                sa.update(singletons)
                .where(singletons.c.singleton_key == key, singletons.c.slot == 0)
                .values(
                    occurrence_id=occurrence.id,
                    holder=occurrence.claimed_by,
                    fencing_token=1,
                    lease_until=lease,
                )
            )
            start.execute(
                sa.update(occurrences)
                .where(occurrences.c.id == occurrence.id)
                .values(
                    status=RUNNING,
                    singleton_key=key,
                    singleton_slot=0,
                    fencing_token=1,
                    claimed_until=lease,
                )
            )
            thread = threading.Thread(target=run)
            thread.start()
            _wait_until_blocked(ledger)
        thread.join()
    return errors


def _wait_until_blocked(ledger: Ledger) -> None:
    """Until some session of this database waits for a lock."""
    waiting = sa.text(
        "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
        "WHERE NOT l.granted AND a.datname = current_database()"
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with ledger.engine.connect() as conn:
            if conn.execute(waiting).scalar_one():
                return
        time.sleep(0.02)
    raise AssertionError("nothing waited for the start in flight")
