"""The lease protocol against a model of it: Hypothesis drives the ledger's own calls (claim,
start under forbid / queue_one / replace with 1-3 slots, renew, settle, release, hand back,
cancel, retry, a lease that runs out, an executor that dies) in random order, and after
every step the rows must be what a few lines of pure Python predict: who holds which slot
under which token, and each occurrence's status, attempt and claimant.

Besides agreeing with the model, the rows and what each actor was told must keep the
protocol's promises: never more than `slots` live holders of a key; a superseded actor's
renew, settle or release answers False and changes nothing; no attempt settled twice or by
anyone but its claimant; no live slot or waiting place held by a finished occurrence;
`attempt <= max_attempts`; each slot's fencing token only climbs; and no occurrence is ever
lost: when the steps end, every one can still be driven to a terminal status.

Time is the database's, so a lease "runs out" by writing it into the past.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, settings, strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from cronledger.errors import Conflict
from cronledger.ledger import (
    CANCELLED,
    CLAIMED,
    COMPLETED,
    FAILED,
    PENDING,
    RUNNING,
    SKIPPED_SINGLETON,
    Ledger,
    Occurrence,
    SingletonSpec,
)
from cronledger.ledger.models import ACTIVE_STATUSES, LEASED_STATUSES, RETRYABLE_STATUSES
from cronledger.ledger.singletons import WAITER_SLOT
from cronledger.ledger.tables import occurrences, singletons
from tests.ledger.helpers import (
    active_channel,
    empty_tables,
    release_singleton,
    row,
    settle,
    start_attempt,
)

LEASE = 600.0
OCCURRENCES = 8
MAX_ATTEMPTS = 2
KEYS = ("a", "b")
POLICIES = ("forbid", "queue_one", "replace")


# --- the model --------------------------------------------------------------------------


@dataclass
class Occ:
    key: str | None  # its channel's concurrency key; None: `allow`
    status: str = PENDING
    attempt: int = 0
    max_attempts: int = MAX_ATTEMPTS
    claimed_by: str | None = None
    live: bool = False  # leased, and the lease has not run out


@dataclass
class Slot:
    occ: str | None = None
    holder: str | None = None
    token: int = 0
    live: bool = False


@dataclass
class Ticket:
    """What one actor (a claimant) was told about one occurrence."""

    claimant: str
    occ: str
    claimed: Occurrence  # as its claim returned it
    state: str = "claimed"  # then "started" or "busy"
    token: int | None = None


def decide(spec: SingletonSpec, slots: dict[int, Slot], occ: str) -> tuple[str, int | None]:
    """What a start of `occ` does to its key: take a free slot (which one), wait, replace
    a holder, or give up. A slot is free unless another occurrence holds it live."""

    def other(slot: int) -> bool:
        held = slots.get(slot, Slot())
        return held.occ is not None and held.live and held.occ != occ

    if spec.policy == "queue_one" and other(WAITER_SLOT):
        return "busy", None  # one contender waits already
    free = next((s for s in range(spec.slots) if not other(s)), None)
    if free is not None:
        return "take", free
    return {"queue_one": "wait", "replace": "replace"}.get(spec.policy, "busy"), None


# --- what the database holds --------------------------------------------------------------


@dataclass(frozen=True)
class Stored:
    occurrences: dict[str, Occurrence]
    slots: dict[tuple[str, int], tuple[str | None, str | None, int, bool]]


def read(ledger: Ledger) -> Stored:
    """Every occurrence, and every slot row ever held (a row added free, token 0, is as good
    as absent), each with whether its lease is live by the database's clock."""
    now = ledger.db_now()
    with ledger.engine.connect() as conn:
        occ = {r.id: Occurrence(**r._mapping) for r in conn.execute(sa.select(occurrences))}
        rows = conn.execute(sa.select(singletons)).all()
    slots = {
        (r.singleton_key, r.slot): (
            r.occurrence_id,
            r.holder,
            r.fencing_token,
            r.occurrence_id is not None and r.lease_until is not None and r.lease_until >= now,
        )
        for r in rows
        if r.occurrence_id is not None or r.fencing_token > 0
    }
    return Stored(occ, slots)


# --- the machine ---------------------------------------------------------------------------


