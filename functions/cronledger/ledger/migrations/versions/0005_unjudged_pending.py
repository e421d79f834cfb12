"""The index of rows the misfire rule has yet to judge holds `pending` rows only.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02

As 0003 built it, it also held `claimed` rows, so every claim added an entry to it: a cost on
every occurrence's hot path for a judgment that runs only after an outage. A judgment finds a
channel's claimed rows through the leased index instead (they are few: the ones in flight).
Keyed by `due_at`, the judgment's range.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

INDEX = "ix_cron_occurrences_unjudged"


def upgrade() -> None:
    op.drop_index(INDEX, table_name="cron_occurrences")
    pending = sa.text("status = 'pending' AND NOT misfire_judged")
    op.create_index(
        INDEX,
        "cron_occurrences",
        ["channel_id", "due_at"],
        postgresql_where=pending,
        sqlite_where=pending,
    )


def downgrade() -> None:
    op.drop_index(INDEX, table_name="cron_occurrences")
    live = sa.text("status IN ('pending', 'claimed') AND NOT misfire_judged")
    op.create_index(
        INDEX,
        "cron_occurrences",
        ["channel_id", "scheduled_for"],
        postgresql_where=live,
        sqlite_where=live,
    )
