"""Protocol benchmark: the lease protocol under a long randomized run on PostgreSQL.

Several threads, each an executor fleet of its own, make the ledger's calls in random order
against keys of every shape (forbid / queue_one / replace, 1-3 slots, and none): claim,
start, renew, settle (completed, or failed and retried), release, hand back, cancel, retry,
new occurrences, and leases that run out (an executor that stalls, or dies). Time is the
database's, so a lease runs out by being written into the past.

Checked while it runs, from the rows (one statement each, so one snapshot): never more than
`slots` live holders of a key; no live slot or waiting place held by a finished occurrence;
`attempt <= max_attempts`; a lease on every leased row and on no other; no slot's fencing
token ever going down. Checked afterwards, from what each actor was told: no token told
twice for a slot, and a later start always told a higher one; no renew, settle or release
succeeded under a token after a higher one was told for its slot (a superseded holder
changes nothing); no attempt leased to two claimants, settled twice, or settled by anyone
but its claimant. Last, every occurrence is driven to a terminal status (none lost).

Printed: steps (ledger calls), steps/s, what the starts answered, and the violations, which
must be 0 (the run fails otherwise).
"""

from __future__ import annotations

import bisect
import contextlib
import random
import sys
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import sqlalchemy as sa

from cronledger.errors import Conflict
from cronledger.ledger import (
    COMPLETED,
    FAILED,
    SKIPPED_SINGLETON,
    Ledger,
    NewOccurrence,
    Occurrence,
    SingletonSpec,
)
from cronledger.ledger.driver import sqlstate
from cronledger.ledger.models import ACTIVE_STATUSES, LEASED_STATUSES, PENDING, TERMINAL_STATUSES
from cronledger.ledger.tables import occurrences, singletons
from tests.bench.pg import scratch_database
from tests.ledger.helpers import active_channel, release_singleton, settle, start_attempt

STEPS = 100_000
THREADS = 6
SEED = 26
LEASE = 600.0
MAX_ATTEMPTS = 3
FIRST_OCCURRENCES = 48
#: The keys, each its channel's: (slots, policy); None runs without one (`allow`).
SHAPES: dict[str | None, tuple[int, str]] = {
    "forbid-1": (1, "forbid"),
    "forbid-2": (2, "forbid"),
    "queue-1": (1, "queue_one"),
    "queue-3": (3, "queue_one"),
    "replace-1": (1, "replace"),
    "replace-2": (2, "replace"),
    None: (0, "allow"),
}
CHECK_EVERY_SECS = 0.5


@dataclass(frozen=True)
class Told:
    """A start that answered `started` under a token, and when the call began and ended."""

    began: float
    ended: float
    key: str
    slot: int
    token: int


@dataclass(frozen=True)
class Wrote:
    """A renew, settle or release under a token that answered True."""

    began: float
    key: str
    slot: int
    token: int
    what: str


@dataclass
class Ticket:
    """What one actor was told about one occurrence it claimed."""

    claimed: Occurrence
    claimant: str
    spec: SingletonSpec | None
    state: str = "claimed"  # then "started" or "busy"
    token: int | None = None
    slot: int | None = None


@dataclass
class World:
    ledger: Ledger
    specs: dict[str, SingletonSpec | None]  # channel id -> its key
    base: datetime  # the instants of new occurrences count on from here, a day ago
    ids: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    minted: int = 0
    done: threading.Event = field(default_factory=threading.Event)

    def add(self, count: int) -> None:
        """`count` new due occurrences, spread over the channels."""
        with self.lock:
            start, self.minted = self.minted, self.minted + count
        channels = sorted(self.specs)
        rows = [
            NewOccurrence(
                channels[n % len(channels)],
                "bench",
                1,
                self.base + timedelta(milliseconds=n),
                max_attempts=MAX_ATTEMPTS,
            )
            for n in range(start, start + count)
        ]
        assert self.ledger.occurrences.insert_occurrences(rows) == count
        with self.lock:
            self.ids.extend(r.id for r in rows)

    def claimant(self) -> str:
        with self.lock:
            self.minted += 1
            return f"claimant-{self.minted}"


