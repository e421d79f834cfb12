"""Suite-wide fixtures.

PostgreSQL is required, never skipped: the product's correctness is its SQL under
concurrency. Each test run (each xdist worker) gets a database of its own, created here and
dropped at the end, so two runs on one machine never see each other's rows.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from cronledger.ledger import Ledger
from tests.ledger.helpers import empty_tables
from tests.pg import scratch_database

PG_SERVER_URL = os.environ.get(
    "CRONLEDGER_TEST_PG_URL", "postgresql+pg8000://postgres@127.0.0.1:5432/test"
)


@pytest.fixture(scope="session")
def pg_database_url(worker_id: str) -> Iterator[str]:
    """A fresh, empty PostgreSQL database for this test run (this xdist worker)."""
    try:
        with scratch_database(PG_SERVER_URL, f"test_{worker_id}") as url:
            yield url
    except sa.exc.DBAPIError as exc:  # a missing server must stop the run, not skip
        pytest.exit(
            f"PostgreSQL is required and not reachable at {PG_SERVER_URL}: {exc}. "
            "Run `make test`, which starts it, or set CRONLEDGER_TEST_PG_URL.",
            returncode=3,
        )


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
