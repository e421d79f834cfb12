"""What each service needs of the ledger, and nothing more.

`claim`, `execute` and `reconcile` each take one of these `Protocol`s rather than the whole
`Ledger`: a port names the stores a service reaches (`ledger.attempts`, …) and, of each,
only the methods it calls, so a reader sees at a glance which writes a service can make,
and a test can hand it an in-memory ledger (tests/fake_ledger.py) that implements the port
alone. `Ledger` satisfies every port: mypy checks it below, so a signature that drifts
fails the type check.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

from cronledger.ledger.attempts import SettleRequest, StartRequest
from cronledger.ledger.cursors import READ_PAGE, CursorWrites, NotedChange
from cronledger.ledger.misfires import Judgment
from cronledger.ledger.models import (
    AttemptStart,
    Backlog,
    ClaimResult,
    CursorMove,
    Event,
    MisfireRule,
    NewOccurrence,
    Occurrence,
    OpenedAttempt,
    Outbox,
    ScheduleWork,
)
from cronledger.ledger.shards import WHOLE, Shard

if TYPE_CHECKING:
    from cronledger.ledger import Ledger


class Clocked(Protocol):
    def db_now(self) -> datetime:
        """The database's clock; also a loop's probe for a database that was away."""
        ...


class Heartbeat(Protocol):
    def record_job_ok(self, job: str) -> None: ...


class ClaimReads(Heartbeat, Protocol):
    def in_flight_count(self, at_most: int | None = None) -> int: ...

    def seconds_until_next_due(self) -> float | None: ...


class ClaimWrites(Protocol):
    def claim(self, claimant: str, limit: int, lease_secs: float) -> ClaimResult: ...

    def release_claim(self, occurrence_id: str, claimant: str) -> bool: ...


class ClaimPort(Clocked, Protocol):
    """What the claim loop asks: room, the claim itself, handing a lease back, when next."""

    @property
    def attempts(self) -> ClaimWrites: ...

    @property
    def reporting(self) -> ClaimReads: ...


class AttemptWrites(Protocol):
    """What an executor writes, each call conditional on the claimant (and token); a lone
    attempt's open, start and settle are a batch of one, answered as it would be alone."""

    def open_attempts(
        self,
        occurrence_ids: Sequence[str],
        claimant: str,
        lease_secs: float,
        trace_id: str,
        *,
        misfire_grace_secs: float,
    ) -> dict[str, OpenedAttempt]: ...

    def start_attempts(
        self,
        requests: Sequence[StartRequest],
        claimant: str,
        lease_secs: float,
        *,
        trace_id: str | None = None,
        wait_secs: float = 1.0,
    ) -> list[AttemptStart]: ...

    def release_claim(
        self, occurrence_id: str, claimant: str, due_in: float | None = None
    ) -> bool: ...

    def renew(
        self, occurrence_id: str, claimant: str, fencing_token: int | None, lease_secs: float
    ) -> bool: ...

    def settle_many(self, requests: Sequence[SettleRequest]) -> list[bool]: ...


class MisfireJudge(Protocol):
    def judge_misfires(
        self, occurrence_id: str, claimant: str, channel_id: str, rule: MisfireRule
    ) -> Judgment: ...


class OccurrenceReads(Protocol):
    def get_occurrence(self, occurrence_id: str) -> Occurrence: ...


class AttemptPort(Protocol):
    """What an executor reads and writes: its attempt's row, and the misfire judgment."""

    @property
    def attempts(self) -> AttemptWrites: ...

    @property
    def misfires(self) -> MisfireJudge: ...

    @property
    def occurrences(self) -> OccurrenceReads: ...


class OutboxEvents(Protocol):
    def detect_overdue(self) -> list[Event]: ...

    def take_outbox(self, limit: int = ...) -> list[Event]: ...

    def mark_delivered(self, event_ids: Iterable[str]) -> int: ...

    def mark_undelivered(self, failures: dict[str, str]) -> None: ...

    def outbox(self) -> Outbox: ...

    def delete_events_older_than(self, hours: float) -> int: ...


class OutboxPort(Protocol):
    """What delivering events takes: the outbox, marks of what was sent, overdue detection."""

    @property
    def events(self) -> OutboxEvents: ...


class ReconcileCursors(Protocol):
    def noted_changes(
        self, shard: Shard = WHOLE, *, after: str | None = None, limit: int = READ_PAGE
    ) -> list[NotedChange]: ...

    def due_cursors(
        self,
        horizon: datetime,
        shard: Shard = WHOLE,
        *,
        after: tuple[datetime, str] | None = None,
        limit: int = READ_PAGE,
    ) -> list[ScheduleWork]: ...

    def due_count(self, lookahead_secs: float, *, bound: int) -> int: ...

    def write_cursors(self, writes: CursorWrites) -> None: ...

    def note_drifted_channels(self) -> int: ...


class ReconcileOccurrences(Protocol):
    def materialise(
        self, rows: Iterable[NewOccurrence], moves: Iterable[CursorMove]
    ) -> tuple[int, set[str]]: ...

    def delete_terminal_older_than(self, hours: float, *, until: float | None = None) -> int: ...


class ReconcileReads(Heartbeat, Protocol):
    def backlog(self) -> Backlog: ...


class ReconcilePort(Clocked, OutboxPort, Protocol):
    """What a reconcile pass and its housekeeping read and write: the work, the cursors,
    the rows materialised with their cursor moves, the backlog, retention; and the outbox,
    which a reconcile loop sweeps where no other thread does."""

    @property
    def cursors(self) -> ReconcileCursors: ...

    @property
    def occurrences(self) -> ReconcileOccurrences: ...

    @property
    def reporting(self) -> ReconcileReads: ...


if TYPE_CHECKING:

    def _ledger_serves_every_port(ledger: Ledger) -> tuple[ClaimPort, AttemptPort, ReconcilePort]:
        """Never called: mypy fails here if `Ledger` stops satisfying a port."""
        return ledger, ledger, ledger
