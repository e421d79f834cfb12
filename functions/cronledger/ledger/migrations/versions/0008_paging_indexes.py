"""Indexes for lists read by key and for a retention that reads only what it deletes.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02

Additive only: indexes, which code of the previous revision ignores. Each is built without
blocking the table's writers (`create_index_online`).
- `cron_occurrences (status | trigger, scheduled_for, id)`: a filtered list, newest first,
  is one range of one index whatever the table's size.
- `cron_occurrences (completed_at)` of terminal rows (partial on PostgreSQL, so it holds only
  history): each retention batch reads its oldest rows from it instead of scanning the table.
- `cron_channels (created_at, channel_id)`: the channel list and the status view, by key.
"""

from __future__ import annotations

from alembic import op

from cronledger.ledger.online_ddl import create_index_online

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

#: As `status_is(*TERMINAL_STATUSES)` writes it, so the retention's condition matches it.
TERMINAL = "status IN ('completed', 'failed', 'cancelled', 'skipped_misfire', 'skipped_singleton')"


def upgrade() -> None:
    postgres = op.get_context().dialect.name == "postgresql"
    create_index_online(
        "ix_cron_occurrences_status", "cron_occurrences", ["status", "scheduled_for", "id"]
    )
    create_index_online(
        "ix_cron_occurrences_trigger", "cron_occurrences", ["trigger", "scheduled_for", "id"]
    )
    create_index_online(
        "ix_cron_occurrences_retention",
        "cron_occurrences",
        ["completed_at"],
        where=TERMINAL if postgres else None,
    )
    create_index_online("ix_cron_channels_created", "cron_channels", ["created_at", "channel_id"])


def downgrade() -> None:
    op.drop_index("ix_cron_channels_created", table_name="cron_channels")
    op.drop_index("ix_cron_occurrences_retention", table_name="cron_occurrences")
    op.drop_index("ix_cron_occurrences_trigger", table_name="cron_occurrences")
    op.drop_index("ix_cron_occurrences_status", table_name="cron_occurrences")
