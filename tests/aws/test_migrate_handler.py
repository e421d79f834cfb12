"""The migrate function: the deploy's trigger, invoked with an empty event, brings a fresh
database to the newest schema, and doing it again changes nothing; on a first deploy it waits
out a database that is not answering yet and a secret whose rotation is under way."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import boto3
import pytest
import sqlalchemy as sa

from cronledger.aws import migrate
from cronledger.ledger import DeadlineReached
from cronledger.ledger.connecting import CONNECT_TIMEOUT_SECS
from cronledger.ledger.tables import metadata
from tests.aws.invocations import FakeContext, forget_container
from tests.pg import scratch_database
from tests.relay import Relay, SilentServer

#: Where the ledger's migrations record the schema revision (ledger/migrations/env.py).
VERSION_TABLE = "cronledger_alembic_version"


@pytest.fixture
def fresh_database(
    aws: None, function_env: None, pg_database_url: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[str]:
    """An empty database on the test server, the function's database for this test."""
    with scratch_database(pg_database_url, "migrate") as url:
        monkeypatch.setenv("CRONLEDGER_DATABASE_URL", url)
        forget_container()
        try:
            yield url
        finally:
            forget_container()


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


def statement_timeout_default(url: str) -> str:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return str(conn.execute(sa.text("SHOW statement_timeout")).scalar_one())
    finally:
        engine.dispose()


