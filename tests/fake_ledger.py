"""An in-memory ledger for the claim and attempt ports, and a clock that never sleeps.

`FakeLedger` implements `cronledger.ports.ClaimPort` and `AttemptPort` (plus the seeding and
reading a test needs) over dicts, with the real stores' rules: a claim leases due `pending`
rows and expired leases oldest due first, settles an expired lease on its last attempt
`failed`; a start takes a free slot of its key under the slot's next fencing token; every
write is conditional on the claimant (and token). It keeps no events, no attempt log and no
misfire judgment, and of the overlap policies only `allow` and `forbid` (`NotImplementedError`
says so). tests/ledger/test_claim_port.py and test_attempt_port.py run the same behavioural
tests against it, SQLite and PostgreSQL, so it cannot drift from them.

`FakeClock` is a `pacing.Clock` whose waits move its time on instead of sleeping; the fake
ledger's database clock is the same time, so a loop's pacing runs in microseconds and
exactly.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from cronledger.errors import NotFound
from cronledger.ledger import (
    CHANNEL_ACTIVE,
    CLAIMED,
    COMPLETED,
    FAILED,
    LEASED_STATUSES,
    PENDING,
    RUNNING,
    AttemptStart,
    Channel,
    ClaimResult,
    DatabaseUnavailable,
    MisfireRule,
    NewOccurrence,
    Occurrence,
    OpenedAttempt,
)
from cronledger.ledger.attempts import SettleRequest, StartRequest
from cronledger.ledger.misfires import Judgment
from cronledger.ledger.models import TRIGGER_CRON
from cronledger.pacing import Clock

if TYPE_CHECKING:
    from cronledger.ports import AttemptPort, ClaimPort

#: The fake database's clock at monotonic 0.
EPOCH = datetime(2030, 1, 1, tzinfo=UTC)
#: The least a wait moves the clock on: the database clock's resolution. Real time passes
#: during any wait; a loop waiting zero seconds for a row to come due would otherwise spin
#: at one instant forever.
RESOLUTION_SECS = 1e-6


@dataclass
class FakeClock:
    """Monotonic time that moves only when a test (`advance`) or a wait moves it. A wait
    on an event that is set answers at once, as `threading.Event.wait` does."""

    now: float = 1_000.0
    #: Every wait asked for, in seconds, in order.
    waits: list[float] = field(default_factory=list)
    #: Called with the new time after each wait: a test's way to act "meanwhile".
    on_wait: Callable[[float], None] | None = None

    def monotonic(self) -> float:
        return self.now

    def wait(self, event: threading.Event, secs: float) -> bool:
        if event.is_set():
            return True
        self.waits.append(secs)
        self.advance(max(secs, RESOLUTION_SECS))
        if self.on_wait is not None:
            self.on_wait(self.now)
        return event.is_set()

    def advance(self, secs: float) -> None:
        self.now += max(0.0, secs)

    @property
    def clock(self) -> Clock:
        return Clock(monotonic=self.monotonic, wait=self.wait)


class FakeLedger:
    """The claim port in memory. `calls` lists every port call served, by name, with the
    clock's time; `down`, while true, makes every port call fail as a lost database does,
    and `failed` lists each that failed, by name, with the clock's time."""

    def __init__(self, clock: FakeClock | None = None) -> None:
        self.time = clock or FakeClock()
        self.rows: dict[str, Occurrence] = {}
        self.channels: dict[str, Channel] = {}
        #: (key, slot) → [holder occurrence, holder claimant, fencing token, lease until]
        self.slots: dict[tuple[str, int], list[object]] = {}
        self.heartbeats: dict[str, datetime] = {}
        self.calls: list[tuple[str, float]] = []
        self.failed: list[tuple[str, float]] = []
        self.down = False
        # One object serves as every store the port and the tests reach.
        self.attempts = self.reporting = self.occurrences = self.misfires = self

    # -- the port --------------------------------------------------------------------------

    def db_now(self) -> datetime:
        self._call("db_now")
        return self._now()

    def in_flight_count(self, at_most: int | None = None) -> int:
        self._call("in_flight_count")
        now = self._now()
        live = sum(1 for o in self.rows.values() if _lease_live(o, now))
        return live if at_most is None else min(live, at_most)

    def claim(self, claimant: str, limit: int, lease_secs: float) -> ClaimResult:
        self._call("claim")
        if limit <= 0:
            return ClaimResult([], [])
        now = self._now()
        due = [o for o in self.rows.values() if o.status == PENDING and o.due_at <= now]
        expired = [o for o in self.rows.values() if _lease_ran_out(o, now)]
        chosen = sorted(due + expired, key=lambda o: o.due_at)[:limit]
        found = [self._lease(o, claimant, lease_secs, now) for o in chosen]
        leased = sorted(
            (o for o in found if o.status == CLAIMED),
            key=lambda o: (o.due_at, o.scheduled_for, o.id),
        )
        abandoned = sorted(
            (o for o in found if o.status != CLAIMED),
            key=lambda o: (o.channel_id, o.scheduled_for),
        )
        return ClaimResult(leased, abandoned)

    def release_claim(self, occurrence_id: str, claimant: str, due_in: float | None = None) -> bool:
        self._call("release_claim")
        if due_in is None:
            return self._hand_back(occurrence_id, claimant)
        due_at = self._now() + timedelta(seconds=due_in)
        return self._hand_back(occurrence_id, claimant, due_at=due_at, misfire_judged=True)

    def seconds_until_next_due(self) -> float | None:
        self._call("seconds_until_next_due")
        pending = [o.due_at for o in self.rows.values() if o.status == PENDING]
        expiries = [o.claimed_until for o in self.rows.values() if _leased(o)]
        candidates = [at for at in [*pending, *expiries] if at is not None]
        if not candidates:
            return None
        return max((min(candidates) - self._now()).total_seconds(), 0.0)

    def record_job_ok(self, job: str) -> None:
        self._call("record_job_ok")
        self.heartbeats[job] = self._now()

    # -- the attempt port ------------------------------------------------------------------

    def open_attempt(
        self,
        occurrence_id: str,
        claimant: str,
        lease_secs: float,
        trace_id: str,
        *,
        misfire_grace_secs: float,
    ) -> OpenedAttempt:
        """As the real one reads it; the start it makes in the read (PostgreSQL's) is left
        to `start_attempts`, which the executor then calls (SQLite's way)."""
        self._call("open_attempt")
        found = self.rows.get(occurrence_id)
        if found is None:
            raise NotFound(f"occurrence {occurrence_id} not found")
        late = (
            found.trigger == TRIGGER_CRON
            and not found.misfire_judged
            and found.due_at < self._now() - timedelta(seconds=misfire_grace_secs)
        )
        return OpenedAttempt(found, self.channels.get(found.channel_id), None, late)

    def open_attempts(
        self,
        occurrence_ids: Sequence[str],
        claimant: str,
        lease_secs: float,
        trace_id: str,
        *,
        misfire_grace_secs: float,
    ) -> dict[str, OpenedAttempt]:
        opened = {}
        for occurrence_id in occurrence_ids:
            if occurrence_id in self.rows:
                opened[occurrence_id] = self.open_attempt(
                    occurrence_id,
                    claimant,
                    lease_secs,
                    trace_id,
                    misfire_grace_secs=misfire_grace_secs,
                )
        return opened

    def judge_misfires(
        self, occurrence_id: str, claimant: str, channel_id: str, rule: MisfireRule
    ) -> Judgment:
        raise NotImplementedError("the fake ledger does not judge misfires")

    def start_attempts(
        self,
        requests: Sequence[StartRequest],
        claimant: str,
        lease_secs: float,
        *,
        trace_id: str | None = None,
        wait_secs: float = 1.0,
    ) -> list[AttemptStart]:
        self._call("start_attempts")
        return [self._start(r, claimant, lease_secs, trace_id) for r in requests]

    def renew(
        self, occurrence_id: str, claimant: str, fencing_token: int | None, lease_secs: float
    ) -> bool:
        self._call("renew")
        found = self.rows.get(occurrence_id)
        if found is None or found.status != RUNNING or found.claimed_by != claimant:
            return False
        until = self._now() + timedelta(seconds=lease_secs)
        if fencing_token is not None:
            held = self._held(occurrence_id, claimant, fencing_token)
            if held is None:
                return False
            held[3] = until
        self._write(found, claimed_until=until)
        return True

    def settle_many(self, requests: Sequence[SettleRequest]) -> list[bool]:
        self._call("settle_many")
        return [self._settle(request) for request in requests]

    # -- seeding and reading, as the real ledger offers them -------------------------------

    def add_channel(self, name: str, config: dict[str, object]) -> Channel:
        """An active channel at version 1, as `ChannelStore.create_channel` makes it."""
        now = self._now()
        channel = Channel(f"ch-{name}", name, CHANNEL_ACTIVE, 1, config, {}, 1000, now, now)
        self.channels[channel.channel_id] = channel
        return channel

    def insert_occurrences(self, rows: Iterable[NewOccurrence]) -> int:
        taken = {(o.channel_id, o.scheduled_for) for o in self.rows.values()}
        inserted = 0
        for new in rows:
            if (new.channel_id, new.scheduled_for) in taken:
                continue
            taken.add((new.channel_id, new.scheduled_for))
            self.rows[new.id] = _occurrence(new, self._now())
            inserted += 1
        return inserted

    def insert_occurrence(self, row: NewOccurrence) -> bool:
        return self.insert_occurrences([row]) == 1

    def get_occurrence(self, occurrence_id: str) -> Occurrence:
        return self.rows[occurrence_id]

    def job_heartbeats(self) -> dict[str, datetime]:
        return dict(self.heartbeats)

    def expire_lease(self, occurrence_id: str) -> None:
        """Time travel, as tests/ledger/helpers.expire_claim writes it: the lease ran out an
        hour ago."""
        self._write(self.rows[occurrence_id], claimed_until=self._now() - timedelta(hours=1))

    # -- inside ----------------------------------------------------------------------------

    def _now(self) -> datetime:
        return EPOCH + timedelta(seconds=self.time.monotonic())

    def _call(self, name: str) -> None:
        if self.down:
            self.failed.append((name, self.time.now))
            raise DatabaseUnavailable("connection refused")
        self.calls.append((name, self.time.now))

    def _hand_back(self, occurrence_id: str, claimant: str, **values: object) -> bool:
        """claimed → pending, its attempt given back, if `claimant` holds the claim."""
        found = self.rows.get(occurrence_id)
        if found is None or found.status != CLAIMED or found.claimed_by != claimant:
            return False
        attempt = found.attempt - 1
        self._write(
            found, status=PENDING, claimed_by=None, claimed_until=None, attempt=attempt, **values
        )
        return True

    def _start(
        self, request: StartRequest, claimant: str, lease_secs: float, trace_id: str | None
    ) -> AttemptStart:
        occurrence_id = (
            request.occurrence if isinstance(request.occurrence, str) else request.occurrence.id
        )
        found = self.rows.get(occurrence_id)
        if found is None or found.status != CLAIMED or found.claimed_by != claimant:
            return AttemptStart("lost")
        now = self._now()
        until = now + timedelta(seconds=lease_secs)
        spec = request.singleton
        slot: int | None = None
        token: int | None = None
        self._release_slots_of(occurrence_id)
        if spec is not None:
            if spec.policy != "forbid":
                raise NotImplementedError(f"the fake ledger holds no {spec.policy!r} keys")
            free = [n for n in range(spec.slots) if not self._slot_live((spec.key, n), now)]
            held = sum(
                1
                for (key, n), _ in self.slots.items()
                if key == spec.key and n >= 0 and self._slot_live((key, n), now)
            )
            if not free or held >= spec.slots:
                return AttemptStart("singleton_busy")
            slot = free[0]
            row = self.slots.setdefault((spec.key, slot), [None, None, 0, None])
            token = int(row[2]) + 1  # type: ignore[call-overload]
            row[:] = [occurrence_id, claimant, token, until]
        self._write(
            found,
            status=RUNNING,
            started_at=now,
            claimed_until=until,
            misfire_judged=True,
            executing_version=request.executing_version,
            singleton_key=spec.key if spec else None,
            singleton_slot=slot,
            fencing_token=token,
            trace_id=trace_id or found.trace_id,
            max_attempts=request.max_attempts or found.max_attempts,
        )
        return AttemptStart("started", fencing_token=token, slot=slot, started_at=now)

    def _settle(self, request: SettleRequest) -> bool:
        found = self.rows.get(request.occurrence_id)
        if (
            found is None
            or found.status not in LEASED_STATUSES
            or found.claimed_by != request.claimant
        ):
            return False
        if request.fencing_token is not None:
            held = self._held(request.occurrence_id, request.claimant, request.fencing_token)
            if held is None:
                return False
            held[:] = [None, None, held[2], None]
        elif request.release_held:
            self._release_slots_of(request.occurrence_id)
        now = self._now()
        ended = {"error_message": request.error_message, "result": request.result}
        if request.retry_in is not None:
            self._write(
                found,
                status=PENDING,
                claimed_by=None,
                claimed_until=None,
                due_at=now + timedelta(seconds=request.retry_in),
                singleton_key=None,
                singleton_slot=None,
                fencing_token=None,
                started_at=None,
                completed_at=None,
                **ended,
            )
        else:
            overdue = None if request.status == COMPLETED else found.overdue_at
            self._write(
                found,
                status=request.status,
                claimed_until=None,
                completed_at=now,
                overdue_at=overdue,
                **ended,
            )
        return True

    def _held(self, occurrence_id: str, claimant: str, token: int) -> list[object] | None:
        """The slot row this holder holds for the occurrence under `token`, if it still does."""
        for row in self.slots.values():
            if row[0] == occurrence_id and row[1] == claimant and row[2] == token:
                return row
        return None

    def _slot_live(self, at: tuple[str, int], now: datetime) -> bool:
        row = self.slots.get(at)
        return row is not None and row[0] is not None and row[3] is not None and row[3] >= now  # type: ignore[operator]

    def _release_slots_of(self, occurrence_id: str) -> None:
        for row in self.slots.values():
            if row[0] == occurrence_id:
                row[:] = [None, None, row[2], None]

    def _lease(
        self, found: Occurrence, claimant: str, lease_secs: float, now: datetime
    ) -> Occurrence:
        if found.status == PENDING or found.attempt < found.max_attempts:
            return self._write(
                found,
                status=CLAIMED,
                claimed_by=claimant,
                claimed_until=now + timedelta(seconds=lease_secs),
                attempt=found.attempt + 1,
                completed_at=None,
            )
        unit = "attempt" if found.attempt == 1 else "attempts"
        last = "" if found.error_message is None else f"; last error: {found.error_message}"
        return self._write(
            found,
            status=FAILED,
            claimed_until=None,
            error_message=f"abandoned: lease expired after {found.attempt} {unit}{last}",
            completed_at=now,
        )

    def _write(self, found: Occurrence, **values: object) -> Occurrence:
        written = replace(found, updated_at=self._now(), **values)  # type: ignore[arg-type]
        self.rows[found.id] = written
        return written


