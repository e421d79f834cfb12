"""`Ledger`: the one repository the services use, composed of one part per subject
(cursors, occurrences, attempts, misfires, channels, reporting), plus the clock and migrations.

Every correctness-bearing write is one conditional statement whose affected-row count is
the answer, and every time comparison uses the database's clock (`db_now`), never a node's:
two nodes with skewed clocks plan and claim the same way.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from cronledger.ledger.attempts import AttemptStore
from cronledger.ledger.backend import create_ledger_engine
from cronledger.ledger.channels import ChannelStore
from cronledger.ledger.misfires import MisfireStore
from cronledger.ledger.reporting import ReportingStore

ALEMBIC_INI = Path(__file__).with_name("alembic.ini")
#: Two deploys migrating at once take turns on this PostgreSQL advisory lock.
MIGRATION_LOCK_ID = 0x63726F6E  # "cron"


class Ledger(ChannelStore, AttemptStore, MisfireStore, ReportingStore):
    @classmethod
    def connect(cls, url: str | sa.URL, **engine_options: Any) -> Ledger:
        """A ledger on `postgresql+pg8000://…` or `sqlite:///file`. Nothing is opened until
        the first call."""
        return cls(create_ledger_engine(url, **engine_options))

    def migrate(self) -> None:
        """Upgrade the database to the newest schema (idempotent)."""
        if not self._sql.is_postgres and self.engine.url.database:
            Path(self.engine.url.database).parent.mkdir(parents=True, exist_ok=True)
        # Alembic is needed only here: importing it lazily keeps it off every cold start.
        from alembic import command
        from alembic.config import Config

        config = Config(str(ALEMBIC_INI))
        with self._write() as conn:
            if self._sql.is_postgres:
                conn.execute(sa.select(sa.func.pg_advisory_xact_lock(MIGRATION_LOCK_ID)))
            config.attributes["connection"] = conn
            command.upgrade(config, "head")

    def db_now(self) -> datetime:
        """The database's clock, in UTC, whatever the server's or session's time zone."""
        with self._read() as conn:
            return conn.execute(sa.select(self._sql.now())).scalar_one()

    def dispose(self) -> None:
        """Close every pooled connection."""
        self.engine.dispose()