class Actor(threading.Thread):
    def __init__(self, world: World, number: int, steps: int) -> None:
        super().__init__(name=f"actor-{number}")
        self.world, self.ledger = world, world.ledger
        self.random = random.Random(SEED * 1000 + number)
        self.quota, self.steps = steps, 0
        self.tickets: list[Ticket] = []
        self.told: list[Told] = []
        self.wrote: list[Wrote] = []
        self.leased: list[tuple[str, int, str]] = []  # (occurrence, attempt, claimant)
        self.given_back: list[tuple[str, int]] = []  # attempts handed back, to be leased again
        self.settled: list[tuple[str, int, str]] = []
        self.outcomes: Counter[str] = Counter()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while self.steps < self.quota:
                self.step()
        except BaseException as exc:  # reported by main
            self.error = exc

    def step(self) -> None:
        roll = self.random.random()
        started = [t for t in self.tickets if t.state == "started"]
        if len(self.tickets) < 3 and roll < 0.35:
            self.dispatch()
        elif started and roll < 0.55:
            self.renew(self.random.choice(started))
        elif self.tickets and roll < 0.75:
            self.settle(self.random.choice(self.tickets))
        elif started and roll < 0.78:
            self.release(self.random.choice(started))
        elif self.tickets and roll < 0.80:
            self.hand_back(self.random.choice(self.tickets))
        elif self.tickets and roll < 0.86:
            ticket = self.random.choice(self.tickets)
            expire(self.ledger, ticket.claimed.id)  # its executor stalls…
            if self.random.random() < 0.5:  # …or dies, and never acts again
                self.tickets.remove(ticket)
        elif roll < 0.89:
            expire(self.ledger, self.random.choice(self.world.ids))
        elif roll < 0.91:
            self.cancel(self.random.choice(self.world.ids))
        elif roll < 0.95:
            self.requeue(self.random.choice(self.world.ids))
        elif roll < 0.97:
            self.world.add(3)
            self.steps += 1

    def dispatch(self) -> None:
        claimant = self.world.claimant()
        found = self.ledger.attempts.claim(claimant, self.random.randint(1, 3), LEASE)
        self.steps += 1
        for occurrence in found.leased:
            self.leased.append((occurrence.id, occurrence.attempt, claimant))
            spec = self.world.specs[occurrence.channel_id]
            ticket = Ticket(occurrence, claimant, spec)
            self.tickets.append(ticket)
            self.start_attempt(ticket)
        if not found.leased and self.random.random() < 0.5:
            self.world.add(4)

    def start_attempt(self, ticket: Ticket) -> None:
        began = time.perf_counter()
        started = start_attempt(
            self.ledger, ticket.claimed, ticket.claimant, 1, ticket.spec, LEASE, wait_secs=0.0
        )
        ended = time.perf_counter()
        self.steps += 1
        self.outcomes[started.outcome] += 1
        if started.replaced:
            self.outcomes["…of which replaced a holder"] += 1
        if started.outcome == "started":
            ticket.state, ticket.token, ticket.slot = "started", started.fencing_token, started.slot
            if ticket.spec is not None:
                assert started.slot is not None and started.fencing_token is not None
                self.told.append(
                    Told(began, ended, ticket.spec.key, started.slot, started.fencing_token)
                )
        elif started.outcome == "singleton_busy":
            ticket.state = "busy"
        else:  # waiting, or lost: this attempt is over
            if started.outcome == "waiting":
                self.given_back.append((ticket.claimed.id, ticket.claimed.attempt))
            self.tickets.remove(ticket)

    def renew(self, ticket: Ticket) -> None:
        began = time.perf_counter()
        renewed = self.ledger.attempts.renew(
            ticket.claimed.id, ticket.claimant, ticket.token, LEASE
        )
        self.steps += 1
        if renewed:
            self.note(began, ticket, "renew")
        else:
            self.outcomes["renew refused"] += 1
            self.tickets.remove(ticket)  # not yours: stop at once

    def settle(self, ticket: Ticket) -> None:
        occurrence = ticket.claimed
        status = {"busy": SKIPPED_SINGLETON, "claimed": FAILED}.get(ticket.state, COMPLETED)
        if ticket.state == "started" and self.random.random() < 0.3:
            status = FAILED
        retry = status == FAILED and occurrence.attempt < occurrence.max_attempts
        began = time.perf_counter()
        settled = settle(
            self.ledger,
            occurrence.id,
            ticket.claimant,
            status,
            fencing_token=ticket.token,
            retry_in=0.0 if retry else None,
            release_held=ticket.token is None and occurrence.singleton_key is not None,
        )
        self.steps += 1
        self.tickets.remove(ticket)
        if settled:
            self.settled.append((occurrence.id, occurrence.attempt, ticket.claimant))
            self.note(began, ticket, "settle")
        else:
            self.outcomes["settle refused"] += 1

    def release(self, ticket: Ticket) -> None:
        if ticket.spec is None or ticket.token is None:
            return
        began = time.perf_counter()
        released = release_singleton(
            self.ledger, ticket.spec.key, ticket.claimed.id, ticket.claimant, ticket.token
        )
        self.steps += 1
        if released:
            self.note(began, ticket, "release")

    def hand_back(self, ticket: Ticket) -> None:
        if ticket.state != "claimed":
            return
        if self.ledger.attempts.release_claim(ticket.claimed.id, ticket.claimant):
            self.given_back.append((ticket.claimed.id, ticket.claimed.attempt))
        self.steps += 1
        self.tickets.remove(ticket)

    def cancel(self, occurrence_id: str) -> None:
        with contextlib.suppress(Conflict):
            self.ledger.occurrences.cancel(occurrence_id)
        self.steps += 1

    def requeue(self, occurrence_id: str) -> None:
        with contextlib.suppress(Conflict):
            self.ledger.occurrences.requeue(occurrence_id)
        self.steps += 1

    def note(self, began: float, ticket: Ticket, what: str) -> None:
        if ticket.spec is not None and ticket.token is not None and ticket.slot is not None:
            self.wrote.append(Wrote(began, ticket.spec.key, ticket.slot, ticket.token, what))


