"""An in-memory ledger for the claim port, and a clock that never sleeps.

`FakeLedger` implements `cronledger.ports.ClaimPort` (plus the seeding and reading a test
needs) over a dict, with the real stores' rules: a claim leases due `pending` rows and
expired leases oldest due first, settles an expired lease on its last attempt `failed`, and
every write is conditional on the claimant. tests/ledger/test_claim_port.py runs the same
behavioural tests against it, SQLite and PostgreSQL, so it cannot drift from them.

`FakeClock` is a `pacing.Clock` whose waits move its time on instead of sleeping; the fake
ledger's database clock is the same time, so a loop's pacing runs in microseconds and
exactly.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from cronledger.ledger import (
    CLAIMED,
    FAILED,
    LEASED_STATUSES,
    PENDING,
    ClaimResult,
    DatabaseUnavailable,
    NewOccurrence,
    Occurrence,
)
from cronledger.pacing import Clock

if TYPE_CHECKING:
    from cronledger.ports import ClaimPort

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
        self.heartbeats: dict[str, datetime] = {}
        self.calls: list[tuple[str, float]] = []
        self.failed: list[tuple[str, float]] = []
        self.down = False
        # One object serves as every store the port and the tests reach.
        self.attempts = self.reporting = self.occurrences = self

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

    def release_claim(self, occurrence_id: str, claimant: str) -> bool:
        self._call("release_claim")
        found = self.rows.get(occurrence_id)
        if found is None or found.status != CLAIMED or found.claimed_by != claimant:
            return False
        self._write(
            found,
            status=PENDING,
            claimed_by=None,
            claimed_until=None,
            attempt=found.attempt - 1,
        )
        return True

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

    # -- seeding and reading, as the real ledger offers them -------------------------------

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

    def _fake_serves_the_claim_port(fake: FakeLedger) -> ClaimPort:
        """Never called: mypy (pyproject's `files`) fails here if the fake leaves the port."""
        return fake
