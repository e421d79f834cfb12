"""Suite-wide fixtures.

PostgreSQL is required, never skipped: the product's correctness is its SQL under
concurrency. Each test run (each xdist worker) gets a database of its own, created here and
dropped at the end, so two runs on one machine never see each other's rows.
"""

from __future__ import annotations

import os
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from cronledger.ledger import Ledger
from tests.ledger.helpers import empty_tables

PG_SERVER_URL = os.environ.get(
    "CRONLEDGER_TEST_PG_URL", "postgresql+pg8000://postgres@127.0.0.1:5432/test"
)


def _admin_engine() -> sa.Engine:
    return sa.create_engine(PG_SERVER_URL, isolation_level="AUTOCOMMIT", pool_pre_ping=True)


@pytest.fixture(scope="session")
def pg_database_url(worker_id: str) -> Iterator[str]:
    """A fresh, empty PostgreSQL database for this test run (this xdist worker)."""
    admin = _admin_engine()
    name = f"cronledger_test_{worker_id}_{uuid.uuid4().hex[:10]}"
    try:
        with admin.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    except Exception as exc:  # a missing server must stop the run loudly, not skip
        admin.dispose()
        pytest.exit(
            f"PostgreSQL is required and not reachable at {PG_SERVER_URL}: {exc}. "
            "Run `make test`, which starts it, or set CRONLEDGER_TEST_PG_URL.",
            returncode=3,
        )
    url = sa.engine.make_url(PG_SERVER_URL).set(database=name).render_as_string(hide_password=False)
    try:
        yield url
    finally:
        _drop_database(admin, name)
        admin.dispose()


def _drop_database(admin: sa.Engine, name: str) -> None:
    """Drop a run's database, but never hang the run on it: a backend that cannot be
    terminated would otherwise block `DROP … WITH (FORCE)` forever. A database left behind
    is reported, and harmless (its name is unique)."""
    try:
        with admin.connect() as conn:
            conn.execute(sa.text("SET statement_timeout = '30s'"))
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    except sa.exc.DBAPIError as exc:
        warnings.warn(f"could not drop test database {name}: {exc}", stacklevel=1)


@pytest.fixture(scope="session")
def worker_id(request: pytest.FixtureRequest) -> str:
    """xdist's worker id (`gw0`, …), or `main` without xdist."""
    workerinput = getattr(request.config, "workerinput", None)
    return workerinput["workerid"] if workerinput else "main"


# One parametrised `ledger` fixture: a test that takes it runs on PostgreSQL and on SQLite.
# PostgreSQL: this run's database, migrated once, every table emptied before each test.
# SQLite: a fresh file per test. Either way a test sees only its own rows.


@pytest.fixture(scope="session")
def pg_ledger(pg_database_url: str) -> Iterator[Ledger]:
    ledger = Ledger.connect(pg_database_url)
    ledger.migrate()
    yield ledger
    ledger.dispose()


@pytest.fixture
def sqlite_ledger(tmp_path: Path) -> Iterator[Ledger]:
    ledger = Ledger.connect(f"sqlite:///{tmp_path / 'ledger.db'}")
    ledger.migrate()
    yield ledger
    ledger.dispose()


@pytest.fixture(params=["postgresql", "sqlite"])
def ledger(request: pytest.FixtureRequest) -> Ledger:
    if request.param == "sqlite":
        sqlite: Ledger = request.getfixturevalue("sqlite_ledger")
        return sqlite
    pg: Ledger = request.getfixturevalue("pg_ledger")
    empty_tables(pg)
    return pg
