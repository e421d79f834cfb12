"""What the ledger hands out and takes in: frozen values with aware-UTC datetimes. Statuses
and triggers are plain strings, as on the wire (open strings) and in the queries' literals."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Generic, Literal, NamedTuple, TypeVar

from cronledger.errors import CronledgerError
from cronledger.ids import new_occurrence_id
from cronledger.retry import DEFAULT_MAX_ATTEMPTS

PENDING = "pending"
CLAIMED = "claimed"
RUNNING = "running"
COMPLETED = "completed"
FAILED = "failed"
CANCELLED = "cancelled"
SKIPPED_MISFIRE = "skipped_misfire"
SKIPPED_SINGLETON = "skipped_singleton"

ACTIVE_STATUSES = (PENDING, CLAIMED, RUNNING)
#: Statuses that hold a claim (and possibly a singleton slot).
LEASED_STATUSES = (CLAIMED, RUNNING)
TERMINAL_STATUSES = (COMPLETED, FAILED, CANCELLED, SKIPPED_MISFIRE, SKIPPED_SINGLETON)
OCCURRENCE_STATUSES = (*ACTIVE_STATUSES, *TERMINAL_STATUSES)
#: Ended without doing its work (not `completed`: running that again is a new occurrence).
RETRYABLE_STATUSES = (FAILED, CANCELLED, SKIPPED_MISFIRE, SKIPPED_SINGLETON)
SETTLED_STATUSES = (COMPLETED, FAILED, SKIPPED_SINGLETON)

TRIGGER_CRON = "cron"
TRIGGER_MANUAL = "manual"
TRIGGER_BACKFILL = "backfill"
TRIGGERS = (TRIGGER_CRON, TRIGGER_MANUAL, TRIGGER_BACKFILL)

CHANNEL_DRAFT = "draft"
CHANNEL_ACTIVE = "active"
CHANNEL_PAUSED = "paused"
CHANNEL_ARCHIVED = "archived"

T = TypeVar("T")


class DatabaseUnavailable(CronledgerError):
    """The database could not be reached or dropped the connection: never an empty answer,
    so "nothing is due" and "cannot tell" differ."""


class DeadlineReached(CronledgerError):
    """Work given a deadline stopped at it (not `DatabaseUnavailable`: a retry cannot help)."""


#: How an attempt ended when its lease ran out without a settle (its executor died).
ABANDONED = "abandoned"


@dataclass(frozen=True, slots=True)
class Attempt:
    """One row of `cron_attempts`: one attempt of an occurrence, from start to end."""

    occurrence_id: str
    number: int
    claimant: str
    started_at: datetime
    ended_at: datetime | None
    #: A settled status, or `abandoned` (its lease ran out unsettled); None while it runs.
    outcome: str | None
    error_message: str | None
    error_detail: str | None  # the traceback's last frames, when a Python target raised
    fencing_token: int | None

    @property
    def duration_ms(self) -> int | None:
        """Derived from its start and end, so it cannot disagree with them."""
        if self.ended_at is None:
            return None
        return round((self.ended_at - self.started_at).total_seconds() * 1000)


@dataclass(frozen=True, slots=True)
class Occurrence:
    """One row of `cron_occurrences`: one scheduled instant (or manual/backfill run)."""

    id: str
    channel_id: str
    channel_name: str
    channel_version: int
    executing_version: int | None
    target_ref: str | None
    trigger: str
    scheduled_for: datetime
    status: str
    attempt: int
    claimed_by: str | None
    claimed_until: datetime | None
    singleton_key: str | None
    singleton_slot: int | None
    fencing_token: int | None
    trace_id: str | None
    error_message: str | None
    result: str | None
    started_at: datetime | None
    completed_at: datetime | None
    created_at: datetime
    updated_at: datetime
    #: When it becomes claimable (`scheduled_for` plus jitter, or a retry's backoff), and
    #: what lateness is measured from; identity stays `scheduled_for`.
    due_at: datetime
    #: Attempts it gets in all; an abandoned attempt at this count is settled `failed`.
    max_attempts: int
    #: The misfire rule no longer applies (it started once, was kept, or is a retry or a
    #: queued contender).
    misfire_judged: bool
    #: Overdue if not completed by then; cleared on completion, cancel or its one event.
    overdue_at: datetime | None = None
    #: A backfill row that waits for its busy concurrency key instead of being skipped.
    waits_for_key: bool | None = None

    @property
    def allowed_attempts(self) -> int:
        """As shown: never fewer than it made (a start refreshes `max_attempts` from the
        policy after a manual retry raised it)."""
        return max(self.max_attempts, self.attempt)


@dataclass(frozen=True, slots=True)
class NewOccurrence:
    """An occurrence to materialise, with a fresh id; a duplicate `(channel_id,
    scheduled_for)` loses to the row already there."""

    channel_id: str
    channel_name: str
    channel_version: int
    scheduled_for: datetime
    trigger: str = TRIGGER_CRON
    status: str = PENDING  # or a terminal status (`skipped_misfire`) for a record
    error_message: str | None = None
    target_ref: str | None = None
    due_at: datetime | None = None  # None: claimable at `scheduled_for`
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    overdue_after_secs: int | None = None  # the channel's, counted from `due`
    #: A misfire summary's count of the instants it stands for, and the oldest of them.
    skipped_count: int | None = None
    skipped_oldest: datetime | None = None
    waits_for_key: bool | None = None
    id: str = field(default_factory=new_occurrence_id)

    @property
    def due(self) -> datetime:
        return self.scheduled_for if self.due_at is None else self.due_at

    @property
    def overdue_at(self) -> datetime | None:
        if self.overdue_after_secs is None:
            return None
        return self.due + timedelta(seconds=self.overdue_after_secs)

    @classmethod
    def of(
        cls, channel: Channel | DueChannel, at: datetime, target_ref: str | None, **fields: Any
    ) -> NewOccurrence:
        """A row of `channel` (as it is now: its name and version) at `at`."""
        return cls(
            channel.channel_id, channel.name, channel.version, at, target_ref=target_ref, **fields
        )


@dataclass(frozen=True, slots=True)
class ScheduleState:
    """A channel's cursor: `next_fire_at` is the next instant not yet materialised (None:
    the schedule has no instants left, the cursor is parked)."""

    channel_id: str
    channel_version: int
    config_hash: str
    next_fire_at: datetime | None
    paused_at: datetime | None
    updated_at: datetime


class CursorMove(NamedTuple):
    """A cursor move a pass planned, from `from_` to `to` (None parks it). The compare-and-set
    checks `config_hash` too: an edit may reset the cursor to the instant a stale plan read."""

    channel_id: str
    from_: datetime
    to: datetime | None
    config_hash: str


@dataclass(frozen=True, slots=True)
class DueChannel:
    """What a reconcile pass reads of an active channel; the schedule document stays JSON
    text, parsed only for a version this process has not compiled."""

    channel_id: str
    name: str
    version: int
    target: dict[str, Any]
    transport_config_json: str

    @property
    def transport_config(self) -> dict[str, Any]:
        parsed: dict[str, Any] = json.loads(self.transport_config_json)
        return parsed


@dataclass(frozen=True, slots=True)
class ScheduleWork:
    """A channel a reconcile pass looks at: `channel` None when gone or not active (pause
    the cursor), `state` None when it has no cursor yet (initialise it)."""

    channel_id: str
    channel: DueChannel | None
    state: ScheduleState | None


@dataclass(frozen=True, slots=True)
class SingletonSpec:
    """At most `slots` holders of `key` at once; when all are held a contender gives up
    (`forbid`), waits, one per key (`queue_one`), or replaces the oldest holder (`replace`)."""

    key: str
    slots: int = 1
    policy: Literal["forbid", "queue_one", "replace"] = "forbid"


@dataclass(frozen=True, slots=True)
class AttemptStart:
    """What a start decided. `started`: running since `started_at`, holding `slot`
    under `fencing_token` if keyed (`replaced`: the holder it cancelled). `singleton_busy`:
    every slot held (under `queue_one`, a contender waits already); nothing written.
    `waiting`: the key's one contender, pending again after `wait_secs`, its attempt given
    back. `lost`: no longer this claimant's; nothing written."""

    outcome: Literal["started", "singleton_busy", "waiting", "lost"]
    fencing_token: int | None = None
    slot: int | None = None
    started_at: datetime | None = None
    replaced: str | None = None

    @property
    def started(self) -> bool:
        return self.outcome == "started"


