"""The migrate function: the deploy's trigger, invoked with an empty event, brings a fresh
database to the newest schema, and doing it again changes nothing."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from cronledger.aws import migrate, runtime
from cronledger.ledger.tables import metadata
from tests.aws.invocations import FakeContext
from tests.pg import scratch_database

#: Where the ledger's migrations record the schema revision (ledger/migrations/env.py).
VERSION_TABLE = "cronledger_alembic_version"


@pytest.fixture
def fresh_database(
    aws: None, function_env: None, pg_database_url: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[str]:
    """An empty database on the test server, the function's database for this test."""
    with scratch_database(pg_database_url, "migrate") as url:
        monkeypatch.setenv("CRONLEDGER_DATABASE_URL", url)
        runtime.forget_container()
        try:
            yield url
        finally:
            runtime.forget_container()


def tables_and_revision(url: str) -> tuple[set[str], list[str]]:
    engine = sa.create_engine(url)
    try:
        tables = set(sa.inspect(engine).get_table_names())
        revisions: list[str] = []
        if VERSION_TABLE in tables:
            with engine.connect() as conn:
                query = sa.text(f"SELECT version_num FROM {VERSION_TABLE}")
                revisions = list(conn.execute(query).scalars())
        return tables, revisions
    finally:
        engine.dispose()


def test_the_deploy_trigger_brings_a_fresh_database_to_the_newest_schema(
    fresh_database: str,
) -> None:
    assert tables_and_revision(fresh_database) == (set(), [])

    answer = migrate.handler({}, FakeContext("cronledger-migrate", 300_000))

    tables, revisions = tables_and_revision(fresh_database)
    assert answer == {"migrated": True}
    assert set(metadata.tables) <= tables
    assert len(revisions) == 1


def test_a_second_deploy_migrates_nothing_and_still_succeeds(fresh_database: str) -> None:
    migrate.handler({}, FakeContext("cronledger-migrate", 300_000))
    before = tables_and_revision(fresh_database)

    answer = migrate.handler({}, FakeContext("cronledger-migrate", 300_000))

    assert answer == {"migrated": True}
    assert tables_and_revision(fresh_database) == before
