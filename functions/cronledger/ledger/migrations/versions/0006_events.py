"""Events: an outbox written with each change it reports, and each channel's alert state.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-02

Additive only, so code of the previous revision keeps working against this schema: new
tables, one nullable column on `cron_occurrences` (no rewrite, no default to backfill) and
indexes. The indexes on the tables already in use are built without blocking their writers
(`create_index_online`); the new tables' are built with them, before any code uses them.
`cron_channel_alerts` rows are created by the first event of a channel.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from cronledger.ledger.online_ddl import create_index_online

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

UtcDateTime = sa.DateTime(timezone=True)


def upgrade() -> None:
    # On PostgreSQL the first index built online commits what precedes it, so a run stopped
    # after that commit finds these done: each step is skipped when it is.
    postgres = op.get_context().dialect.name == "postgresql"
    op.add_column(
        "cron_occurrences",
        sa.Column("overdue_at", UtcDateTime, nullable=True),
        if_not_exists=postgres,  # SQLite has no ADD COLUMN IF NOT EXISTS, nor needs it
    )
    op.create_table(
        "cron_events",
        sa.Column("event_id", sa.String, primary_key=True),
        sa.Column("channel_id", sa.String, nullable=False),
        sa.Column("sequence", sa.BigInteger, nullable=True),
        sa.Column("kind", sa.String, nullable=False),
        sa.Column("at", UtcDateTime, nullable=False),
        sa.Column("occurrence_id", sa.String, nullable=True),
        sa.Column("document", sa.Text, nullable=False),
        sa.Column("send_after", UtcDateTime, nullable=True),
        sa.Column("send_attempts", sa.Integer, nullable=False),
        sa.Column("last_error", sa.Text, nullable=True),
        sa.Column("delivered_at", UtcDateTime, nullable=True),
        sa.UniqueConstraint("channel_id", "sequence", name="uq_cron_events_sequence"),
        if_not_exists=True,
    )
    op.create_index("ix_cron_events_at", "cron_events", ["at", "event_id"], if_not_exists=True)
    op.create_index(
        "ix_cron_events_channel",
        "cron_events",
        ["channel_id", "at", "event_id"],
        if_not_exists=True,
    )
    outbox = sa.text("send_after IS NOT NULL AND delivered_at IS NULL")
    op.create_index(
        "ix_cron_events_outbox",
        "cron_events",
        ["send_after"],
        postgresql_where=outbox,
        sqlite_where=outbox,
        if_not_exists=True,
    )
    op.create_table(
        "cron_channel_alerts",
        sa.Column("channel_id", sa.String, primary_key=True),
        sa.Column("sequence", sa.BigInteger, nullable=False),
        sa.Column("consecutive_failures", sa.Integer, nullable=False),
        sa.Column("open_alert", sa.String, nullable=True),
        sa.Column("stalled_at", UtcDateTime, nullable=True),
        if_not_exists=True,
    )
    # Last: each commits what came before it and runs outside a transaction.
    create_index_online(
        "ix_cron_occurrences_overdue",
        "cron_occurrences",
        ["overdue_at"],
        where="overdue_at IS NOT NULL",
    )
    create_index_online(
        "ix_cron_schedule_state_next",
        "cron_schedule_state",
        ["next_fire_at"],
        where="paused_at IS NULL",
    )


def downgrade() -> None:
    op.drop_table("cron_channel_alerts")
    op.drop_table("cron_events")
    op.drop_index("ix_cron_schedule_state_next", table_name="cron_schedule_state")
    op.drop_index("ix_cron_occurrences_overdue", table_name="cron_occurrences")
    with op.batch_alter_table("cron_occurrences") as batch:
        batch.drop_column("overdue_at")
