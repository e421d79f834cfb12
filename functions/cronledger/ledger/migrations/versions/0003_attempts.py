"""Occurrences record the attempts they are allowed, and whether the misfire rule was applied.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-02

`max_attempts`: how many attempts the occurrence gets in all (the channel's retry policy,
written with the row and refreshed at every start; a manual retry grants one more). The
claim reads it to stop re-claiming an occurrence whose executor keeps dying.
`misfire_judged`: the misfire rule no longer applies to the row (it started once, was kept
by a judgment at start, or is a retry). Existing rows keep their meaning: the policy they
ran under had no retry key, so the default of 3 attempts; a row judged already if it ever
started or was retried, or is not a cron row. A partial index finds a channel's live rows
not yet judged, and only those.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("cron_occurrences", sa.Column("max_attempts", sa.Integer, nullable=True))
    op.add_column("cron_occurrences", sa.Column("misfire_judged", sa.Boolean, nullable=True))
    op.execute(
        "UPDATE cron_occurrences SET max_attempts = 3, misfire_judged = "
        "(started_at IS NOT NULL OR attempt > 0 OR trigger <> 'cron')"
    )
    # SQLite cannot alter a column in place: batch mode copies the table once.
    with op.batch_alter_table("cron_occurrences") as batch:
        batch.alter_column("max_attempts", existing_type=sa.Integer, nullable=False)
        batch.alter_column("misfire_judged", existing_type=sa.Boolean, nullable=False)
    live_unjudged = sa.text("status IN ('pending', 'claimed') AND NOT misfire_judged")
    op.create_index(
        "ix_cron_occurrences_unjudged",
        "cron_occurrences",
        ["channel_id", "scheduled_for"],
        postgresql_where=live_unjudged,
        sqlite_where=live_unjudged,
    )


def downgrade() -> None:
    op.drop_index("ix_cron_occurrences_unjudged", table_name="cron_occurrences")
    with op.batch_alter_table("cron_occurrences") as batch:
        batch.drop_column("misfire_judged")
        batch.drop_column("max_attempts")
