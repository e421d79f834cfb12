"""Upgrading the ledger's schema while the previous release keeps running on it.

Deploys take turns on a session-level advisory lock, polled rather than waited for: a waiting
session keeps a snapshot open that the holder's `CONCURRENTLY` index build would wait for. The
lock lives on a connection of its own, which `Ledger.migrate` then discards. A revision this
code does not know means newer code migrated (expand/contract): that schema is left as it is.
A revision whose DDL waits past the lock timeout is rolled back and tried again, backing off;
with a deadline (`until`, monotonic) everything ends by it (`DeadlineReached`).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory

from cronledger.ledger.models import DeadlineReached
from cronledger.ledger.store import sqlstate

ALEMBIC_INI = Path(__file__).with_name("alembic.ini")
VERSION_TABLE = "cronledger_alembic_version"  # namespaced: the database may be shared
MIGRATION_LOCK_ID = 0x63726F6E  # "cron"
LOCK_POLL_SECS = 0.5
LOCK_TRIES = 5
FIRST_LOCK_RETRY_SECS = 1.0
LOCK_NOT_AVAILABLE = "55P03"
QUERY_CANCELED = "57014"

_log = logging.getLogger(__name__)


def upgrade(conn: sa.Connection, *, until: float | None = None) -> None:
    """Bring the database on `conn` (outside a transaction) to this code's newest revision."""
    config = Config(str(ALEMBIC_INI))
    postgres = conn.dialect.name == "postgresql"
    budget = None if until is None else until - time.monotonic()
    try:
        if postgres:
            _bound_statements(conn, until)
            _take_lock(conn, until)
        script = ScriptDirectory.from_config(config)
        if unknown := _unknown_revisions(conn, script):
            _log.warning(
                "the database is ahead of this code: its schema revision %s is unknown here "
                "(this code's newest is %s); leaving the schema as it is",
                ", ".join(unknown),
                script.get_current_head(),
            )
            return
        config.attributes["connection"] = conn
        config.attributes["until"] = until  # for a revision's batched backfill
        _upgrade_retrying_locks(conn, config, until)
    except sa.exc.DBAPIError as exc:
        if budget is not None and sqlstate(exc) == QUERY_CANCELED:
            raise DeadlineReached(_past_deadline(budget, "a statement was cancelled")) from exc
        raise


def _bound_statements(conn: sa.Connection, until: float | None) -> None:
    """No statement runs past the deadline; without one, none is cut short."""
    milliseconds = 0 if until is None else max(1, int((until - time.monotonic()) * 1000))
    conn.execute(sa.text(f"SET statement_timeout = {milliseconds}"))
    conn.commit()


def _take_lock(conn: sa.Connection, until: float | None) -> None:
    budget = None if until is None else until - time.monotonic()
    while True:
        taken = conn.execute(sa.select(sa.func.pg_try_advisory_lock(MIGRATION_LOCK_ID)))
        granted = bool(taken.scalar_one())
        conn.commit()  # no snapshot stays open between tries (module header)
        if granted:
            return
        if until is not None and time.monotonic() + LOCK_POLL_SECS > until:
            assert budget is not None
            raise DeadlineReached(_past_deadline(budget, "another migration held the lock"))
        time.sleep(LOCK_POLL_SECS)


def _unknown_revisions(conn: sa.Connection, script: ScriptDirectory) -> list[str]:
    """The revisions the database records that this code's migrations do not include."""
    heads = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE})
    recorded = heads.get_current_heads()
    conn.commit()
    known = {revision.revision for revision in script.walk_revisions()}
    return [revision for revision in recorded if revision not in known]


def _upgrade_retrying_locks(conn: sa.Connection, config: Config, until: float | None) -> None:
    wait = FIRST_LOCK_RETRY_SECS
    for tries in range(1, LOCK_TRIES + 1):
        try:
            command.upgrade(config, "head")
            return
        except sa.exc.DBAPIError as exc:
            if sqlstate(exc) != LOCK_NOT_AVAILABLE or tries == LOCK_TRIES:
                raise
            conn.rollback()
            if until is not None and time.monotonic() + wait > until:
                raise
            _log.warning("a revision waited too long for a table lock; again in %.0f s", wait)
            time.sleep(wait)
            wait *= 2


def _past_deadline(budget: float, why: str) -> str:
    return (
        f"the migration did not finish within its deadline of {budget:.0f} s ({why}); what "
        "it committed stays, and running it again resumes from there"
    )
