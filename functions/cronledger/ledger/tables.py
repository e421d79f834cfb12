"""The ledger's tables (docs/guarantees.md#ledger); the migrations create exactly this (a test
compares the two). A column means what its model field (`models`) says. Every timestamp is
`UtcDateTime`: `timestamptz` on PostgreSQL; on SQLite fixed-width text (six fractional digits),
so comparing the text compares the instants.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Dialect

from cronledger.instants import require_utc
from cronledger.ledger.models import TERMINAL_STATUSES, Occurrence


class UtcDateTime(sa.TypeDecorator[datetime]):
    """Aware UTC in, aware UTC out, whatever the session's TimeZone; naive is refused."""

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> sa.types.TypeEngine[Any]:
        # On SQLite, its DATETIME, whose storage format pads microseconds to six digits.
        return dialect.type_descriptor(sa.DateTime(timezone=dialect.name != "sqlite"))

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        utc = require_utc(value)
        return utc.replace(tzinfo=None) if dialect.name == "sqlite" else utc

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        return None if value is None else as_utc(value)


def as_utc(value: datetime) -> datetime:
    """An instant the database gave back, aware UTC (a naive one, as SQLite keeps it, is UTC)."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


JsonDocument = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def _partial(name: str, *columns: str, where: str) -> sa.Index:
    """An index of the rows matching `where` only, on both backends."""
    return sa.Index(name, *columns, postgresql_where=sa.text(where), sqlite_where=sa.text(where))


_UNJUDGED = "status = 'pending' AND NOT misfire_judged"
_UNSENT = "send_after IS NOT NULL AND delivered_at IS NULL"

metadata = sa.MetaData()

channels = sa.Table(
    "cron_channels",
    metadata,
    sa.Column("channel_id", sa.String, primary_key=True),
    sa.Column("name", sa.String, nullable=False, unique=True),
    sa.Column("status", sa.String, nullable=False),
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("transport_config", JsonDocument, nullable=False),
    sa.Column("target", JsonDocument, nullable=False),
    sa.Column("timeout_ms", sa.Integer, nullable=False),
    sa.Column("created_at", UtcDateTime, nullable=False),
    sa.Column("updated_at", UtcDateTime, nullable=False),
    sa.Column("status_reason", sa.Text, nullable=True),
    # The current version's labels: selectors read them here (the GIN index).
    sa.Column("labels", JsonDocument, nullable=False, server_default=sa.text("'{}'")),
    sa.Index(
        "ix_cron_channels_labels",
        "labels",
        postgresql_using="gin",
        postgresql_ops={"labels": "jsonb_path_ops"},
    ),
    # The channel list and the status view, newest first, a page at a time by key.
    sa.Index("ix_cron_channels_created", "created_at", "channel_id"),
)

channel_versions = sa.Table(
    "cron_channel_versions",
    metadata,
    sa.Column("channel_id", sa.String, sa.ForeignKey("cron_channels.channel_id"), primary_key=True),
    sa.Column("version", sa.Integer, primary_key=True),
    sa.Column("transport_config", JsonDocument, nullable=False),
    sa.Column("target", JsonDocument, nullable=False),
    sa.Column("timeout_ms", sa.Integer, nullable=False),
    sa.Column("created_at", UtcDateTime, nullable=False),
    sa.Column("labels", JsonDocument, nullable=False, server_default=sa.text("'{}'")),
)

schedule_state = sa.Table(
    "cron_schedule_state",
    metadata,
    sa.Column("channel_id", sa.String, primary_key=True),
    sa.Column("channel_version", sa.Integer, nullable=False),
    sa.Column("config_hash", sa.String, nullable=False),
    sa.Column("next_fire_at", UtcDateTime, nullable=True),
    sa.Column("paused_at", UtcDateTime, nullable=True),
    sa.Column("updated_at", UtcDateTime, nullable=False),
)
# Running cursors by their next instant, so the ones behind the clock need no scan; on
# PostgreSQL with channel and shard key (`shards`), so a shard of a pass pages through its own
# due cursors only. One index per backend: each cursor a pass moves maintains it.
sa.Index(
    "ix_cron_schedule_state_next",
    schedule_state.c.next_fire_at,
    sqlite_where=sa.text("paused_at IS NULL"),
).ddl_if(dialect="sqlite")
sa.Index(
    "ix_cron_schedule_state_due",
    schedule_state.c.next_fire_at,
    schedule_state.c.channel_id,
    sa.text("(('x' || left(md5(channel_id), 8))::bit(32)::bigint)"),
    postgresql_where=sa.text("paused_at IS NULL"),
).ddl_if(dialect="postgresql")

#: Channels a reconcile pass must look at although their cursor is not due: each channel write
#: notes one in its own transaction; the pass that brought the cursor in line forgets it only if
#: `change` is still the one it read. An idle pass reads this empty table, not every channel.
channel_changes = sa.Table(
    "cron_channel_changes",
    metadata,
    sa.Column("channel_id", sa.String, primary_key=True),
    sa.Column("change", sa.BigInteger, nullable=False),
)

occurrences = sa.Table(
    "cron_occurrences",
    metadata,
    sa.Column("id", sa.String, primary_key=True),
    sa.Column("channel_id", sa.String, nullable=False),
    sa.Column("channel_name", sa.String, nullable=False),
    sa.Column("channel_version", sa.Integer, nullable=False),
    sa.Column("executing_version", sa.Integer, nullable=True),
    sa.Column("target_ref", sa.String, nullable=True),
    sa.Column("trigger", sa.String, nullable=False),
    sa.Column("scheduled_for", UtcDateTime, nullable=False),
    sa.Column("status", sa.String, nullable=False),
    sa.Column("attempt", sa.Integer, nullable=False),
    sa.Column("claimed_by", sa.String, nullable=True),
    sa.Column("claimed_until", UtcDateTime, nullable=True),
    sa.Column("singleton_key", sa.String, nullable=True),
    sa.Column("singleton_slot", sa.Integer, nullable=True),
    sa.Column("fencing_token", sa.BigInteger, nullable=True),
    sa.Column("trace_id", sa.String, nullable=True),
    sa.Column("error_message", sa.Text, nullable=True),
    sa.Column("result", sa.Text, nullable=True),
    sa.Column("started_at", UtcDateTime, nullable=True),
    sa.Column("completed_at", UtcDateTime, nullable=True),
    sa.Column("created_at", UtcDateTime, nullable=False),
    sa.Column("updated_at", UtcDateTime, nullable=False),
    sa.Column("due_at", UtcDateTime, nullable=False),
    sa.Column("max_attempts", sa.Integer, nullable=False),
    sa.Column("misfire_judged", sa.Boolean, nullable=False),
    sa.Column("overdue_at", UtcDateTime, nullable=True),
    sa.Column("waits_for_key", sa.Boolean, nullable=True),
    # The identity of an occurrence, and what makes materialisation idempotent.
    sa.UniqueConstraint("channel_id", "scheduled_for", name="uq_cron_occurrences_instant"),
    # The claim's two arms, the backlog and the in-flight count; partial on PostgreSQL, the
    # size of the live work, not of the history.
    sa.Index(
        "ix_cron_occurrences_pending",
        "status",
        "due_at",
        postgresql_where=sa.text("status = 'pending'"),
    ),
    sa.Index(
        "ix_cron_occurrences_leased",
        "status",
        "claimed_until",
        postgresql_where=sa.text("status IN ('claimed', 'running')"),
    ),
    # A channel's pending rows the misfire rule has yet to judge; the claim moves a row out.
    _partial("ix_cron_occurrences_unjudged", "channel_id", "due_at", where=_UNJUDGED),
    # Newest-first listings (per channel: the unique constraint): a page is one index range.
    sa.Index("ix_cron_occurrences_scheduled", "scheduled_for", "id"),
    sa.Index("ix_cron_occurrences_status", "status", "scheduled_for", "id"),
    sa.Index("ix_cron_occurrences_trigger", "trigger", "scheduled_for", "id"),
    # Retention's batches, oldest first; terminal rows only (`status_is(*TERMINAL_STATUSES)`).
    sa.Index(
        "ix_cron_occurrences_retention",
        "completed_at",
        postgresql_where=sa.text(f"status IN ({', '.join(map(repr, TERMINAL_STATUSES))})"),
    ),
    # The overdue watch: only instants that may still become overdue.
    _partial("ix_cron_occurrences_overdue", "overdue_at", where="overdue_at IS NOT NULL"),
)

attempts = sa.Table(
    "cron_attempts",
    metadata,
    # Deleted with its occurrence (retention, a purge, a future row dropped by a pause).
    sa.Column(
        "occurrence_id",
        sa.String,
        sa.ForeignKey("cron_occurrences.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    # The occurrence's `attempt` when it started: it only climbs, a manual retry included.
    sa.Column("number", sa.Integer, primary_key=True),
    sa.Column("claimant", sa.String, nullable=False),
    sa.Column("started_at", UtcDateTime, nullable=False),
    sa.Column("ended_at", UtcDateTime, nullable=True),
    sa.Column("outcome", sa.String, nullable=True),
    sa.Column("error_message", sa.Text, nullable=True),
    sa.Column("error_detail", sa.Text, nullable=True),
    sa.Column("fencing_token", sa.BigInteger, nullable=True),
)

singletons = sa.Table(
    "cron_singletons",
    metadata,
    sa.Column("singleton_key", sa.String, primary_key=True),
    sa.Column("slot", sa.Integer, primary_key=True),
    # NULL when released; the row stays, so the token keeps climbing.
    sa.Column("occurrence_id", sa.String, nullable=True),
    sa.Column("holder", sa.String, nullable=True),
    sa.Column("fencing_token", sa.BigInteger, nullable=False),
    sa.Column("lease_until", UtcDateTime, nullable=True),
    sa.Index("ix_cron_singletons_occurrence", "occurrence_id"),
)

events = sa.Table(
    "cron_events",
    metadata,
    sa.Column("event_id", sa.String, primary_key=True),
    sa.Column("channel_id", sa.String, nullable=False),
    # Per channel, counting only the events to deliver: gapless, so a receiver sees a gap.
    sa.Column("sequence", sa.BigInteger, nullable=True),
    sa.Column("kind", sa.String, nullable=False),
    sa.Column("at", UtcDateTime, nullable=False),
    sa.Column("occurrence_id", sa.String, nullable=True),
    # The event as delivered (`Event.document`), JSON text.
    sa.Column("document", sa.Text, nullable=False),
    # NULL: listed only, never sent.
    sa.Column("send_after", UtcDateTime, nullable=True),
    sa.Column("send_attempts", sa.Integer, nullable=False),
    sa.Column("last_error", sa.Text, nullable=True),
    sa.Column("delivered_at", UtcDateTime, nullable=True),
    sa.UniqueConstraint("channel_id", "sequence", name="uq_cron_events_sequence"),
    # Newest first, overall and per channel.
    sa.Index("ix_cron_events_at", "at", "event_id"),
    sa.Index("ix_cron_events_channel", "channel_id", "at", "event_id"),
    # The outbox: events still to send, by when they may next be tried.
    _partial("ix_cron_events_outbox", "send_after", where=_UNSENT),
)

channel_alerts = sa.Table(
    "cron_channel_alerts",
    metadata,
    sa.Column("channel_id", sa.String, primary_key=True),
    # The last `sequence` given to one of the channel's delivered events.
    sa.Column("sequence", sa.BigInteger, nullable=False),
    # Failed occurrences (abandoned included) since the last completed one.
    sa.Column("consecutive_failures", sa.Integer, nullable=False),
    # The delivered alert no completion has answered yet: the next raises `recovered`.
    sa.Column("open_alert", sa.String, nullable=True),
    # Since when the channel's cursor is known to be stalled (`channel.stalled` written).
    sa.Column("stalled_at", UtcDateTime, nullable=True),
)

job_runs = sa.Table(
    "cron_job_runs",
    metadata,
    sa.Column("job", sa.String, primary_key=True),
    sa.Column("last_ok_at", UtcDateTime, nullable=False),
)


def constant(value: str) -> sa.ColumnElement[str]:
    """A constant string written into the statement: nothing to bind per execution, and a
    partial index's condition can match it."""
    return sa.literal_column(f"'{value}'", sa.String)


def status_is(*statuses: str) -> sa.ColumnElement[bool]:
    """`cron_occurrences.status` is one of these, as literals, so a generic plan can still
    use the partial indexes on `status`."""
    return occurrences.c.status.in_([constant(status) for status in statuses])


def status_rechecked(*statuses: str) -> sa.ColumnElement[bool]:
    """`status_is` through an expression no index is built on: a statement finding its row by
    primary key is never planned through a partial index stale statistics show as empty."""
    checked = occurrences.c.status.op("||")(sa.literal_column("''", sa.String))
    return checked.in_([constant(status) for status in statuses])


def occurrence_of(row: Sequence[Any]) -> Occurrence:
    """An occurrence from its table's columns, in table order (the model's; a test checks)."""
    return Occurrence(*row)


def param(column: sa.Column[Any], name: str) -> sa.BindParameter[Any]:
    """A value bound at execution, typed as `column`."""
    return sa.bindparam(name, type_=column.type)
