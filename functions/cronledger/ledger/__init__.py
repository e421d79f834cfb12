"""The ledger: the database every guarantee of cronledger rests on.

    from cronledger.ledger import Ledger
    ledger = Ledger.connect("postgresql+pg8000://…")   # or "sqlite:///.cronledger/ledger.db"
    ledger.migrate()

A database that cannot be reached raises `DatabaseUnavailable` (never an empty answer);
`NotFound` and `Conflict` come from `cronledger.errors`.
"""

from cronledger.ledger.backend import create_ledger_engine
from cronledger.ledger.cursors import CursorInit, CursorWrites
from cronledger.ledger.models import (
    ABANDONED,
    CANCELLED,
    CHANNEL_ACTIVE,
    CHANNEL_ARCHIVED,
    CHANNEL_DRAFT,
    CHANNEL_PAUSED,
    CLAIMED,
    COMPLETED,
    FAILED,
    LEASED_STATUSES,
    OCCURRENCE_STATUSES,
    PENDING,
    RUNNING,
    SKIPPED_MISFIRE,
    SKIPPED_SINGLETON,
    TRIGGER_BACKFILL,
    TRIGGER_MANUAL,
    TRIGGERS,
    Attempt,
    AttemptStart,
    Channel,
    ChannelActivity,
    ClaimResult,
    CursorMove,
    DatabaseUnavailable,
    DeadlineReached,
    DueChannel,
    Event,
    EventFilter,
    MisfireRule,
    NewOccurrence,
    Occurrence,
    OccurrenceFilter,
    OpenedAttempt,
    Page,
    ScheduleState,
    SingletonSpec,
)
from cronledger.ledger.repository import Ledger
from cronledger.ledger.shards import WHOLE, Shard

__all__ = [
    "ABANDONED",
    "CANCELLED",
    "CHANNEL_ACTIVE",
    "CHANNEL_ARCHIVED",
    "CHANNEL_DRAFT",
    "CHANNEL_PAUSED",
    "CLAIMED",
    "COMPLETED",
    "FAILED",
    "LEASED_STATUSES",
    "OCCURRENCE_STATUSES",
    "PENDING",
    "RUNNING",
    "SKIPPED_MISFIRE",
    "SKIPPED_SINGLETON",
    "TRIGGERS",
    "TRIGGER_BACKFILL",
    "TRIGGER_MANUAL",
    "WHOLE",
    "Attempt",
    "AttemptStart",
    "Channel",
    "ChannelActivity",
    "ClaimResult",
    "CursorInit",
    "CursorMove",
    "CursorWrites",
    "DatabaseUnavailable",
    "DeadlineReached",
    "DueChannel",
    "Event",
    "EventFilter",
    "Ledger",
    "MisfireRule",
    "NewOccurrence",
    "Occurrence",
    "OccurrenceFilter",
    "OpenedAttempt",
    "Page",
    "ScheduleState",
    "Shard",
    "SingletonSpec",
    "create_ledger_engine",
]
