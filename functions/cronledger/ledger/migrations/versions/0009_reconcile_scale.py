"""Reconcile at scale: the channel changes a pass must look at, and due cursors by shard.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02

Additive only. `cron_channel_changes` is new: code of the previous revision never reads it,
and new code notes a change there with every channel write. Every channel is noted once
here, so the first pass of the new code compares each with its cursor, as every pass of the
old code did. On PostgreSQL an index on running cursors by (next instant, channel, shard key)
lets a shard of a pass page through its due cursors without reading another shard's: built
without blocking the table's writers (`create_index_online`). SQLite keeps its index on the
next instant and filters by shard.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from cronledger.ledger.online_ddl import create_index_online

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

#: `cronledger.ledger.shards.shard_key_sql` as it was when this index was built.
SHARD_KEY = "(('x' || left(md5(channel_id), 8))::bit(32)::bigint)"


def upgrade() -> None:
    postgres = op.get_context().dialect.name == "postgresql"
    op.create_table(
        "cron_channel_changes",
        sa.Column("channel_id", sa.String, primary_key=True),
        sa.Column("change", sa.BigInteger, nullable=False),
        if_not_exists=True,
    )
    op.execute(
        "INSERT INTO cron_channel_changes (channel_id, change) "
        "SELECT channel_id, 1 FROM cron_channels WHERE true ON CONFLICT (channel_id) DO NOTHING"
    )
    if postgres:
        # Last: it commits what came before it and runs outside a transaction.
        create_index_online(
            "ix_cron_schedule_state_due",
            "cron_schedule_state",
            ["next_fire_at", "channel_id", sa.text(SHARD_KEY)],
            where="paused_at IS NULL",
        )


def downgrade() -> None:
    if op.get_context().dialect.name == "postgresql":
        op.drop_index("ix_cron_schedule_state_due", table_name="cron_schedule_state")
    op.drop_table("cron_channel_changes")
