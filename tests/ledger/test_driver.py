"""The pg8000 connection of `cronledger.ledger.driver`, against the run's PostgreSQL:
statements run as named prepared statements (and answer what unprepared ones answer), a
statement the schema outgrew is prepared again, an idle dead connection is replaced on
checkout, the autocommit used for one-statement writes never leaks into a pooled connection,
a failed statement keeps its connection, and a lost one drops the connections it went with."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa

from cronledger.ledger import CHANNEL_DRAFT, CLAIMED, DatabaseUnavailable, Ledger, driver
from cronledger.ledger.backend import create_ledger_engine
from cronledger.ledger.tables import channels
from tests.ledger.helpers import empty_tables, seed_due

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
        ledger.attempts.release_claim(
            str(uuid.uuid4()), "node-a"
        )  # a one-statement write: autocommit
        with ledger.engine.connect() as conn:
            assert conn.connection.driver_connection.autocommit is False
            conn.execute(sa.text("CREATE TEMP TABLE rolled_back (x int)"))
            conn.rollback()
            gone = conn.execute(sa.text("SELECT to_regclass('pg_temp.rolled_back')"))
            assert gone.scalar_one() is None  # the CREATE was inside a transaction
    finally:
        ledger.dispose()


def test_a_prepared_statement_answers_what_an_unprepared_one_answers(
    pg_ledger: Ledger, engine: sa.Engine, pg_database_url: str
) -> None:
    # Given a channel (JSON documents, instants), a read with a bound value of its own, and
    # a write that returns what it changed and uses one parameter twice
    channel = pg_ledger.channels.create_channel(
        f"prepared-{uuid.uuid4().hex[:8]}",
        {"schedule": "0 0 * * * *", "timezone": "UTC"},
        {"type": "python", "callable": "cronledger.demo:hello"},
        5_000,
    )
    read = (
        sa.select(channels)
        .where(channels.c.channel_id == sa.bindparam("p_id", type_=sa.String))
        .where(channels.c.status == CHANNEL_DRAFT)
    )
    ms = sa.bindparam("p_ms", type_=sa.Integer)
    raise_timeout = (
        sa.update(channels)
        .where(channels.c.channel_id == sa.bindparam("p_id", type_=sa.String))
        .where(channels.c.timeout_ms < ms)
        .values(timeout_ms=ms)
        .returning(channels.c.channel_id, channels.c.timeout_ms, channels.c.updated_at)
    )
    unprepared = create_ledger_engine(pg_database_url, prepared_statements=False, pool_size=1)

    # When the read runs on both engines, and the write twice as prepared statements
    try:
        with unprepared.connect() as conn:
            expected = conn.execute(read, {"p_id": channel.channel_id}).all()
    finally:
        unprepared.dispose()
    with engine.connect() as conn:
        rows = conn.execute(read, {"p_id": channel.channel_id}).all()
        raised = conn.execute(raise_timeout, {"p_id": channel.channel_id, "p_ms": 6_000})
        raised_rows, raised_count = raised.all(), raised.rowcount
        again = conn.execute(raise_timeout, {"p_id": channel.channel_id, "p_ms": 6_000})
        again_rows, again_count = again.all(), again.rowcount
        conn.commit()

    # Then the read answers the same values of the same types (the JSON decoded, the
    # instants aware UTC), and the write answers its row once, then, matching none, nothing
    assert rows == expected and len(rows) == 1
    assert [type(v) for v in rows[0]] == [type(v) for v in expected[0]]
    assert rows[0].target["type"] == "python"
    assert raised_count == 1 and raised_rows == [(channel.channel_id, 6_000, channel.updated_at)]
    assert (again_rows, again_count) == ([], 0)
    assert pg_ledger.channels.get_channel(channel.channel_id).timeout_ms == 6_000  # committed


def test_a_listener_sees_every_statement_the_ledger_sends(pg_ledger: Ledger) -> None:
    # Given a listener on the ledger's engine and an occurrence due
    empty_tables(pg_ledger)
    due = seed_due(pg_ledger)
    sent: list[str] = []

    def watch(*args: Any) -> None:
        sent.append(args[2])

    sa.event.listen(pg_ledger.engine, "before_cursor_execute", watch)
    try:
        # When the ledger claims it (one statement on the hottest path)
        assert [o.id for o in pg_ledger.attempts.claim("node-a", 10, 60).leased] == [due.id]
    finally:
        sa.event.remove(pg_ledger.engine, "before_cursor_execute", watch)

    # Then the listener saw the claim's UPDATE
    assert any(statement.lstrip().startswith("UPDATE cron_occurrences") for statement in sent)


def test_a_statement_missing_a_parameter_is_refused_by_name(engine: sa.Engine) -> None:
    with engine.connect() as conn, pytest.raises(sa.exc.StatementError, match="'b'"):
        conn.execute(ADD, {"a": 1})


def test_a_failed_prepared_statement_raises_as_sqlalchemy_and_keeps_its_connection(
    engine: sa.Engine,
) -> None:
    pid = sa.select(sa.func.pg_backend_pid())
    bad = sa.select(sa.cast(sa.bindparam("p", type_=sa.String), sa.Integer))
    with engine.connect() as conn:
        before = conn.execute(pid).scalar_one()
        with pytest.raises(sa.exc.DBAPIError, match="invalid input syntax") as raised:
            conn.execute(bad, {"p": "x"})
        conn.rollback()
        assert not raised.value.connection_invalidated
        assert conn.execute(bad, {"p": "7"}).scalar_one() == 7  # prepared, still usable
    with engine.connect() as conn:
        assert conn.execute(pid).scalar_one() == before  # the same session, kept by the pool


@pytest.mark.parametrize("settle_secs", [0.0, 0.3], ids=["at-once", "server-said-why"])
def test_a_lost_connection_drops_every_connection_it_went_with(
    pg_ledger: Ledger, pg_database_url: str, settle_secs: float
) -> None:
    # Given a ledger with two pooled connections, both of whose server sessions are killed
    # (a restart or a failover)
    empty_tables(pg_ledger)
    ledger = Ledger.connect(pg_database_url, pool_size=2, max_overflow=0)
    pid = sa.text("SELECT pg_backend_pid()")
    try:
        with ledger.engine.connect() as one, ledger.engine.connect() as two:
            pids = {one.execute(pid).scalar_one(), two.execute(pid).scalar_one()}
        with pg_ledger.engine.connect() as conn:
            for p in pids:
                conn.execute(sa.text("SELECT pg_terminate_backend(:p)"), {"p": p})
        # (given time, the server's "terminating connection" message is read before the
        # socket's end: a server error, not a network one, which must count as a loss too)
        time.sleep(settle_secs)

        # When a direct statement meets one of them
        with pytest.raises(DatabaseUnavailable):
            ledger.attempts.claim(str(uuid.uuid4()), 10, 60)

        # Then the next two statements, at once, both get live connections
        with ledger.engine.connect() as one, ledger.engine.connect() as two:
            fresh = {one.execute(pid).scalar_one(), two.execute(pid).scalar_one()}
        assert not fresh & pids
        assert ledger.reporting.in_flight_count() == 0
    finally:
        ledger.dispose()


@pytest.mark.parametrize("prepared", [True, False], ids=["prepared", "unprepared"])
def test_a_write_on_a_connection_a_listener_ran_sql_on_is_still_committed(
    pg_ledger: Ledger, pg_database_url: str, prepared: bool
) -> None:
    # Given an engine whose new connections run SQL in a listener
    empty_tables(pg_ledger)
    due = seed_due(pg_ledger)
    engine = create_ledger_engine(
        pg_database_url, prepared_statements=prepared, pool_size=1, max_overflow=0
    )

    @sa.event.listens_for(engine, "connect")
    def leave_open(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.cursor().execute("SELECT %s", (1,))  # pg8000's would BEGIN first

    # When a claim (one statement) runs there and the connection goes back to the pool
    ledger = Ledger(engine)
    try:
        assert [o.id for o in ledger.attempts.claim("node-a", 10, 60).leased] == [due.id]
    finally:
        ledger.dispose()

    # Then the claim was committed, not rolled back with a transaction the listener began
    assert pg_ledger.occurrences.get_occurrence(due.id).status == CLAIMED
