"""The pg8000 tuning of `cronledger.ledger.driver`, against the run's PostgreSQL: statements
run as named prepared statements (and give the same answers), a statement the schema
outgrew is prepared again, an idle dead connection is replaced on checkout, the
autocommit used for one-statement writes never leaks into a pooled connection, and a direct
statement answers what SQLAlchemy would, fails as it would, and drops a dead connection."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from cronledger.ledger import CHANNEL_DRAFT, DatabaseUnavailable, Ledger, driver
from cronledger.ledger.backend import create_ledger_engine
from cronledger.ledger.driver import DirectStatements
from cronledger.ledger.tables import channels

PREPARED = sa.text("SELECT count(*) FROM pg_prepared_statements")
ADD = sa.select(sa.bindparam("a", type_=sa.Integer) + sa.bindparam("b", type_=sa.Integer))


@pytest.fixture
def engine(pg_database_url: str) -> Iterator[sa.Engine]:
    engine = create_ledger_engine(pg_database_url, pool_size=1, max_overflow=0)
    yield engine
    engine.dispose()


def test_a_repeated_statement_is_prepared_once_and_answers_correctly(engine: sa.Engine) -> None:
    with engine.connect() as conn:
        before = conn.execute(PREPARED).scalar_one()
        answers = [conn.execute(ADD, {"a": n, "b": 10}).scalar_one() for n in range(5)]
        after = conn.execute(PREPARED).scalar_one()
    assert answers == [10, 11, 12, 13, 14]
    assert after - before == 1  # five executions, one server-side statement


@pytest.mark.parametrize("how", ["argument", "url"])
def test_without_prepared_statements_nothing_is_prepared(pg_database_url: str, how: str) -> None:
    if how == "argument":
        engine = create_ledger_engine(pg_database_url, prepared_statements=False, pool_size=1)
    else:  # as a user behind PgBouncer writes it
        url = sa.make_url(pg_database_url).update_query_dict({"prepared_statements": "false"})
        engine = create_ledger_engine(url, pool_size=1)
    try:
        with engine.connect() as conn:
            assert [conn.execute(ADD, {"a": n, "b": 1}).scalar_one() for n in range(3)] == [1, 2, 3]
            assert conn.execute(PREPARED).scalar_one() == 0
    finally:
        engine.dispose()


def test_a_bad_prepared_statements_switch_is_refused_by_name(pg_database_url: str) -> None:
    url = sa.make_url(pg_database_url).update_query_dict({"prepared_statements": "maybe"})
    with pytest.raises(ValueError, match=r"\?prepared_statements= takes true or false"):
        create_ledger_engine(url)


def test_a_statement_the_schema_outgrew_is_prepared_again(engine: sa.Engine) -> None:
    table = f"driver_{uuid.uuid4().hex[:8]}"
    with engine.begin() as conn:
        conn.execute(sa.text(f"CREATE TABLE {table} (id int, v int)"))
        conn.execute(sa.text(f"INSERT INTO {table} VALUES (1, 7)"))
    stmt = sa.text(f"SELECT * FROM {table} WHERE id = :id")
    try:
        with engine.connect() as conn:
            assert conn.execute(stmt, {"id": 1}).all() == [(1, 7)]
            conn.commit()
            conn.execute(sa.text(f"ALTER TABLE {table} ADD COLUMN w int DEFAULT 9"))
            conn.commit()
            with pytest.raises(sa.exc.DBAPIError, match="cached plan must not change result"):
                conn.execute(stmt, {"id": 1})
            conn.rollback()
            assert conn.execute(stmt, {"id": 1}).all() == [(1, 7, 9)]
    finally:
        with engine.begin() as conn:  # the run's schema is compared with the tables'
            conn.execute(sa.text(f"DROP TABLE {table}"))


def test_an_idle_dead_connection_is_replaced_on_checkout(
    engine: sa.Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    pid = sa.text("SELECT pg_backend_pid()")
    with engine.connect() as conn:
        first = conn.execute(pid).scalar_one()
    admin = create_ledger_engine(engine.url, pool_size=1)
    try:
        with admin.connect() as conn:
            conn.execute(sa.text("SELECT pg_terminate_backend(:p)"), {"p": first})
    finally:
        admin.dispose()
    monkeypatch.setattr(driver, "PING_AFTER_IDLE_SECS", 0.0)
    with engine.connect() as conn:
        second = conn.execute(pid).scalar_one()
    assert second != first


def test_one_statement_writes_leave_the_pooled_connection_transactional(
    pg_ledger: Ledger, pg_database_url: str
) -> None:
    ledger = Ledger.connect(pg_database_url, pool_size=1, max_overflow=0)  # migrated: pg_ledger
    try:
        ledger.claim_due(str(uuid.uuid4()), 10, 60)  # a one-statement write: autocommit
        with ledger.engine.connect() as conn:
            assert conn.connection.driver_connection.autocommit is False
            conn.execute(sa.text("CREATE TEMP TABLE rolled_back (x int)"))
            conn.rollback()
            gone = conn.execute(sa.text("SELECT to_regclass('pg_temp.rolled_back')"))
            assert gone.scalar_one() is None  # the CREATE was inside a transaction
    finally:
        ledger.dispose()


@pytest.mark.parametrize("prepared", [True, False])
def test_a_direct_statement_answers_what_sqlalchemy_answers(
    pg_ledger: Ledger, pg_database_url: str, prepared: bool
) -> None:
    # Given a channel (JSON documents, instants) and a statement with a bound value of its own
    channel = pg_ledger.create_channel(
        f"direct-{uuid.uuid4().hex[:8]}",
        {"schedule": "0 0 * * * *", "timezone": "UTC"},
        {"type": "python", "callable": "cronledger.demo:hello"},
        5_000,
    )
    statement = (
        sa.select(channels)
        .where(channels.c.channel_id == sa.bindparam("p_id", type_=sa.String))
        .where(channels.c.status == CHANNEL_DRAFT)
    )
    engine = create_ledger_engine(pg_database_url, prepared_statements=prepared, pool_size=1)
    direct = DirectStatements(engine)
    try:
        # When it runs straight on a pooled connection, and through SQLAlchemy
        pooled = engine.raw_connection()
        try:
            rows, count = direct.run(
                pooled, direct.compile(statement), {"p_id": channel.channel_id}
            )
        finally:
            pooled.close()
        with engine.connect() as conn:
            expected = [tuple(conn.execute(statement, {"p_id": channel.channel_id}).one())]
    finally:
        engine.dispose()

    # Then both answers are the same values of the same types
    assert rows == expected and count == 1
    assert [type(v) for v in rows[0]] == [type(v) for v in expected[0]]
    assert rows[0][list(channels.c.keys()).index("target")]["type"] == "python"


def test_a_failed_direct_statement_raises_as_sqlalchemy_and_keeps_its_connection(
    engine: sa.Engine,
) -> None:
    direct = DirectStatements(engine)
    pid = direct.compile(sa.select(sa.func.pg_backend_pid()))
    bad = direct.compile(sa.select(sa.cast(sa.bindparam("p", type_=sa.String), sa.Integer)))

    def run(statement: driver.DirectStatement, **parameters: object) -> list[tuple[object, ...]]:
        pooled = engine.raw_connection()
        try:
            return direct.run(pooled, statement, parameters)[0]
        finally:
            pooled.close()

    before = run(pid)
    with pytest.raises(sa.exc.DBAPIError, match="invalid input syntax") as raised:
        run(bad, p="not a number")
    assert not raised.value.connection_invalidated
    assert run(pid) == before  # the same session, still usable


def test_a_direct_statement_on_a_dead_connection_is_unavailable_then_reconnects(
    pg_ledger: Ledger, pg_database_url: str
) -> None:
    # Given a ledger whose one pooled connection's server session is killed
    ledger = Ledger.connect(pg_database_url, pool_size=1, max_overflow=0)
    try:
        assert ledger.in_flight_count() == 0
        with ledger.engine.connect() as conn:
            first = conn.execute(sa.text("SELECT pg_backend_pid()")).scalar_one()
        with pg_ledger.engine.connect() as conn:
            conn.execute(sa.text("SELECT pg_terminate_backend(:p)"), {"p": first})

        # When a direct statement runs on it, then once more
        with pytest.raises(DatabaseUnavailable):
            ledger.claim_due(str(uuid.uuid4()), 10, 60)
        assert ledger.in_flight_count() == 0

        # Then the dead connection was dropped, not handed out again
        with ledger.engine.connect() as conn:
            assert conn.execute(sa.text("SELECT pg_backend_pid()")).scalar_one() != first
    finally:
        ledger.dispose()
