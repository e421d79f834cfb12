"""The attempt log: one row per attempt of an occurrence; backfill rows that wait their turn.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-02

Additive only: one new table, which code of the previous revision never reads nor writes.
Its primary key (occurrence, number) is also the index a cascading delete of an occurrence
reads, so no other index is built. The foreign key's creation locks `cron_occurrences`
against writes only for as long as the table takes to create (readers are not blocked), and
the migration's lock timeout bounds its wait for that lock. Occurrences that ran before it have no attempts on
record; their own row still carries the last error.

`cron_channels.status_reason`, nullable: why an operator paused (or archived) a channel.

`cron_occurrences.waits_for_key`, nullable (no rewrite, nothing to backfill): a backfill row
that waits for its busy concurrency key instead of being skipped. Code of the previous
revision never writes it, and NULL means what every row meant before: the channel's policy.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

UtcDateTime = sa.DateTime(timezone=True)


def upgrade() -> None:
    postgres = op.get_context().dialect.name == "postgresql"
    op.add_column(
        "cron_channels",
        sa.Column("status_reason", sa.Text, nullable=True),
        if_not_exists=postgres,
    )
    op.add_column(
        "cron_occurrences",
        sa.Column("waits_for_key", sa.Boolean, nullable=True),
        if_not_exists=postgres,  # SQLite has no ADD COLUMN IF NOT EXISTS, nor needs it
    )
    op.create_table(
        "cron_attempts",
        sa.Column(
            "occurrence_id",
            sa.String,
            sa.ForeignKey("cron_occurrences.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("number", sa.Integer, primary_key=True),
        sa.Column("claimant", sa.String, nullable=False),
        sa.Column("started_at", UtcDateTime, nullable=False),
        sa.Column("ended_at", UtcDateTime, nullable=True),
        sa.Column("outcome", sa.String, nullable=True),
        sa.Column("error_message", sa.Text, nullable=True),
        sa.Column("error_detail", sa.Text, nullable=True),
        sa.Column("fencing_token", sa.BigInteger, nullable=True),
        if_not_exists=True,
    )


def downgrade() -> None:
    op.drop_table("cron_attempts")
    with op.batch_alter_table("cron_occurrences") as batch:
        batch.drop_column("waits_for_key")
    with op.batch_alter_table("cron_channels") as batch:
        batch.drop_column("status_reason")
