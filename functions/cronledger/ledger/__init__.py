"""The ledger: the database every guarantee of cronledger rests on.

    from cronledger.ledger import Ledger
    ledger = Ledger.connect("postgresql+pg8000://…")   # or "sqlite:///.cronledger/ledger.db"
    ledger.migrate()

A database that cannot be reached raises `DatabaseUnavailable` (never an empty answer);
`NotFound` and `Conflict` come from `cronledger.errors`.
"""

from cronledger.ledger.backend import create_ledger_engine
from cronledger.ledger.misfires import Judgment
from cronledger.ledger.models import (
    ACTIVE_STATUSES,
    CANCELLED,
    CHANNEL_ACTIVE,
    CHANNEL_ARCHIVED,
    CHANNEL_DRAFT,
    CHANNEL_PAUSED,
    CLAIMED,
    COMPLETED,
    DEFAULT_MAX_ATTEMPTS,
    FAILED,
    LEASED_STATUSES,
    PENDING,
    RETRYABLE_STATUSES,
    RUNNING,
    SKIPPED_MISFIRE,
    SKIPPED_SINGLETON,
    TERMINAL_STATUSES,
    TRIGGER_BACKFILL,
    TRIGGER_CRON,
    TRIGGER_MANUAL,
    AttemptStart,
    Backlog,
    Channel,
    ChannelActivity,
    ClaimResult,
    DatabaseUnavailable,
    MisfireRule,
    NewOccurrence,
    Occurrence,
    OccurrenceFilter,
    OpenedAttempt,
    Page,
    ScheduleState,
    ScheduleWork,
    SingletonSpec,
)
from cronledger.ledger.repository import Ledger

__all__ = [
    "ACTIVE_STATUSES",
    "CANCELLED",
    "CHANNEL_ACTIVE",
    "CHANNEL_ARCHIVED",
    "CHANNEL_DRAFT",
    "CHANNEL_PAUSED",
    "CLAIMED",
    "COMPLETED",
    "DEFAULT_MAX_ATTEMPTS",
    "FAILED",
    "LEASED_STATUSES",
    "PENDING",
    "RETRYABLE_STATUSES",
    "RUNNING",
    "SKIPPED_MISFIRE",
    "SKIPPED_SINGLETON",
    "TERMINAL_STATUSES",
    "TRIGGER_BACKFILL",
    "TRIGGER_CRON",
    "TRIGGER_MANUAL",
    "AttemptStart",
    "Backlog",
    "Channel",
    "ChannelActivity",
    "ClaimResult",
    "DatabaseUnavailable",
    "Judgment",
    "Ledger",
    "MisfireRule",
    "NewOccurrence",
    "Occurrence",
    "OccurrenceFilter",
    "OpenedAttempt",
    "Page",
    "ScheduleState",
    "ScheduleWork",
    "SingletonSpec",
    "create_ledger_engine",
]