@dataclass(frozen=True, slots=True)
class ClaimResult:
    """The occurrences one claim leased (oldest due first), and those it settled `failed`
    instead: their lease had expired on their last allowed attempt."""

    leased: list[Occurrence]
    abandoned: list[Occurrence]


@dataclass(frozen=True, slots=True)
class MisfireRule:
    """A channel's misfire policy (docs/guarantees.md#misfire-at-start): a cron row not
    started within `grace_secs` of due is late; of `count` late rows (oldest first), the
    positions `keep(count)` still run."""

    policy: str
    grace_secs: float
    keep: Callable[[int], range]


@dataclass(frozen=True, slots=True)
class OpenedAttempt:
    """What an executor reads first: the occurrence, its channel now (None: deleted), the
    start if the read made it, and whether the misfire rule must judge it first."""

    occurrence: Occurrence
    channel: Channel | None
    start: AttemptStart | None
    misfire_due: bool


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    """A page: more than `total` rows match unless `total_is_exact`; `next` is the next
    page's `after` (None on the last)."""

    data: list[T]
    total: int
    limit: int
    offset: int
    next: str | None = None
    total_is_exact: bool = True


@dataclass(frozen=True, slots=True)
class PageRequest:
    """Which page: below the key `after` (the `next` of the page before), or at `offset`
    rows in; `exact_total` counts every matching row however many there are."""

    limit: int = 50
    offset: int = 0
    after: str | None = None
    exact_total: bool = False