def _leased(occurrence: Occurrence) -> bool:
    return occurrence.status in LEASED_STATUSES


def _lease_live(occurrence: Occurrence, now: datetime) -> bool:
    """Leased, under a lease that has not run out."""
    until = occurrence.claimed_until
    return _leased(occurrence) and until is not None and until >= now


def _lease_ran_out(occurrence: Occurrence, now: datetime) -> bool:
    """Leased, under a lease that has run out: claimable again."""
    until = occurrence.claimed_until
    return _leased(occurrence) and until is not None and until < now


def _occurrence(new: NewOccurrence, now: datetime) -> Occurrence:
    return Occurrence(
        id=new.id,
        channel_id=new.channel_id,
        channel_name=new.channel_name,
        channel_version=new.channel_version,
        executing_version=None,
        target_ref=new.target_ref,
        trigger=new.trigger,
        scheduled_for=new.scheduled_for,
        status=new.status,
        attempt=0,
        claimed_by=None,
        claimed_until=None,
        singleton_key=None,
        singleton_slot=None,
        fencing_token=None,
        trace_id=None,
        error_message=new.error_message,
        result=None,
        started_at=None,
        completed_at=None,
        created_at=now,
        updated_at=now,
        due_at=new.due,
        max_attempts=new.max_attempts,
        misfire_judged=False,
        overdue_at=new.overdue_at,
        waits_for_key=new.waits_for_key,
    )


if TYPE_CHECKING:

    def _fake_serves_the_ports(fake: FakeLedger) -> tuple[ClaimPort, AttemptPort]:
        """Never called: mypy (pyproject's `files`) fails here if the fake leaves a port."""
        return fake, fake
