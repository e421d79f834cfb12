"""What the ledger hands out and takes in: frozen values with aware-UTC datetimes.

Statuses and triggers are plain strings, not an enum: on the wire they are open strings (a
client tolerates one it does not know), and the queries compare against these same literals.
"""

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

#: Statuses a worker may still act on.
ACTIVE_STATUSES = (PENDING, CLAIMED, RUNNING)
#: Statuses that hold a claim (and possibly a singleton slot).
LEASED_STATUSES = (CLAIMED, RUNNING)
TERMINAL_STATUSES = (COMPLETED, FAILED, CANCELLED, SKIPPED_MISFIRE, SKIPPED_SINGLETON)
#: Every status an occurrence can have (what a listing may filter on).
OCCURRENCE_STATUSES = (*ACTIVE_STATUSES, *TERMINAL_STATUSES)
#: Ended without doing its work (not `completed`: running that again is a new occurrence).
RETRYABLE_STATUSES = (FAILED, CANCELLED, SKIPPED_MISFIRE, SKIPPED_SINGLETON)
#: What an attempt may settle as.
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
    so "nothing is due" and "cannot tell" never look the same."""


class DeadlineReached(CronledgerError):
    """Work given a deadline stopped at it rather than outlive it (not `DatabaseUnavailable`:
    trying again cannot help)."""


#: How an attempt ended when its lease ran out without a settle (its executor died).
ABANDONED = "abandoned"


@dataclass(frozen=True, slots=True)
class Attempt:
    """One row of `cron_attempts`: one attempt of an occurrence, from its start to its end."""

    occurrence_id: str
    number: int
    claimant: str
    started_at: datetime
    ended_at: datetime | None
    #: A settled status, or `abandoned` (its lease ran out unsettled); None while it runs.
    outcome: str | None
    error_message: str | None
    #: The last frames of the traceback, when a Python target raised.
    error_detail: str | None
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
    #: When it becomes claimable: `scheduled_for` plus jitter, or a retry's backoff; lateness
    #: is measured from it, identity stays `scheduled_for`.
    due_at: datetime
    #: Attempts it gets in all (a manual retry grants one more); an abandoned attempt at this
    #: count is settled `failed` by the claim.
    max_attempts: int
    #: The misfire rule no longer applies: it started once, a judgment kept it, or it is a
    #: retry or a queued contender.
    misfire_judged: bool
    #: Overdue if not completed by then; cleared on completion, cancel or its one
    #: `occurrence.overdue` event.
    overdue_at: datetime | None = None
    #: A backfill row that waits for its busy concurrency key instead of being skipped.
    waits_for_key: bool | None = None

    @property
    def allowed_attempts(self) -> int:
        """The attempts it is allowed in all, as shown: never fewer than it made (a start
        refreshes `max_attempts` from the policy after a manual retry raised it)."""
        return max(self.max_attempts, self.attempt)


@dataclass(frozen=True, slots=True)
class NewOccurrence:
    """An occurrence to materialise, with a fresh id: identity is `(channel_id,
    scheduled_for)`, so a duplicate loses to the row already there."""

    channel_id: str
    channel_name: str
    channel_version: int
    scheduled_for: datetime
    trigger: str = TRIGGER_CRON
    #: `pending` for work to run; a terminal status (e.g. `skipped_misfire`) for a record.
    status: str = PENDING
    error_message: str | None = None
    target_ref: str | None = None
    #: When it becomes claimable; `None`: at `scheduled_for`.
    due_at: datetime | None = None
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    #: The channel's `alerts.overdue_after_secs`, counted from `due`.
    overdue_after_secs: int | None = None
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
            channel_id=channel.channel_id,
            channel_name=channel.name,
            channel_version=channel.version,
            scheduled_for=at,
            target_ref=target_ref,
            **fields,
        )


@dataclass(frozen=True, slots=True)
class ScheduleState:
    """A channel's cursor: `next_fire_at` is the next instant not yet materialised
    (`None` when the schedule has no instants left: the cursor is parked)."""

    channel_id: str
    channel_version: int
    config_hash: str
    next_fire_at: datetime | None
    paused_at: datetime | None
    updated_at: datetime


class CursorMove(NamedTuple):
    """A cursor move as a pass planned it: from `from_` to `to` (`None` parks it), under the
    scheduling hash `config_hash`, which the compare-and-set checks too: an edit's reset may
    put the cursor back on the very instant a stale plan starts from."""

    channel_id: str
    from_: datetime
    to: datetime | None
    config_hash: str


@dataclass(frozen=True, slots=True)
class DueChannel:
    """What a reconcile pass reads of an active channel. Its schedule document stays JSON
    text, parsed only to compile a version the process has not compiled yet."""

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
    """One channel a reconcile pass has to look at. `channel` is None when the cursor's
    channel is gone or no longer active (pause the cursor); `state` is None when an active
    channel has no cursor yet (initialise it)."""

    channel_id: str
    channel: DueChannel | None
    state: ScheduleState | None


OverlapPolicy = Literal["forbid", "queue_one", "replace"]


@dataclass(frozen=True, slots=True)
class SingletonSpec:
    """A concurrency key for one attempt: at most `slots` holders of `key` at once, and what
    a contender does when every slot is held (`policy`): `forbid` gives up, `queue_one`
    waits (one per key), `replace` cancels the oldest holder and takes its slot."""

    key: str
    slots: int = 1
    policy: OverlapPolicy = "forbid"


@dataclass(frozen=True, slots=True)
class AttemptStart:
    """What a start decided. `started`: `running` since `started_at`, holding `slot`
    of its key under `fencing_token` if it has one (`replaced`: the holder it cancelled).
    `singleton_busy`: every slot held by another live lease (and, under `queue_one`, a
    contender waits already); nothing written. `waiting`: the key's one waiting contender,
    back to `pending`, due after `wait_secs`, its attempt given back. `lost`: no longer this
    claimant's; nothing written."""

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
    """What one claim did: the occurrences it leased (oldest due first), and the ones whose
    lease had expired on their last allowed attempt, which it settled `failed` instead."""

    leased: list[Occurrence]
    abandoned: list[Occurrence]