def expire(ledger: Ledger, occurrence_id: str) -> None:
    """The occurrence's lease and its slots' leases run out together, as they do by the
    clock. The slots go first (the ledger's lock order) and again after the occurrence, for
    a slot a start of it committed while this waited for its row; such a start can then
    deadlock with this, and whichever PostgreSQL aborts runs again."""
    past = sa.func.statement_timestamp() - sa.text("interval '1 hour'")
    slots = (
        sa.update(singletons)
        .where(singletons.c.occurrence_id == occurrence_id)
        .where(singletons.c.lease_until.is_not(None))
        .values(lease_until=past)
    )
    lease = (
        sa.update(occurrences)
        .where(occurrences.c.id == occurrence_id)
        .where(occurrences.c.claimed_until.is_not(None))
        .values(claimed_until=past)
    )
    for tries_left in reversed(range(5)):
        try:
            with ledger.engine.begin() as conn:
                for statement in (slots, lease, slots):
                    conn.execute(statement)
            return
        except sa.exc.DBAPIError as exc:
            if sqlstate(exc) != "40P01" or not tries_left:
                raise


# --- checks ------------------------------------------------------------------------------


def check_rows(world: World, tokens: dict[tuple[str, int], int]) -> None:
    """The promises the rows keep at every instant, each read in one statement."""
    ledger, found = world.ledger, world.violations
    now = sa.func.statement_timestamp()
    live = sa.and_(singletons.c.occurrence_id.is_not(None), singletons.c.lease_until >= now)
    slots_of = {spec.key: spec.slots for spec in world.specs.values() if spec is not None}
    with ledger.engine.connect() as conn:
        held = conn.execute(
            sa.select(singletons.c.singleton_key, sa.func.count())
            .where(live, singletons.c.slot >= 0)
            .group_by(singletons.c.singleton_key)
        ).all()
        for key, count in held:
            if count > slots_of[key]:
                found.append(f"{count} live holders of {key} (slots {slots_of[key]})")
        finished = conn.execute(
            sa.select(singletons.c.singleton_key, singletons.c.slot, occurrences.c.status)
            .join(occurrences, occurrences.c.id == singletons.c.occurrence_id)
            .where(live, occurrences.c.status.not_in(ACTIVE_STATUSES))
        ).all()
        found.extend(f"a live slot {k}/{s} held by a {st} occurrence" for k, s, st in finished)
        over = conn.execute(
            sa.select(sa.func.count()).where(occurrences.c.attempt > occurrences.c.max_attempts)
        ).scalar_one()
        if over:
            found.append(f"{over} occurrences past their max_attempts")
        leased = occurrences.c.status.in_(LEASED_STATUSES)
        unleased = conn.execute(
            sa.select(sa.func.count()).where(
                sa.or_(
                    sa.and_(
                        leased,
                        sa.or_(
                            occurrences.c.claimed_by.is_(None),
                            occurrences.c.claimed_until.is_(None),
                        ),
                    ),
                    sa.and_(sa.not_(leased), occurrences.c.claimed_until.is_not(None)),
                    sa.and_(occurrences.c.status == PENDING, occurrences.c.claimed_by.is_not(None)),
                )
            )
        ).scalar_one()
        if unleased:
            found.append(f"{unleased} occurrences whose lease does not fit their status")
        for key, slot, token in conn.execute(
            sa.select(singletons.c.singleton_key, singletons.c.slot, singletons.c.fencing_token)
        ):
            if token < tokens.get((key, slot), 0):
                found.append(f"the token of {key}/{slot} went down to {token}")
            tokens[(key, slot)] = token


