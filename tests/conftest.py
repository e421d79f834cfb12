"""Suite-wide fixtures.

PostgreSQL is required, never skipped: the product's correctness is its SQL under
concurrency. Each test run (each xdist worker) gets a database of its own, created here and
dropped at the end, so two runs on one machine never see each other's rows.

Hypothesis runs under one of two profiles: `ci`, the counts the tests are written with (what
Hypothesis loads by itself where the environment says CI, and what `make test` runs), and
`dev`, a quarter of them (`make unit`). `HYPOTHESIS_PROFILE` names one.
"""

from __future__ import annotations

import functools
import gc
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import botocore.loaders
import botocore.session
import pytest
import sqlalchemy as sa
from hypothesis import settings

from cronledger.ledger import Ledger
from tests.ledger.helpers import empty_tables
from tests.pg import scratch_database
from tests.profiles import FULL

settings.register_profile("ci", settings.get_profile("ci"), max_examples=FULL)
settings.register_profile("dev", max_examples=FULL // 4)
if os.environ.get("HYPOTHESIS_PROFILE"):
    settings.load_profile(os.environ["HYPOTHESIS_PROFILE"])

# Every botocore session of a test run reads AWS's service descriptions through one loader, so
# each JSON file is parsed once per process: moto and the AWS clients a test builds make a
# fresh session per test, and each would parse the same megabytes again. A loader's answers
# are the same for one data path, which is the cache's key.
botocore.session.create_loader = functools.cache(botocore.loaders.create_loader)


def pytest_collection_finish(session: pytest.Session) -> None:
    """What collection imported (the product, SQLAlchemy, Hypothesis, botocore) lives as long
    as the run: moved out of the collector's reach, each collection walks only what the
    tests themselves create."""
    gc.collect()
    gc.freeze()


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
# SQLite: a file of its own per test, copied from one migrated once per run (a migration
# costs a hundred times what a copy does). Either way a test sees only its own rows.


@pytest.fixture(scope="session")
def pg_ledger(pg_database_url: str) -> Iterator[Ledger]:
    ledger = Ledger.connect(pg_database_url)
    ledger.migrate()
    yield ledger
    ledger.dispose()


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite ledger migrated to the newest schema, closed (so its WAL is folded in)."""
    path = tmp_path_factory.mktemp("sqlite-template") / "ledger.db"
    ledger = Ledger.connect(f"sqlite:///{path}")
    ledger.migrate()
    ledger.dispose()
    return path


@pytest.fixture
def sqlite_ledger(tmp_path: Path, sqlite_template: Path) -> Iterator[Ledger]:
    path = tmp_path / "ledger.db"
    shutil.copyfile(sqlite_template, path)
    ledger = Ledger.connect(f"sqlite:///{path}")
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
