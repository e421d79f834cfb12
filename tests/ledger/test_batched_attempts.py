"""A batch's attempts written together keep every ownership condition, on both backends.

The opens are one statement, the starts one transaction and the ends micro-batches, yet each
write is conditional on its own attempt: a superseded attempt in a batch (re-claimed by
another claimant, cancelled, its token moved on) writes nothing and is answered as lost,
a busy key answers that attempt busy, and the others of the batch proceed."""

from __future__ import annotations

from datetime import timedelta

import sqlalchemy as sa

from cronledger.execute import Executor
from cronledger.ledger import (
    CANCELLED,
    CLAIMED,
    COMPLETED,
    RUNNING,
    SKIPPED_SINGLETON,
    Ledger,
    Occurrence,
    SingletonSpec,
)
from cronledger.ledger.attempts import SettleRequest, StartRequest
from cronledger.ledger.tables import singletons
from cronledger.settings import Settings
from tests.ledger.helpers import (
    LEASE,
    active_channel,
    claim_one,
    expire_claim,
    seed_due,
    start_attempt,
)

SETTINGS = Settings(claim_lease_secs=60, misfire_grace_secs=3600, python_targets=("cronledger",))


def claimed(ledger: Ledger, channel_id: str, claimant: str, count: int) -> list[Occurrence]:
    for n in range(count):  # a second apart: SQLite's clock reads in milliseconds
        seed_due(ledger, channel_id, timedelta(seconds=30 + n))
    return [claim_one(ledger, claimant) for _ in range(count)]


def run_batch(ledger: Ledger, ids: list[str], claimant: str) -> dict[str, str]:
    """The batch run as the execute function runs it."""
    reports = Executor(ledger, SETTINGS).run_batch(ids, claimant)
    return {r.occurrence_id: r.outcome for r in reports}


def slot(ledger: Ledger, key: str) -> tuple[str | None, int]:
    with ledger.engine.connect() as conn:
        holder, token = conn.execute(
            sa.select(singletons.c.occurrence_id, singletons.c.fencing_token).where(
                singletons.c.singleton_key == key, singletons.c.slot == 0
            )
        ).one()
    return holder, int(token)


def test_a_superseded_attempt_in_a_batch_writes_nothing_while_the_others_complete(
    ledger: Ledger,
) -> None:
    # Given three claimed occurrences of one batch: one since re-claimed by another
    # claimant after its lease ran out, one cancelled by an operator
    channel = active_channel(ledger)
    plain, reclaimed, cancelled = claimed(ledger, channel.channel_id, "batch-1", 3)
    expire_claim(ledger, reclaimed.id)
    assert claim_one(ledger, "peer").id == reclaimed.id
    ledger.occurrences.cancel(cancelled.id, reason="operator")

    # When the batch runs
    outcomes = run_batch(ledger, [plain.id, reclaimed.id, cancelled.id], "batch-1")

    # Then the superseded two are answered lost and nothing of theirs was written
    assert outcomes == {plain.id: COMPLETED, reclaimed.id: "lost", cancelled.id: "lost"}
    now_reclaimed = ledger.occurrences.get_occurrence(reclaimed.id)
    assert (now_reclaimed.status, now_reclaimed.claimed_by) == (CLAIMED, "peer")
    assert now_reclaimed.attempt == 2 and now_reclaimed.started_at is None
    assert ledger.occurrences.get_occurrence(cancelled.id).status == CANCELLED
    assert (
        ledger.occurrences.attempts_of(reclaimed.id)
        == ledger.occurrences.attempts_of(cancelled.id)
        == []
    )
    # And the third ran to completed, its attempt on record, started and ended once
    done = ledger.occurrences.get_occurrence(plain.id)
    assert done.status == COMPLETED and done.result is not None
    [attempt] = ledger.occurrences.attempts_of(plain.id)
    assert (attempt.claimant, attempt.outcome) == ("batch-1", COMPLETED)


def test_a_batch_whose_key_is_busy_answers_that_attempt_busy_and_runs_the_rest(
    ledger: Ledger,
) -> None:
    # Given a keyed channel whose one slot is held by a running occurrence, and a batch
    # of a contender for that key and two plain occurrences
    keyed = active_channel(ledger, "keyed", concurrency={"key": "k", "policy": "forbid"})
    plain = active_channel(ledger, "plain")
    [holder] = claimed(ledger, keyed.channel_id, "holder", 1)
    assert start_attempt(ledger, holder, "holder", 1, SingletonSpec("k"), LEASE).started
    [contender] = claimed(ledger, keyed.channel_id, "batch-1", 1)
    first, second = claimed(ledger, plain.channel_id, "batch-1", 2)

    # When the batch runs
    outcomes = run_batch(ledger, [contender.id, first.id, second.id], "batch-1")

    # Then the contender is skipped as busy, the holder keeps its slot, the others complete
    assert outcomes == {contender.id: SKIPPED_SINGLETON, first.id: COMPLETED, second.id: COMPLETED}
    skipped = ledger.occurrences.get_occurrence(contender.id)
    assert skipped.status == SKIPPED_SINGLETON and "'k'" in (skipped.error_message or "")
    assert ledger.occurrences.attempts_of(contender.id) == []
    assert slot(ledger, "k") == (holder.id, 1)
    assert ledger.occurrences.get_occurrence(holder.id).status == RUNNING
    for occurrence in (first, second):
        assert ledger.occurrences.get_occurrence(occurrence.id).status == COMPLETED


def test_starts_in_one_transaction_undo_a_lost_keyed_start_alone(ledger: Ledger) -> None:
    # Given three claimed occurrences, the first of which was re-claimed by a peer after
    # this claimant's lease ran out (but this claimant does not know it yet)
    channel = active_channel(ledger)
    lost, keyed, plain = claimed(ledger, channel.channel_id, "batch-1", 3)
    expire_claim(ledger, lost.id)
    assert claim_one(ledger, "peer").id == lost.id
    with ledger.engine.begin() as conn:  # the keys' slot rows exist, unheld, at token 0
        conn.execute(
            sa.insert(singletons),
            [{"singleton_key": k, "slot": 0, "fencing_token": 0} for k in ("k1", "k2")],
        )

    # When all three start in one transaction, two of them taking a key's slot
    answers = ledger.attempts.start_attempts(
        [
            StartRequest(lost, 1, SingletonSpec("k1")),
            StartRequest(keyed, 1, SingletonSpec("k2")),
            StartRequest(plain, 1, None),
        ],
        "batch-1",
        LEASE,
    )

    # Then the lost one took nothing (its slot's token never moved) and is answered lost,
    # while the others started, the keyed one under the slot's next token
    assert [a.outcome for a in answers] == ["lost", "started", "started"]
    assert slot(ledger, "k1") == (None, 0)
    assert slot(ledger, "k2") == (keyed.id, 1) and answers[1].fencing_token == 1
    assert ledger.occurrences.get_occurrence(lost.id).claimed_by == "peer"
    assert ledger.occurrences.attempts_of(lost.id) == []
    for occurrence in (keyed, plain):
        assert ledger.occurrences.get_occurrence(occurrence.id).status == RUNNING
        [attempt] = ledger.occurrences.attempts_of(occurrence.id)
        assert attempt.claimant == "batch-1" and attempt.ended_at is None


def test_a_micro_batch_of_settles_with_one_stale_token_settles_the_rest_only(
    ledger: Ledger,
) -> None:
    # Given three running attempts of one claimant, two holding keys' slots, and the
    # token of the first moved on since (its slot taken over after its lease ran out)
    channel = active_channel(ledger)
    stale, keyed, plain = claimed(ledger, channel.channel_id, "batch-1", 3)
    tokens = [
        start_attempt(ledger, stale, "batch-1", 1, SingletonSpec("k1"), LEASE).fencing_token,
        start_attempt(ledger, keyed, "batch-1", 1, SingletonSpec("k2"), LEASE).fencing_token,
    ]
    assert start_attempt(ledger, plain, "batch-1", 1, None, LEASE).started
    with ledger.engine.begin() as conn:
        conn.execute(
            sa.update(singletons)
            .where(singletons.c.singleton_key == "k1")
            .values(fencing_token=singletons.c.fencing_token + 1)
        )

    # When their ends are written as one micro-batch
    settled = ledger.attempts.settle_many(
        [
            SettleRequest(stale.id, "batch-1", COMPLETED, fencing_token=tokens[0], result="a"),
            SettleRequest(keyed.id, "batch-1", COMPLETED, fencing_token=tokens[1], result="b"),
            SettleRequest(plain.id, "batch-1", COMPLETED, result="c"),
        ]
    )

    # Then the stale one wrote nothing: still running, its slot and attempt untouched
    assert settled == [False, True, True]
    still = ledger.occurrences.get_occurrence(stale.id)
    assert still.status == RUNNING and still.result is None
    assert slot(ledger, "k1") == (stale.id, 2)
    assert ledger.occurrences.attempts_of(stale.id)[0].ended_at is None
    # And the others are completed with their results, the keyed one's slot freed
    assert slot(ledger, "k2") == (None, 1)
    for occurrence, result in ((keyed, "b"), (plain, "c")):
        done = ledger.occurrences.get_occurrence(occurrence.id)
        assert (done.status, done.result, done.claimed_until) == (COMPLETED, result, None)
        [attempt] = ledger.occurrences.attempts_of(occurrence.id)
        assert attempt.outcome == COMPLETED and attempt.ended_at is not None


def test_opens_in_one_statement_start_only_the_attempts_still_claimed(ledger: Ledger) -> None:
    # Given two claimed occurrences, one since re-claimed by a peer, and an unknown id
    channel = active_channel(ledger)
    mine, taken = claimed(ledger, channel.channel_id, "batch-1", 2)
    expire_claim(ledger, taken.id)
    assert claim_one(ledger, "peer").id == taken.id

    # When the batch opens them
    opened = ledger.attempts.open_attempts(
        [mine.id, taken.id, "no-such-id"], "batch-1", LEASE, "trace-1", misfire_grace_secs=3600
    )

    # Then each is read as it was; the unknown id is left out; and where the open starts
    # plain attempts (PostgreSQL), it started only the one still claimed by this claimant
    assert set(opened) == {mine.id, taken.id}
    assert opened[taken.id].occurrence.claimed_by == "peer"
    assert opened[taken.id].start is None
    assert ledger.occurrences.get_occurrence(taken.id).status == CLAIMED
    assert ledger.occurrences.attempts_of(taken.id) == []
    started = opened[mine.id].start is not None
    assert started == ledger.engine.dialect.name.startswith("postgres")
    assert ledger.occurrences.get_occurrence(mine.id).status == (RUNNING if started else CLAIMED)
    assert len(ledger.occurrences.attempts_of(mine.id)) == int(started)