def test_the_statement_timeout_becomes_the_databases_default(
    fresh_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Sessions through RDS Proxy can neither set it at start nor SET it without pinning
    monkeypatch.setenv("CRONLEDGER_DB_STATEMENT_TIMEOUT_MS", "12000")

    migrate.handler({}, FakeContext("cronledger-migrate", 300_000))

    assert statement_timeout_default(fresh_database) == "12s"


def test_with_an_application_role_the_timeout_is_the_roles_and_not_the_owners(
    fresh_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a stack that names the role the other functions connect as
    role = f"app_{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("CRONLEDGER_DB_APP_USER", role)
    monkeypatch.setenv("CRONLEDGER_DB_STATEMENT_TIMEOUT_MS", "12000")
    engine = sa.create_engine(fresh_database)
    try:
        # When migrate runs
        migrate.handler({}, FakeContext("cronledger-migrate", 300_000))
        with engine.connect() as conn:
            settings = conn.execute(
                sa.text("SELECT rolconfig FROM pg_roles WHERE rolname = :role"), {"role": role}
            ).scalar_one()
        # Then the role's sessions are held to it, and the owner's (an index build) are not
        assert settings == ["statement_timeout=12000"]
        assert statement_timeout_default(fresh_database) == "0"
    finally:
        with engine.begin() as conn:
            conn.execute(sa.text(f"DROP OWNED BY {role}"))
            conn.execute(sa.text(f"DROP ROLE {role}"))
        engine.dispose()


def test_migrate_waits_out_a_database_that_refuses_connections_at_first(
    fresh_database: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a database that refuses every connection for its first 2.5 seconds (a proxy
    # still warming up, a password mid-rotation)
    with Relay(fresh_database) as relay:
        monkeypatch.setenv("CRONLEDGER_DATABASE_URL", relay.url)
        forget_container()
        relay.open_after(2.5)

        # When the deploy's trigger runs migrate
        answer = migrate.handler({}, FakeContext("cronledger-migrate", 300_000))
        forget_container()  # its connections go through the relay

    # Then it kept trying until the database answered, and migrated it
    tables, revisions = tables_and_revision(fresh_database)
    assert answer == {"migrated": True}
    assert set(metadata.tables) <= tables and len(revisions) == 1
    back = [r.getMessage() for r in caplog.records if "the database is back after" in r.message]
    assert back and "migrate" in back[0]


def test_migrate_gives_up_on_a_database_that_never_answers_saying_so(
    fresh_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Relay(fresh_database) as relay:  # never opened: every connection is refused
        monkeypatch.setenv("CRONLEDGER_DATABASE_URL", relay.url)
        monkeypatch.setenv(migrate.WAIT_SECS, "2")
        forget_container()

        with pytest.raises(
            migrate.DatabaseNeverAnswered, match=r"unavailable for \d+ s \(\d+ tries\)"
        ):
            migrate.handler({}, FakeContext("cronledger-migrate", 300_000))

    assert tables_and_revision(fresh_database) == (set(), [])


def test_a_secret_with_a_rotation_under_way_is_waited_for() -> None:
    assert migrate.rotation_under_way({"RotationEnabled": True}) == (
        "its first rotation has not finished"
    )
    rotating = {
        "RotationEnabled": True,
        "LastRotatedDate": "2026-12-01T00:00:00Z",
        "VersionIdsToStages": {"v1": ["AWSCURRENT"], "v2": ["AWSPENDING"]},
    }
    assert migrate.rotation_under_way(rotating) == "version v2 is being rotated in"
    rotated = {
        **rotating,
        "VersionIdsToStages": {"v1": ["AWSPREVIOUS"], "v2": ["AWSCURRENT", "AWSPENDING"]},
    }
    assert migrate.rotation_under_way(rotated) is None
    assert migrate.rotation_under_way({"RotationEnabled": False}) is None


def test_migrate_waits_until_a_rotation_in_progress_finishes(aws: None) -> None:
    # Given a secret with a new version staged AWSPENDING (a rotation between its steps)
    client = boto3.client("secretsmanager")
    arn = client.create_secret(Name="cronledger-master", SecretString='{"password": "a"}')["ARN"]
    current = client.describe_secret(SecretId=arn)["VersionIdsToStages"]
    (old,) = current
    pending = client.put_secret_value(
        SecretId=arn, SecretString='{"password": "b"}', VersionStages=["AWSPENDING"]
    )["VersionId"]
    polls: list[float] = []

    def rotation_finishes_meanwhile(secs: float) -> None:
        polls.append(secs)
        client.update_secret_version_stage(
            SecretId=arn,
            VersionStage="AWSCURRENT",
            MoveToVersionId=pending,
            RemoveFromVersionId=old,
        )

    # When migrate waits for it
    settled = migrate.wait_for_rotation(
        client, arn, time.monotonic() + 60, sleep=rotation_finishes_meanwhile
    )

    # Then it polled until the new version was current, and no longer
    assert settled is True
    assert polls == [migrate.ROTATION_POLL_SECS]


def test_a_rotation_that_never_finishes_is_waited_for_only_until_the_bound(aws: None) -> None:
    client = boto3.client("secretsmanager")
    arn = client.create_secret(Name="cronledger-master", SecretString="a")["ARN"]
    client.put_secret_value(SecretId=arn, SecretString="b", VersionStages=["AWSPENDING"])

    assert migrate.wait_for_rotation(client, arn, time.monotonic() + 1) is False


def test_migrate_facing_a_silent_database_stops_once_at_its_deadline_saying_so(
    fresh_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a database address that accepts connections and never answers, and a function
    # with less time left than a connection may take to open
    silent = SilentServer()
    try:
        monkeypatch.setenv("CRONLEDGER_DATABASE_URL", silent.url(fresh_database))
        forget_container()
        remaining_ms = int((migrate.STOP_MARGIN_SECS + 2) * 1000)
        assert remaining_ms / 1000 - migrate.STOP_MARGIN_SECS < CONNECT_TIMEOUT_SECS

        # When the deploy's trigger runs migrate
        started = time.monotonic()
        with pytest.raises(DeadlineReached) as stopped:
            migrate.handler({}, FakeContext("cronledger-migrate", remaining_ms))
        took = time.monotonic() - started
    finally:
        silent.close()

    # Then it gave up by its deadline, on its one try, saying which deadline it met
    assert took < 3.5, "by the deadline, well before the function's timeout"
    assert len(silent.accepted) == 1, "a connection cut short by the deadline is not retried"
    message = str(stopped.value)
    assert "migrate stopped at its deadline, 10 s before the function's timeout" in message
    assert f"127.0.0.1:{silent.port} did not answer before the deadline" in message
    assert tables_and_revision(fresh_database) == (set(), [])
