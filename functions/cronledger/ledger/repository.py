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
                # Waiting for another deploy's migration, or building an index on a large
                # table, may rightly take longer than any other statement is allowed.
                conn.execute(sa.text("SET LOCAL statement_timeout = 0"))
                conn.execute(sa.select(sa.func.pg_advisory_xact_lock(MIGRATION_LOCK_ID)))
            config.attributes["connection"] = conn
            command.upgrade(config, "head")

    def make_statement_timeout_default(self, milliseconds: int) -> None:
        """PostgreSQL: make `statement_timeout` this database's default for new sessions,
        for clients that cannot set it per connection (RDS Proxy takes no startup parameters
        and pins a session that runs SET). Needs the database's owner."""
        if not self._sql.is_postgres:
            return
        with self._write() as conn:
            database = conn.execute(sa.select(sa.func.current_database())).scalar_one()
            name = conn.dialect.identifier_preparer.quote_identifier(database)
            # A utility statement takes no bind parameters; both parts are checked above.
            conn.execute(
                sa.text(f"ALTER DATABASE {name} SET statement_timeout = {int(milliseconds)}")
            )

    def db_now(self) -> datetime:
        """The database's clock, in UTC, whatever the server's or session's time zone."""
        with self._read() as conn:
            return conn.execute(sa.select(self._sql.now())).scalar_one()

    def dispose(self) -> None:
        """Close every pooled connection."""
        self.engine.dispose()
