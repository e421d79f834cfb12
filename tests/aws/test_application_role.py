"""The application role on real PostgreSQL (SPEC §10): `migrate` creates it, idempotently, and
it may read and write the `cron_*` tables and nothing else, while the whole scheduler (API,
reconcile, claim, execute, retry, cancel, delete, retention) works under it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from cronledger.api import create_app
from cronledger.aws import migrate
from cronledger.ledger import Ledger
from cronledger.ledger.tables import metadata, singletons
from tests.api.helpers import CHANNELS, OCCURRENCES, SETTINGS, Scheduler, channel_document
from tests.api.http import call
from tests.aws.invocations import FakeContext, forget_container
from tests.conftest import PG_SERVER_URL
from tests.pg import scratch_database

INSUFFICIENT_PRIVILEGE = "42501"


@pytest.fixture
def role() -> Iterator[str]:
    """A role name of this test's own (roles belong to the whole server, shared by every run);
    dropped afterwards."""
    name = f"cl_app_{uuid.uuid4().hex[:12]}"
    yield name
    admin = sa.create_engine(
        sa.make_url(PG_SERVER_URL).set(database="postgres"), isolation_level="AUTOCOMMIT"
    )
    try:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP ROLE IF EXISTS "{name}"'))
    finally:
        admin.dispose()


@pytest.fixture
def owner_url(
    aws: None,
    function_env: None,
    pg_database_url: str,
    role: str,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[str]:
    """A fresh database migrated by the migrate function, which was told the role's name."""
    with scratch_database(pg_database_url, "approle") as url:
        monkeypatch.setenv("CRONLEDGER_DATABASE_URL", url)
        monkeypatch.setenv("CRONLEDGER_DB_APP_USER", role)
        forget_container()
        try:
            for _ in range(2):  # every deploy runs it again: nothing changes the second time
                assert migrate.handler({}, FakeContext("cronledger-migrate", 300_000)) == {
                    "migrated": True
                }
            with sa.create_engine(url).begin() as conn:
                conn.execute(sa.text("CREATE TABLE someone_elses (secret text)"))
                conn.execute(sa.text("INSERT INTO someone_elses VALUES ('s3cr3t')"))
            yield url
        finally:
            forget_container()


@pytest.fixture
def as_role(owner_url: str, role: str) -> Iterator[sa.Engine]:
    engine = sa.create_engine(sa.make_url(owner_url).set(username=role))
    yield engine
    engine.dispose()


@pytest.mark.parametrize(
    "statement",
    [
        "CREATE TABLE cron_mine (x int)",
        "CREATE TABLE public.anything (x int)",
        "CREATE TEMPORARY TABLE scratch (x int)",
        "CREATE SCHEMA mine",
        "CREATE INDEX sneaky ON cron_occurrences (status)",
        "DROP TABLE cron_occurrences",
        "ALTER TABLE cron_channels ADD COLUMN extra text",
        "ALTER TABLE cron_channels OWNER TO CURRENT_USER",
        "TRUNCATE cron_occurrences",
        "SELECT * FROM someone_elses",
        "SELECT * FROM cronledger_alembic_version",
        "UPDATE cronledger_alembic_version SET version_num = 'x'",
        "GRANT SELECT ON someone_elses TO PUBLIC",
        "CREATE ROLE another LOGIN",
    ],
)
def test_the_application_role_cannot_change_the_schema_or_read_other_tables(
    as_role: sa.Engine, statement: str
) -> None:
    with pytest.raises(sa.exc.DBAPIError) as refused, as_role.begin() as conn:
        conn.execute(sa.text(statement))

    assert INSUFFICIENT_PRIVILEGE in str(refused.value), refused.value


def test_the_role_owns_nothing_and_holds_only_row_rights_on_cron_tables(
    owner_url: str, role: str
) -> None:
    engine = sa.create_engine(owner_url)
    try:
        with engine.connect() as conn:
            grants = conn.execute(
                sa.text(
                    "SELECT table_name, string_agg(privilege_type, ',' ORDER BY privilege_type) "
                    "FROM information_schema.role_table_grants WHERE grantee = :role "
                    "GROUP BY table_name ORDER BY table_name"
                ),
                {"role": role},
            ).all()
            owned = conn.execute(
                sa.text(
                    "SELECT count(*) FROM pg_class WHERE relowner = (SELECT oid FROM pg_roles WHERE rolname = :role)"
                ),
                {"role": role},
            ).scalar_one()
            attributes = conn.execute(
                sa.text(
                    "SELECT rolsuper, rolcreatedb, rolcreaterole, rolcanlogin FROM pg_roles "
                    "WHERE rolname = :role"
                ),
                {"role": role},
            ).one()
    finally:
        engine.dispose()

    assert grants
    assert {table for table, _ in grants} == {t for t in metadata.tables if t.startswith("cron_")}
    assert {privileges for _, privileges in grants} == {"DELETE,INSERT,SELECT,UPDATE"}
    assert owned == 0
    assert tuple(attributes) == (False, False, False, True)


def test_the_whole_scheduler_works_under_the_application_role(as_role: sa.Engine) -> None:
    # Given the scheduler's ledger connected as the application role
    ledger = Ledger(as_role)
    app = create_app(ledger, SETTINGS)
    scheduler = Scheduler(ledger)

    # When channels are created, run on schedule and by hand, retried, cancelled and deleted
    every_second = call(
        app,
        "POST",
        CHANNELS,
        body=channel_document("every-second", status="active",
                              transport_config={"schedule": "* * * * * *",
                                                "concurrency": {"policy": "forbid"}}),
    )  # fmt: skip
    nightly = call(app, "POST", CHANNELS, body=channel_document("nightly", status="active"))
    assert (every_second.status, nightly.status) == (201, 201)
    scheduler.until(
        lambda: call(app, "GET", OCCURRENCES, {"status": "completed"}).body["total"] >= 2
    )
    triggered = call(app, "POST", f"{CHANNELS}/{nightly.data['channel_id']}/trigger")
    cancelled = call(app, "POST", f"{OCCURRENCES}/{triggered.data['id']}/cancel")
    retried = call(app, "POST", f"{OCCURRENCES}/{triggered.data['id']}/retry")
    scheduler.run_due()
    paused = call(
        app,
        "PATCH",
        f"{CHANNELS}/{every_second.data['channel_id']}/status",
        body={"status": "paused"},
    )
    purged = ledger.occurrences.delete_terminal_older_than(hours=0)
    deleted = call(app, "DELETE", f"{CHANNELS}/{nightly.data['channel_id']}")

    # Then every step answered as it does for the schema's owner
    assert (triggered.status, cancelled.status, retried.status) == (202, 200, 200)
    assert (paused.status, deleted.status) == (200, 204)
    assert purged >= 2
    assert call(app, "GET", "/health").status == 200
    assert call(app, "GET", f"{CHANNELS}").body["total"] == 1
    # and the singleton channel's runs took and released its key under the role too
    with as_role.connect() as conn:
        key = conn.execute(sa.select(singletons)).one()
    assert (key.singleton_key, key.occurrence_id) == (every_second.data["channel_id"], None)
    assert key.fencing_token >= 2
