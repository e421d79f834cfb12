"""Labels at the top of a channel document: `labels` on channels and their versions.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02

Additive only: a column with a constant default (`{}`) on `cron_channels` and on
`cron_channel_versions`, which PostgreSQL adds without rewriting the table and code of the
previous revision never reads; every existing channel has no labels. Selectors read
`cron_channels.labels` by containment, so PostgreSQL indexes it with GIN (`jsonb_path_ops`
answers `@>`), built without blocking the table's writers.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from cronledger.ledger.online_ddl import create_index_online

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

JsonDocument = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    postgres = op.get_context().dialect.name == "postgresql"
    for table in ("cron_channels", "cron_channel_versions"):
        op.add_column(
            table,
            sa.Column("labels", JsonDocument, nullable=False, server_default=sa.text("'{}'")),
            if_not_exists=postgres,  # SQLite has no ADD COLUMN IF NOT EXISTS, nor needs it
        )
    # Last: it commits what came before it and runs outside a transaction.
    create_index_online(
        "ix_cron_channels_labels",
        "cron_channels",
        ["labels"],
        postgresql_using="gin",
        postgresql_ops={"labels": "jsonb_path_ops"},
    )


def downgrade() -> None:
    op.drop_index("ix_cron_channels_labels", table_name="cron_channels")
    for table in ("cron_channel_versions", "cron_channels"):
        with op.batch_alter_table(table) as batch:
            batch.drop_column("labels")
