"""`Ledger`: the composition root. It builds one store per subject on one shared base (engine,
statement cache, transactions), each given the stores it writes through, and adds the clock
and migrations. Every correctness-bearing write is one conditional statement whose row count
is the answer, and every time comparison uses the database's clock, never a node's.
"""

from __future__ import annotations

import contextlib
from datetime import datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from cronledger.ledger.attempts import AttemptStore
from cronledger.ledger.backend import WRITE_OPTION, create_ledger_engine
from cronledger.ledger.channels import ChannelStore
from cronledger.ledger.connecting import deadline
from cronledger.ledger.cursors import CursorStore
from cronledger.ledger.events import EventStore
from cronledger.ledger.misfires import MisfireStore
from cronledger.ledger.occurrences import OccurrenceStore
from cronledger.ledger.reporting import ReportingStore
from cronledger.ledger.store import Store, _unavailable_when_lost


class Ledger(Store):
    def __init__(self, engine: sa.Engine) -> None:
        super().__init__(engine)
        self.events = EventStore(self)
        self.cursors = CursorStore(self)
        self.occurrences = OccurrenceStore(self, self.events, self.cursors)
        self.channels = ChannelStore(self, self.events, self.cursors)
        self.attempts = AttemptStore(self, self.events)
        self.misfires = MisfireStore(self, self.events)
        self.reporting = ReportingStore(self)

    @classmethod
    def connect(cls, url: str | sa.URL, **engine_options: Any) -> Ledger:
        """A ledger on `postgresql+pg8000://…` or `sqlite:///file`, opened at its first call."""
        return cls(create_ledger_engine(url, **engine_options))

    def migrate(self, *, until: float | None = None) -> None:
        """Upgrade the database to the newest schema (`migration`), by the monotonic `until`
        (connecting included) or raising `DeadlineReached`."""
        if not self._sql.is_postgres and self.engine.url.database:
            Path(self.engine.url.database).parent.mkdir(parents=True, exist_ok=True)
        # Alembic is needed only here: importing it lazily keeps it off every cold start.
        from cronledger.ledger import migration

        # On SQLite each revision's transaction takes the write lock up front, as writes do.
        with contextlib.nullcontext() if until is None else deadline(until):
            conn = self._connect().execution_options(**{WRITE_OPTION: True})
        try:
            with _unavailable_when_lost():
                migration.upgrade(conn, until=until)
        finally:
            # Its session settings and advisory lock must not reach the pool.
            conn.invalidate()
            conn.close()

    def make_statement_timeout_default(self, milliseconds: int) -> None:
        """PostgreSQL: `statement_timeout` as the database's default, for clients that cannot
        set it (RDS Proxy). Needs the database's owner."""
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
