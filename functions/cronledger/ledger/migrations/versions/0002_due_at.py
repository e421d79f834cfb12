"""Occurrences get a due time apart from their instant: `due_at`.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01

A row's identity stays `(channel_id, scheduled_for)`, but when it may be claimed can differ:
a channel's jitter moves it a stable few seconds later, and a retry waits out its backoff.
Existing rows keep their meaning: each is due at its instant. The claim's partial index
moves from `scheduled_for` to `due_at` under the same name.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

Instant = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.add_column("cron_occurrences", sa.Column("due_at", Instant, nullable=True))
    op.execute("UPDATE cron_occurrences SET due_at = scheduled_for")
    # SQLite cannot alter a column in place: batch mode copies the table once.
    with op.batch_alter_table("cron_occurrences") as batch:
        batch.alter_column("due_at", existing_type=Instant, nullable=False)
    op.drop_index("ix_cron_occurrences_pending", table_name="cron_occurrences")
    op.create_index(
        "ix_cron_occurrences_pending",
        "cron_occurrences",
        ["status", "due_at"],
        postgresql_where=sa.text("status = 'pending'"),
    )


def downgrade() -> None:
    op.drop_index("ix_cron_occurrences_pending", table_name="cron_occurrences")
    op.create_index(
        "ix_cron_occurrences_pending",
        "cron_occurrences",
        ["status", "scheduled_for"],
        postgresql_where=sa.text("status = 'pending'"),
    )
    with op.batch_alter_table("cron_occurrences") as batch:
        batch.drop_column("due_at")