@dataclass(frozen=True, slots=True)
class MisfireRule:
    """A channel's misfire policy (docs/guarantees.md#misfire-at-start): a cron row not
    started within `grace_secs` of its due time is late; of a channel's late rows (oldest
    first), `keep(count)` are the positions that still run."""

    policy: str
    grace_secs: float
    keep: Callable[[int], range]


@dataclass(frozen=True, slots=True)
class OpenedAttempt:
    """What an executor reads first: the occurrence, its channel now (None: deleted), the
    start if the read made it (PostgreSQL, a plain attempt), and whether the misfire rule
    must judge it first."""

    occurrence: Occurrence
    channel: Channel | None
    start: AttemptStart | None
    misfire_due: bool


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    """A page of a list: more than `total` rows match unless `total_is_exact`; `next` is
    the next page's `after` (None on the last)."""

    data: list[T]
    total: int
    limit: int
    offset: int
    next: str | None = None
    total_is_exact: bool = True


@dataclass(frozen=True, slots=True)
class OccurrenceFilter:
    """Listing filter: `since` and `until` bound `scheduled_for`, inclusive; `after` is the
    `next` of the page before; `exact_total` counts every match."""

    channel_id: str | None = None
    status: str | None = None
    trigger: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    limit: int = 50
    offset: int = 0
    after: str | None = None
    exact_total: bool = False


@dataclass(frozen=True, slots=True)
class Event:
    """One row of `cron_events`: `document` is the event as a receiver gets it; `sequence`
    is None for one listed but not delivered (its kind is not in `alerts.on`)."""

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
    """Events listing filter: `since` bounds `at` (inclusive); `after` is a page's `next`."""

    channel_id: str | None = None
    kind: str | None = None
    since: datetime | None = None
    after: str | None = None
    limit: int = 50


@dataclass(frozen=True, slots=True)
class EventPage:
    data: list[Event]
    limit: int
    #: The key to pass as `after` for the next page; None on the last page.
    next: str | None


@dataclass(frozen=True, slots=True)
class Outbox:
    """Events still to deliver, at the database's clock."""

    undelivered: int
    oldest_age_secs: float | None


@dataclass(frozen=True, slots=True)
class Channel:
    """A schedule definition at one version, stored as given (the API validates it)."""

    channel_id: str
    name: str
    status: str
    version: int
    transport_config: dict[str, Any]
    target: dict[str, Any]
    timeout_ms: int
    created_at: datetime
    updated_at: datetime
    #: Why it is in its status, as the operator said (a pause's reason).
    status_reason: str | None = None
    #: Its labels (`cronledger.labels`), part of the version, never of the scheduling hash.
    labels: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ChannelActivity:
    """What the status view shows of a page of channels, by channel id (or key)."""

    latest: dict[str, Occurrence] = field(default_factory=dict)
    pending: dict[str, int] = field(default_factory=dict)
    held_slots: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Backlog:
    """The queue at one instant of the database's clock: `pending` rows (including ones
    materialised ahead) and how long the oldest *due* one has waited (None: none waits)."""

    now: datetime
    pending: int
    oldest_pending_age_secs: float | None
