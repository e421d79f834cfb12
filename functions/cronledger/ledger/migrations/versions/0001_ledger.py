"""The ledger: channels and their versions, cursors, occurrences, singletons, job runs.

Revision ID: 0001
Revises:
Create Date: 2026-11-29

Spelled out rather than derived from `tables.py`: a migration is a fixed step in a
database's history, while the metadata keeps changing. A test checks they agree.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

Instant = sa.DateTime(timezone=True)
Document = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "cron_channels",
        sa.Column("channel_id", sa.String, primary_key=True),
        sa.Column("name", sa.String, nullable=False, unique=True),
        sa.Column("status", sa.String, nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("transport_config", Document, nullable=False),
        sa.Column("target", Document, nullable=False),
        sa.Column("timeout_ms", sa.Integer, nullable=False),
        sa.Column("created_at", Instant, nullable=False),
        sa.Column("updated_at", Instant, nullable=False),
    )
    op.create_table(
        "cron_channel_versions",
        sa.Column(
            "channel_id", sa.String, sa.ForeignKey("cron_channels.channel_id"), primary_key=True
        ),
        sa.Column("version", sa.Integer, primary_key=True),
        sa.Column("transport_config", Document, nullable=False),
        sa.Column("target", Document, nullable=False),
        sa.Column("timeout_ms", sa.Integer, nullable=False),
        sa.Column("created_at", Instant, nullable=False),
    )
    op.create_table(
        "cron_schedule_state",
        sa.Column("channel_id", sa.String, primary_key=True),
        sa.Column("channel_version", sa.Integer, nullable=False),
        sa.Column("config_hash", sa.String, nullable=False),
        sa.Column("next_fire_at", Instant, nullable=True),
        sa.Column("paused_at", Instant, nullable=True),
        sa.Column("updated_at", Instant, nullable=False),
    )
    op.create_table(
        "cron_occurrences",
        sa.Column("id", sa.String, primary_key=True),
        sa.Column("channel_id", sa.String, nullable=False),
        sa.Column("channel_name", sa.String, nullable=False),
        sa.Column("channel_version", sa.Integer, nullable=False),
        sa.Column("executing_version", sa.Integer, nullable=True),
        sa.Column("target_ref", sa.String, nullable=True),
        sa.Column("trigger", sa.String, nullable=False),
        sa.Column("scheduled_for", Instant, nullable=False),
        sa.Column("status", sa.String, nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("claimed_by", sa.String, nullable=True),
        sa.Column("claimed_until", Instant, nullable=True),
        sa.Column("singleton_key", sa.String, nullable=True),
        sa.Column("singleton_slot", sa.Integer, nullable=True),
        sa.Column("fencing_token", sa.BigInteger, nullable=True),
        sa.Column("trace_id", sa.String, nullable=True),
        sa.Column("error_message", sa.Text, nullable=True),
        sa.Column("result", sa.Text, nullable=True),
        sa.Column("started_at", Instant, nullable=True),
        sa.Column("completed_at", Instant, nullable=True),
        sa.Column("created_at", Instant, nullable=False),
        sa.Column("updated_at", Instant, nullable=False),
        sa.UniqueConstraint("channel_id", "scheduled_for", name="uq_cron_occurrences_instant"),
    )
    op.create_index(
        "ix_cron_occurrences_pending",
        "cron_occurrences",
        ["status", "scheduled_for"],
        postgresql_where=sa.text("status = 'pending'"),
    )
    op.create_index(
        "ix_cron_occurrences_leased",
        "cron_occurrences",
        ["status", "claimed_until"],
        postgresql_where=sa.text("status IN ('claimed', 'running')"),
    )
    op.create_index("ix_cron_occurrences_created", "cron_occurrences", ["created_at", "id"])
    op.create_index(
        "ix_cron_occurrences_channel_created", "cron_occurrences", ["channel_id", "created_at"]
    )
    op.create_table(
        "cron_singletons",
        sa.Column("singleton_key", sa.String, primary_key=True),
        sa.Column("slot", sa.Integer, primary_key=True),
        sa.Column("occurrence_id", sa.String, nullable=True),
        sa.Column("holder", sa.String, nullable=True),
        sa.Column("fencing_token", sa.BigInteger, nullable=False),
        sa.Column("lease_until", Instant, nullable=True),
    )
    op.create_index("ix_cron_singletons_occurrence", "cron_singletons", ["occurrence_id"])
    op.create_table(
        "cron_job_runs",
        sa.Column("job", sa.String, primary_key=True),
        sa.Column("last_ok_at", Instant, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("cron_job_runs")
    op.drop_table("cron_singletons")
    op.drop_table("cron_occurrences")
    op.drop_table("cron_schedule_state")
    op.drop_table("cron_channel_versions")
    op.drop_table("cron_channels")