@dataclass(frozen=True, slots=True)
class OccurrenceFilter(PageRequest):
    """`since` and `until` bound `scheduled_for`, inclusive."""

    channel_id: str | None = None
    status: str | None = None
    trigger: str | None = None
    since: datetime | None = None
    until: datetime | None = None


@dataclass(frozen=True, slots=True)
class Event:
    """One row of `cron_events`: `document` as a receiver gets it; `sequence` None for an
    event listed but not delivered (not in `alerts.on`)."""

    event_id: str
    channel_id: str
    sequence: int | None
    kind: str
    at: datetime
    occurrence_id: str | None
    document: dict[str, Any]
    send_attempts: int = 0
    last_error: str | None = None
    delivered_at: datetime | None = None

    @property
    def deliver(self) -> bool:
        return self.sequence is not None


@dataclass(frozen=True, slots=True)
class EventFilter:
    """`since` bounds `at` (inclusive); `after` is a page's `next`."""

    channel_id: str | None = None
    kind: str | None = None
    since: datetime | None = None
    after: str | None = None
    limit: int = 50


@dataclass(frozen=True, slots=True)
class EventPage:
    data: list[Event]
    limit: int
    next: str | None  # the next page's `after`; None on the last


@dataclass(frozen=True, slots=True)
class Outbox:
    """Events still to deliver, at the database's clock."""

    undelivered: int
    oldest_age_secs: float | None


@dataclass(frozen=True, slots=True)
class Channel:
    """A schedule definition at one version, stored as the API validated it."""

    channel_id: str
    name: str
    status: str
    version: int
    transport_config: dict[str, Any]
    target: dict[str, Any]
    timeout_ms: int
    created_at: datetime
    updated_at: datetime
    status_reason: str | None = None  # as the operator said (a pause's reason)
    #: Part of the version, never of the scheduling hash (`cronledger.labels`).
    labels: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ChannelActivity:
    """What the status view shows of a page of channels, by channel id (or key)."""

    latest: dict[str, Occurrence] = field(default_factory=dict)
    pending: dict[str, int] = field(default_factory=dict)
    held_slots: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Backlog:
    """At the database's `now`: `pending` rows (ahead of time included), and how long the
    oldest *due* one has waited (None: none waits)."""

    now: datetime
    pending: int
    oldest_pending_age_secs: float | None