def check_actors(actors: list[Actor], found: list[str]) -> None:
    """The promises as the actors saw them."""
    told: dict[tuple[str, int], list[Told]] = defaultdict(list)
    for actor in actors:
        for t in actor.told:
            told[(t.key, t.slot)].append(t)
    for (key, slot), tellings in told.items():
        tokens = Counter(t.token for t in tellings)
        found.extend(f"token {n} of {key}/{slot} told twice" for n, c in tokens.items() if c > 1)
        # A telling that ended before another began had a lower token; a write under a
        # token succeeded only while no higher one had been told.
        tellings.sort(key=lambda t: t.ended)
        ends = [t.ended for t in tellings]
        best = list(_running_max([t.token for t in tellings]))
        for t in tellings:
            i = bisect.bisect_left(ends, t.began)
            if i and best[i - 1] >= t.token:
                found.append(f"{key}/{slot}: token {t.token} told after {best[i - 1]}")
        for actor in actors:
            for w in actor.wrote:
                if (w.key, w.slot) != (key, slot):
                    continue
                i = bisect.bisect_left(ends, w.began)
                if i and best[i - 1] > w.token:
                    found.append(
                        f"{key}/{slot}: a {w.what} under token {w.token} succeeded after "
                        f"token {best[i - 1]} was told"
                    )
    # An attempt is leased once, and once more each time it was handed back unstarted.
    leases = Counter((o, a) for actor in actors for o, a, _ in actor.leased)
    leases.subtract(given for actor in actors for given in actor.given_back)
    found.extend(f"attempt {a} of {o} leased twice" for (o, a), c in leases.items() if c > 1)
    owners = defaultdict(set)
    for actor in actors:
        for o, a, c in actor.leased:
            owners[(o, a)].add(c)
    settles = Counter((o, a) for actor in actors for o, a, _ in actor.settled)
    found.extend(f"attempt {a} of {o} settled twice" for (o, a), c in settles.items() if c > 1)
    for actor in actors:
        for o, a, claimant in actor.settled:
            if claimant not in owners[(o, a)]:
                found.append(f"attempt {a} of {o} settled by {claimant}, not its claimant")


def _running_max(values: list[int]) -> list[int]:
    """The highest of `values[: i + 1]`, for each i."""
    highest, best = [], 0
    for value in values:
        best = max(best, value)
        highest.append(best)
    return highest