class ProtocolMachine(RuleBasedStateMachine):
    def __init__(self, ledger: Ledger) -> None:
        super().__init__()
        self.ledger = ledger
        empty_tables(ledger)
        self.specs: dict[str, SingletonSpec] = {}
        self.occs: dict[str, Occ] = {}
        self.slots: dict[str, dict[int, Slot]] = {key: {} for key in KEYS}
        self.tickets: dict[tuple[str, str], Ticket] = {}
        self.minted = 0
        self.settled: set[tuple[str, int]] = set()
        self.tokens: dict[tuple[str, int], int] = {}

    # -- setup ---------------------------------------------------------------------------

    @initialize(
        shapes=st.tuples(*[st.tuples(st.integers(1, 3), st.sampled_from(POLICIES)) for _ in KEYS]),
        keys=st.lists(st.sampled_from([*KEYS, None]), min_size=OCCURRENCES, max_size=OCCURRENCES),
    )
    def seed(self, shapes: tuple[tuple[int, str], ...], keys: list[str | None]) -> None:
        for key, (slots, policy) in zip(KEYS, shapes, strict=True):
            self.specs[key] = SingletonSpec(key, slots, policy)  # type: ignore[arg-type]
        channel = active_channel(self.ledger)
        now = self.ledger.db_now()
        rows = [
            row(now - timedelta(minutes=10 - n), channel.channel_id, max_attempts=MAX_ATTEMPTS)
            for n in range(OCCURRENCES)
        ]
        assert self.ledger.occurrences.insert_occurrences(rows) == OCCURRENCES
        self.occs = {r.id: Occ(key) for r, key in zip(rows, keys, strict=True)}

    # -- rules: the ledger's calls ---------------------------------------------------------

    @precondition(lambda self: len(self._tickets("claimed")) < 3)  # start some first
    @rule(limit=st.integers(1, 3))
    def claim(self, limit: int) -> None:
        self._claim(limit)

    def _claim(self, limit: int) -> list[Ticket]:
        claimant = self._mint()
        claimable = {
            i
            for i, o in self.occs.items()
            if o.status == PENDING or (o.status in LEASED_STATUSES and not o.live)
        }
        found = self.ledger.attempts.claim(claimant, limit, LEASE)
        leased = {o.id for o in found.leased}
        abandoned = {o.id for o in found.abandoned}
        assert leased | abandoned <= claimable
        assert len(leased | abandoned) == min(limit, len(claimable))
        for i in leased | abandoned:
            o = self.occs[i]
            if o.status == PENDING or o.attempt < o.max_attempts:
                assert i in leased
                o.status, o.attempt, o.claimed_by, o.live = CLAIMED, o.attempt + 1, claimant, True
            else:
                assert i in abandoned, "leased an expired row with no attempt left"
                o.status, o.live = FAILED, False
                self._free(i, only_expired=True)
        tickets = [Ticket(claimant, o.id, o) for o in found.leased]
        self.tickets.update({(t.claimant, t.occ): t for t in tickets})
        return tickets

    @precondition(lambda self: len(self._tickets("claimed")) < 3)
    @rule(limit=st.integers(1, 3))
    def dispatch(self, limit: int) -> None:
        """What the claim loop and its executors do: claim, and start each row at once."""
        for ticket in self._claim(limit):
            self._start(ticket)

    @precondition(lambda self: bool(self._tickets("claimed")))
    @rule(data=st.data())
    def start(self, data: st.DataObject) -> None:
        self._start(data.draw(st.sampled_from(self._tickets("claimed"))))

    def _start(self, ticket: Ticket) -> None:
        o = self.occs[ticket.occ]
        spec = self.specs.get(o.key) if o.key else None
        owner = o.status == CLAIMED and o.claimed_by == ticket.claimant
        decision, slot = (
            ("take", None) if spec is None else decide(spec, self._of(o.key), ticket.occ)
        )
        before = read(self.ledger)

        started = start_attempt(
            self.ledger, ticket.claimed, ticket.claimant, 1, spec, LEASE, wait_secs=0.0
        )

        key = spec.key if spec else ""
        if decision == "busy":
            assert started.outcome == "singleton_busy"
            ticket.state = "busy"
        elif not owner:
            assert started.outcome == "lost"
        if decision == "busy" or not owner:
            assert read(self.ledger) == before
            if started.outcome == "lost":
                del self.tickets[(ticket.claimant, ticket.occ)]
            return
        if decision == "wait":
            assert started.outcome == "waiting"
            self._free(ticket.occ)
            self._acquire(key, WAITER_SLOT, ticket.occ, None, started.fencing_token)
            o.status, o.attempt, o.claimed_by, o.live = PENDING, o.attempt - 1, None, False
            del self.tickets[(ticket.claimant, ticket.occ)]
            return
        assert started.outcome == "started", (decision, started)
        if decision == "replace":
            victim = started.replaced
            held = self._of(key)
            assert victim is not None
            assert any(s.occ == victim and s.live and n >= 0 for n, s in held.items())
            slot = next(n for n, s in held.items() if s.occ == victim and n >= 0)
            replaced = self.occs[victim]
            if replaced.status in LEASED_STATUSES:
                replaced.status, replaced.live = CANCELLED, False
        else:
            assert started.replaced is None
        self._free(ticket.occ)
        if spec is not None:
            assert slot is not None and started.slot == slot
            self._acquire(key, slot, ticket.occ, ticket.claimant, started.fencing_token)
        o.status, o.live = RUNNING, True
        ticket.state, ticket.token = "started", started.fencing_token

    @precondition(lambda self: bool(self._tickets("started")))
    @rule(data=st.data())
    def renew(self, data: st.DataObject) -> None:
        ticket = data.draw(st.sampled_from(self._tickets("started")))
        o = self.occs[ticket.occ]
        held = self._held_by(ticket)
        expected = o.status == RUNNING and o.claimed_by == ticket.claimant
        expected = expected and (ticket.token is None or held is not None)
        before = read(self.ledger)

        renewed = self.ledger.attempts.renew(ticket.occ, ticket.claimant, ticket.token, LEASE)

        assert renewed == expected
        if not renewed:
            assert read(self.ledger) == before
            del self.tickets[(ticket.claimant, ticket.occ)]  # it stops at once
            return
        o.live = True
        if held is not None:
            held.live = True

    @precondition(lambda self: bool(self.tickets))
    @rule(data=st.data(), fail=st.booleans())
    def settle(self, data: st.DataObject, fail: bool) -> None:
        ticket = data.draw(st.sampled_from(sorted(self.tickets.values(), key=_order)))
        o = self.occs[ticket.occ]
        status = {"busy": SKIPPED_SINGLETON, "claimed": FAILED}.get(ticket.state, COMPLETED)
        if fail:
            status = FAILED
        retry = status == FAILED and o.attempt < o.max_attempts
        release_held = ticket.token is None and ticket.claimed.singleton_key is not None
        owner = o.status in LEASED_STATUSES and o.claimed_by == ticket.claimant
        expected = owner and (ticket.token is None or self._held_by(ticket) is not None)
        before = read(self.ledger)

        settled = settle(
            self.ledger,
            ticket.occ,
            ticket.claimant,
            status,
            fencing_token=ticket.token,
            retry_in=0.0 if retry else None,
            release_held=release_held,
        )

        assert settled == expected
        del self.tickets[(ticket.claimant, ticket.occ)]
        if not settled:
            assert read(self.ledger) == before
            return
        assert (ticket.occ, o.attempt) not in self.settled, "an attempt settled twice"
        self.settled.add((ticket.occ, o.attempt))
        if ticket.token is not None:
            held = self._held_by(ticket)
            assert held is not None
            held.occ, held.holder, held.live = None, None, False
        elif release_held:
            self._free(ticket.occ)
        o.live = False
        if retry:
            o.status, o.claimed_by = PENDING, None
        else:
            o.status = status

    @precondition(lambda self: any(t.token is not None for t in self._tickets("started")))
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        ticket = data.draw(
            st.sampled_from([t for t in self._tickets("started") if t.token is not None])
        )
        o, held = self.occs[ticket.occ], self._held_by(ticket)
        assert ticket.token is not None and o.key is not None
        before = read(self.ledger)

        released = release_singleton(self.ledger, o.key, ticket.occ, ticket.claimant, ticket.token)

        assert released == (held is not None)
        if held is None:
            assert read(self.ledger) == before
        else:
            held.occ, held.holder, held.live = None, None, False

    @precondition(lambda self: bool(self._tickets("claimed")))
    @rule(data=st.data())
    def hand_back(self, data: st.DataObject) -> None:
        ticket = data.draw(st.sampled_from(self._tickets("claimed")))
        o = self.occs[ticket.occ]
        expected = o.status == CLAIMED and o.claimed_by == ticket.claimant
        before = read(self.ledger)

        handed = self.ledger.attempts.release_claim(ticket.occ, ticket.claimant)

        assert handed == expected
        del self.tickets[(ticket.claimant, ticket.occ)]
        if not handed:
            assert read(self.ledger) == before
            return
        o.status, o.attempt, o.claimed_by, o.live = PENDING, o.attempt - 1, None, False

    @rule(n=st.integers(0, OCCURRENCES - 1))
    def cancel(self, n: int) -> None:
        i = sorted(self.occs)[n]
        o = self.occs[i]
        before = read(self.ledger)
        try:
            self.ledger.occurrences.cancel(i)
        except Conflict:
            assert o.status not in ACTIVE_STATUSES
            assert read(self.ledger) == before
            return
        assert o.status in ACTIVE_STATUSES
        self._free(i)
        o.status, o.claimed_by, o.live = CANCELLED, None, False

    @rule(n=st.integers(0, OCCURRENCES - 1))
    def retry(self, n: int) -> None:
        i = sorted(self.occs)[n]
        o = self.occs[i]
        before = read(self.ledger)
        try:
            self.ledger.occurrences.requeue(i)
        except Conflict:
            assert o.status not in RETRYABLE_STATUSES
            assert read(self.ledger) == before
            return
        assert o.status in RETRYABLE_STATUSES
        o.status, o.claimed_by, o.live = PENDING, None, False
        o.max_attempts = max(o.max_attempts, o.attempt + 1)

    @precondition(lambda self: bool(self._leased()))
    @rule(data=st.data(), dies=st.booleans())
    def lease_runs_out(self, data: st.DataObject, dies: bool) -> None:
        """A leased occurrence's lease and its slots' leases run out: its executor stalled
        (and, when it `dies`, never acts again)."""
        i = data.draw(st.sampled_from(self._leased()))
        self._expire(i)
        self.occs[i].live = False
        for s in self._slots_of(i):
            s.live = False
        if dies:
            for ticket in [t for t in self.tickets.values() if t.occ == i]:
                del self.tickets[(ticket.claimant, ticket.occ)]

    @rule(key=st.sampled_from(KEYS))
    def waiting_place_lapses(self, key: str) -> None:
        place = singletons.c.singleton_key == key, singletons.c.slot == WAITER_SLOT
        self._past(singletons, sa.and_(*place), lease_until=True)
        self._of(key).setdefault(WAITER_SLOT, Slot()).live = False

    # -- invariants -----------------------------------------------------------------------

    @invariant()
    def rows_agree_with_the_model_and_keep_the_promises(self) -> None:
        if not self.occs:
            return
        stored = read(self.ledger)
        for i, o in self.occs.items():
            s = stored.occurrences[i]
            assert (s.status, s.attempt, s.claimed_by) == (o.status, o.attempt, o.claimed_by), i
            assert s.max_attempts == o.max_attempts
            assert s.attempt <= s.max_attempts
        model = {
            (key, n): (s.occ, s.holder, s.token, s.live)
            for key, held in self.slots.items()
            for n, s in held.items()
            if s.occ is not None or s.token > 0
        }
        assert stored.slots == model
        for (key, n), (occ, _, token, live) in stored.slots.items():
            assert token >= self.tokens.get((key, n), 0), "a fencing token went down"
            self.tokens[(key, n)] = token
            if live:
                assert occ is not None
                assert stored.occurrences[occ].status in ACTIVE_STATUSES, "a finished holder"
        for key, spec in self.specs.items():
            live_holders = [
                occ
                for (k, n), (occ, _, _, live) in stored.slots.items()
                if k == key and n >= 0 and live
            ]
            assert len(live_holders) <= spec.slots
            told = [
                t
                for t in self._tickets("started")
                if t.token is not None and self.occs[t.occ].key == key and self._held_by(t)
            ]
            assert len(told) <= spec.slots
        for s in stored.occurrences.values():
            if s.status in LEASED_STATUSES:
                assert s.claimed_by is not None and s.claimed_until is not None
            elif s.status == PENDING:
                assert s.claimed_by is None and s.claimed_until is None
            else:
                assert s.claimed_until is None

    def teardown(self) -> None:
        """No occurrence is lost: with every lease run out, claims and starts drive every
        one of them to a terminal status."""
        if not self.occs:
            return
        for _ in range(OCCURRENCES * MAX_ATTEMPTS + 4):
            stored = read(self.ledger).occurrences
            active = [i for i, o in stored.items() if o.status in ACTIVE_STATUSES]
            if not active:
                return
            for i in active:
                self._expire(i)
            self._past(singletons, singletons.c.occurrence_id.is_not(None), lease_until=True)
            claimant = self._mint()
            for occurrence in self.ledger.attempts.claim(claimant, OCCURRENCES, LEASE).leased:
                key = self.occs[occurrence.id].key
                spec = self.specs.get(key) if key else None
                started = start_attempt(
                    self.ledger, occurrence, claimant, 1, spec, LEASE, wait_secs=0.0
                )
                if started.outcome in ("started", "singleton_busy"):
                    status = COMPLETED if started.started else SKIPPED_SINGLETON
                    assert settle(
                        self.ledger,
                        occurrence.id,
                        claimant,
                        status,
                        fencing_token=started.fencing_token,
                        release_held=started.fencing_token is None,
                    )
        stuck = {i: o.status for i, o in read(self.ledger).occurrences.items()}
        pytest.fail(f"occurrences never reached a terminal status: {stuck}")

    # -- the model's bookkeeping --------------------------------------------------------------

    def _mint(self) -> str:
        self.minted += 1
        return f"c{self.minted}"

    def _tickets(self, state: str) -> list[Ticket]:
        return sorted((t for t in self.tickets.values() if t.state == state), key=_order)

    def _leased(self) -> list[str]:
        return sorted(i for i, o in self.occs.items() if o.status in LEASED_STATUSES)

    def _of(self, key: str | None) -> dict[int, Slot]:
        return self.slots[key] if key else {}

    def _slots_of(self, occ: str) -> list[Slot]:
        return [s for held in self.slots.values() for s in held.values() if s.occ == occ]

    def _held_by(self, ticket: Ticket) -> Slot | None:
        """The slot row this actor holds under the token it was told, if it still does."""
        key = self.occs[ticket.occ].key
        return next(
            (
                s
                for s in self._of(key).values()
                if (s.occ, s.holder, s.token) == (ticket.occ, ticket.claimant, ticket.token)
            ),
            None,
        )

    def _free(self, occ: str, *, only_expired: bool = False) -> None:
        for s in self._slots_of(occ):
            if not (only_expired and s.live):
                s.occ, s.holder, s.live = None, None, False

    def _acquire(
        self, key: str, slot: int, occ: str, holder: str | None, token: int | None
    ) -> None:
        held = self._of(key).setdefault(slot, Slot())
        if token is not None:  # the waiting place's token is not told
            assert token == held.token + 1, "a slot was taken without the next token"
        held.occ, held.holder, held.token, held.live = occ, holder, held.token + 1, True

    def _expire(self, occ: str) -> None:
        self._past(occurrences, occurrences.c.id == occ, claimed_until=True)
        self._past(singletons, singletons.c.occurrence_id == occ, lease_until=True)

    def _past(self, table: sa.Table, where: sa.ColumnElement[bool], **columns: bool) -> None:
        """Move the leases of the matching rows an hour into the past (those set at all)."""
        past = self.ledger.db_now() - timedelta(hours=1)
        with self.ledger.engine.begin() as conn:
            for column in columns:
                conn.execute(
                    sa.update(table)
                    .where(where, table.c[column].is_not(None))
                    .values({column: past})
                )


def _order(ticket: Ticket) -> tuple[str, str]:
    return ticket.claimant, ticket.occ


def test_the_lease_protocol_keeps_its_promises_in_any_order_of_calls(ledger: Ledger) -> None:
    run_state_machine_as_test(
        lambda: ProtocolMachine(ledger),
        settings=settings(
            max_examples=20,
            stateful_step_count=50,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )
