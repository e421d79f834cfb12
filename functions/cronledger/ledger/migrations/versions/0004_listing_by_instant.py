"""The listing's index follows its order: newest `scheduled_for` first, not newest created.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-02

The occurrence listing (API, command line, console) is ordered by `scheduled_for`, so a
backfilled 06:00 row sits below a 09:00 one whenever it was written. One index on
`(scheduled_for, id)` serves the whole listing; a channel's listing is served by the unique
`(channel_id, scheduled_for)` the table already has. The two `created_at` indexes served only
the old order and are dropped.
"""

from __future__ import annotations

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_cron_occurrences_scheduled", "cron_occurrences", ["scheduled_for", "id"])
    op.drop_index("ix_cron_occurrences_created", table_name="cron_occurrences")
    op.drop_index("ix_cron_occurrences_channel_created", table_name="cron_occurrences")


def downgrade() -> None:
    op.create_index("ix_cron_occurrences_created", "cron_occurrences", ["created_at", "id"])
    op.create_index(
        "ix_cron_occurrences_channel_created", "cron_occurrences", ["channel_id", "created_at"]
    )
    op.drop_index("ix_cron_occurrences_scheduled", table_name="cron_occurrences")
