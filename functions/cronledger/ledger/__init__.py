"""The ledger: the database every guarantee of cronledger rests on.

    ledger = Ledger.connect("postgresql+pg8000://…")   # or "sqlite:///.cronledger/ledger.db"
    ledger.migrate()
    ledger.channels.get_channel(channel_id)            # one store per subject

A database that cannot be reached raises `DatabaseUnavailable`, never an empty answer.
"""

from cronledger.ledger.backend import create_ledger_engine as create_ledger_engine
from cronledger.ledger.cursors import CursorInit as CursorInit, CursorWrites as CursorWrites
from cronledger.ledger.models import (
    ABANDONED as ABANDONED,
    CANCELLED as CANCELLED,
    CHANNEL_ACTIVE as CHANNEL_ACTIVE,
    CHANNEL_ARCHIVED as CHANNEL_ARCHIVED,
    CHANNEL_DRAFT as CHANNEL_DRAFT,
    CHANNEL_PAUSED as CHANNEL_PAUSED,
    CLAIMED as CLAIMED,
    COMPLETED as COMPLETED,
    FAILED as FAILED,
    LEASED_STATUSES as LEASED_STATUSES,
    OCCURRENCE_STATUSES as OCCURRENCE_STATUSES,
    PENDING as PENDING,
    RUNNING as RUNNING,
    SKIPPED_MISFIRE as SKIPPED_MISFIRE,
    SKIPPED_SINGLETON as SKIPPED_SINGLETON,
    TRIGGER_BACKFILL as TRIGGER_BACKFILL,
    TRIGGER_MANUAL as TRIGGER_MANUAL,
    TRIGGERS as TRIGGERS,
    Attempt as Attempt,
    AttemptStart as AttemptStart,
    Channel as Channel,
    ChannelActivity as ChannelActivity,
    ClaimResult as ClaimResult,
    CursorMove as CursorMove,
    DatabaseUnavailable as DatabaseUnavailable,
    DeadlineReached as DeadlineReached,
    DueChannel as DueChannel,
    Event as Event,
    EventFilter as EventFilter,
    MisfireRule as MisfireRule,
    NewOccurrence as NewOccurrence,
    Occurrence as Occurrence,
    OccurrenceFilter as OccurrenceFilter,
    OpenedAttempt as OpenedAttempt,
    Page as Page,
    ScheduleState as ScheduleState,
    SingletonSpec as SingletonSpec,
)
from cronledger.ledger.repository import Ledger as Ledger
from cronledger.ledger.shards import WHOLE as WHOLE, Shard as Shard