def drain(world: World) -> int:
    """Run every lease out, then claim, start and settle until nothing is active; answers
    how many occurrences never got there (0: none lost)."""
    ledger = world.ledger
    for _ in range(100):
        active = _active(ledger)
        if not active:
            return 0
        for occurrence_id in active:
            expire(ledger, occurrence_id)
        claimant = world.claimant()
        for occurrence in ledger.attempts.claim(claimant, len(active), LEASE).leased:
            spec = world.specs[occurrence.channel_id]
            started = start_attempt(ledger, occurrence, claimant, 1, spec, LEASE, wait_secs=0.0)
            if started.outcome in ("started", "singleton_busy"):
                settle(
                    ledger,
                    occurrence.id,
                    claimant,
                    COMPLETED if started.started else SKIPPED_SINGLETON,
                    fencing_token=started.fencing_token,
                    release_held=started.fencing_token is None,
                )
    return len(_active(ledger))


def _active(ledger: Ledger) -> list[str]:
    with ledger.engine.connect() as conn:
        return list(
            conn.execute(
                sa.select(occurrences.c.id).where(occurrences.c.status.in_(ACTIVE_STATUSES))
            ).scalars()
        )


def main() -> None:
    with scratch_database("protocol") as url:
        ledger = Ledger.connect(url)
        ledger.migrate()
        specs: dict[str, SingletonSpec | None] = {}
        for n, (key, (slots, policy)) in enumerate(SHAPES.items()):
            channel = active_channel(ledger, f"bench-{n}")
            specs[channel.channel_id] = (
                None if key is None else SingletonSpec(key, slots, policy)  # type: ignore[arg-type]
            )
        world = World(ledger, specs, ledger.db_now() - timedelta(days=1))
        world.add(FIRST_OCCURRENCES)
        actors = [Actor(world, n, -(-STEPS // THREADS)) for n in range(THREADS)]
        tokens: dict[tuple[str, int], int] = {}
        checks = 0
        began = time.perf_counter()
        for actor in actors:
            actor.start()
        while any(actor.is_alive() for actor in actors):
            check_rows(world, tokens)
            checks += 1
            time.sleep(CHECK_EVERY_SECS)
        elapsed = time.perf_counter() - began
        check_rows(world, tokens)
        errors = [a.error for a in actors if a.error is not None]
        if errors:
            raise errors[0]
        check_actors(actors, world.violations)
        lost = drain(world)
        if lost:
            world.violations.append(f"{lost} occurrences never reached a terminal status")
        with ledger.engine.connect() as conn:
            rows = conn.execute(sa.select(sa.func.count()).select_from(occurrences)).scalar_one()
            terminal = conn.execute(
                sa.select(sa.func.count()).where(occurrences.c.status.in_(TERMINAL_STATUSES))
            ).scalar_one()
        if rows != len(world.ids) or terminal != rows:
            world.violations.append(f"{rows} rows, {terminal} terminal, {len(world.ids)} made")
        ledger.dispose()
    steps = sum(a.steps for a in actors)
    outcomes = Counter[str]()
    for actor in actors:
        outcomes.update(actor.outcomes)
    told = sum(len(a.told) for a in actors)
    writes = sum(len(a.wrote) for a in actors)
    print(f"protocol run, {THREADS} threads, {len(SHAPES)} keys, PostgreSQL:", flush=True)
    print(f"  steps: {steps:,} in {elapsed:.1f} s, {steps / elapsed:,.0f} steps/s")
    print(f"  occurrences: {len(world.ids):,}; row checks while running: {checks}")
    print(f"  answers: {', '.join(f'{k} {v:,}' for k, v in sorted(outcomes.items()))}")
    print(f"  tokens told: {told:,}; writes under a token checked: {writes:,}")
    print(f"  violations: {len(world.violations)}")
    for violation in world.violations[:20]:
        print(f"    {violation}")
    if world.violations:
        sys.exit(1)


if __name__ == "__main__":
    main()
