"""One index of due cursors on PostgreSQL: `ix_cron_schedule_state_next` goes.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-02

Contract only, of an index no code names: on PostgreSQL `ix_cron_schedule_state_due` (0009)
leads with the same column under the same condition, so every read the older index served
(due cursors, the misfire and overdue watches) is served by the newer one, and each cursor a
pass moves maintains one index of its next instant instead of two. Code of the previous
revision keeps working against it. Dropped without blocking the table's writers. SQLite
keeps the index: it has no other.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from cronledger.ledger.online_ddl import create_index_online, drop_index_online

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

INDEX, TABLE = "ix_cron_schedule_state_next", "cron_schedule_state"


def upgrade() -> None:
    if op.get_context().dialect.name == "postgresql":
        drop_index_online(INDEX, TABLE)


def downgrade() -> None:
    if op.get_context().dialect.name == "postgresql":
        create_index_online(INDEX, TABLE, [sa.text("next_fire_at")], where="paused_at IS NULL")
