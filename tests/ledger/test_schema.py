"""The migrations build exactly the tables the repository is written against, on both
backends, and running them again changes nothing."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext

from cronledger.ledger import Channel, Ledger, Occurrence, ScheduleState
from cronledger.ledger.migration import ALEMBIC_INI
from cronledger.ledger.tables import channels, metadata, occurrences, schedule_state
from tests.ledger.helpers import empty_tables, row
from tests.pg import scratch_database

VERSION_TABLE = "cronledger_alembic_version"
AN_INSTANT = datetime(2026, 3, 1, 2, 15, tzinfo=UTC)


def test_migrating_twice_is_a_no_op_and_records_the_head_revision(ledger: Ledger) -> None:
    ledger.migrate()

    with ledger.engine.connect() as conn:
        tables = set(sa.inspect(conn).get_table_names())
        revision = conn.execute(sa.text(f"SELECT version_num FROM {VERSION_TABLE}")).scalar_one()
    assert tables == {*metadata.tables, VERSION_TABLE}
    assert revision == "0011"


def test_the_migrated_schema_matches_the_table_definitions(ledger: Ledger) -> None:
    with ledger.engine.connect() as conn:
        context = MigrationContext.configure(
            conn,
            opts={
                "version_table": VERSION_TABLE,
                "compare_type": True,
                "include_object": built_on(conn.dialect.name),
            },
        )
        differences = compare_metadata(context, metadata)

    assert differences == []


def built_on(dialect: str) -> Callable[..., bool]:
    """Alembic's filter for the schema objects a dialect has: a table definition's object
    declared for another dialect only (`ddl_if`) is left out, as `create_all` leaves it;
    whatever the database has stays in."""

    def include(obj: Any, _name: Any, _kind: Any, _reflected: Any, _compare_to: Any) -> bool:
        only = getattr(obj, "_ddl_if", None)
        return only is None or only.dialect in (None, dialect)

    return include


def test_postgresql_indexes_only_the_live_work_for_claims(pg_ledger: Ledger) -> None:
    with pg_ledger.engine.connect() as conn:
        definitions = dict(
            conn.execute(
                sa.text(
                    "SELECT indexname, indexdef FROM pg_indexes "
                    "WHERE tablename = 'cron_occurrences' AND indexdef LIKE '%WHERE%'"
                )
            ).all()
        )

    assert set(definitions) == {
        "ix_cron_occurrences_pending",
        "ix_cron_occurrences_leased",
        "ix_cron_occurrences_unjudged",
        "ix_cron_occurrences_overdue",
        "ix_cron_occurrences_retention",
    }
    assert "IS NOT NULL" in definitions["ix_cron_occurrences_overdue"], "only the watched"
    assert "'pending'" in definitions["ix_cron_occurrences_pending"]
    assert "'claimed'" in definitions["ix_cron_occurrences_leased"]
    assert "'running'" in definitions["ix_cron_occurrences_leased"]
    assert "'claimed'" not in definitions["ix_cron_occurrences_unjudged"], "a claim leaves it"
    claims = [d for name, d in definitions.items() if name != "ix_cron_occurrences_retention"]
    assert not any("'completed'" in d for d in claims), "history is not indexed for claims"
    retention = definitions["ix_cron_occurrences_retention"]
    assert "'completed'" in retention and "'pending'" not in retention, "history only"


def test_the_postgresql_claim_reads_the_pending_index_not_the_table(pg_ledger: Ledger) -> None:
    # Given a backlog of three thousand due rows
    empty_tables(pg_ledger)
    now = pg_ledger.db_now()
    pg_ledger.occurrences.insert_occurrences(row(now - timedelta(seconds=i)) for i in range(3000))
    with pg_ledger.engine.begin() as conn:
        conn.execute(sa.text("ANALYZE cron_occurrences"))
    plans: list[str] = []

    def explain(conn, cursor, statement, parameters, context, executemany) -> None:
        if statement.startswith("UPDATE cron_occurrences SET status"):
            cursor.execute("EXPLAIN " + statement, parameters)
            plans.append("\n".join(line for (line,) in cursor.fetchall()))

    # When a claim runs
    sa.event.listen(pg_ledger.engine, "before_cursor_execute", explain)
    try:
        assert len(pg_ledger.attempts.claim("node-plan", 50, 60).leased) == 50
    finally:
        sa.event.remove(pg_ledger.engine, "before_cursor_execute", explain)

    # Then the claim stands (the listener's cursor did not leave it in a rolled-back
    # transaction), and each arm is a scan of its partial index, the pending one in due
    # order (no sort)
    with pg_ledger.engine.connect() as conn:
        claimed = conn.execute(
            sa.select(sa.func.count()).where(occurrences.c.claimed_by == "node-plan")
        ).scalar_one()
    assert claimed == 50
    [plan] = plans
    assert "Index Scan using ix_cron_occurrences_pending" in plan, plan
    assert "using ix_cron_occurrences_leased" in plan, plan
    assert "Sort Key: cron_occurrences_1.due_at" not in plan, plan


#: Rows as the first revision held them: (id, trigger, status, attempt, started).
OLD_ROWS = [
    ("old", "cron", "pending", 0, False),
    ("started", "cron", "running", 1, True),
    ("retried", "cron", "pending", 2, False),
    ("manual", "manual", "pending", 0, False),
]


@pytest.mark.parametrize("backend", ["postgresql", "sqlite"])
def test_upgrading_from_0001_keeps_every_row_and_its_meaning(
    backend: str, pg_database_url: str, tmp_path: Path
) -> None:
    # Given a database at the first revision, holding occurrences in several states
    with contextlib.ExitStack() as stack:
        if backend == "postgresql":
            url = stack.enter_context(scratch_database(pg_database_url, "upgrade"))
        else:
            url = f"sqlite:///{tmp_path / 'old.db'}"
        ledger = Ledger.connect(url)
        stack.callback(ledger.dispose)
        config = Config(str(ALEMBIC_INI))
        at = AN_INSTANT.replace(tzinfo=None) if backend == "sqlite" else AN_INSTANT
        with ledger.engine.begin() as conn:
            config.attributes["connection"] = conn
            command.upgrade(config, "0001")
            for n, (id_, trigger, status, attempt, started) in enumerate(OLD_ROWS):
                conn.execute(
                    sa.text(
                        "INSERT INTO cron_occurrences (id, channel_id, channel_name,"
                        " channel_version, trigger, scheduled_for, status, attempt, started_at,"
                        " created_at, updated_at) VALUES"
                        " (:id, 'ch', 'nightly', 1, :trigger, :at, :status, :attempt, :started,"
                        " :at, :at)"
                    ),
                    {
                        "id": id_,
                        "trigger": trigger,
                        "at": at + timedelta(seconds=n),
                        "status": status,
                        "attempt": attempt,
                        "started": at if started else None,
                    },
                )

        # When it is migrated to the newest schema
        ledger.migrate()

        # Then each row is still there, due at its instant, allowed the default three
        # attempts, and judged already unless it is a cron row that never started nor retried
        for n, (id_, _, _, _, _) in enumerate(OLD_ROWS):
            kept = ledger.occurrences.get_occurrence(id_)
            assert kept.scheduled_for == kept.due_at == AN_INSTANT + timedelta(seconds=n)
            assert kept.max_attempts == 3
            assert kept.misfire_judged is (id_ != "old"), id_
        # …and the pending ones are claimable as before
        claimed = [o.id for o in ledger.attempts.claim("node", 10, 60).leased]
        assert claimed == ["old", "retried", "manual"]


def test_sqlite_runs_in_wal_mode_with_a_busy_timeout(sqlite_ledger: Ledger) -> None:
    with sqlite_ledger.engine.connect() as conn:
        mode = conn.exec_driver_sql("PRAGMA journal_mode").scalar_one()
        timeout_ms = conn.exec_driver_sql("PRAGMA busy_timeout").scalar_one()

    assert mode == "wal", "readers must not block the writer, nor it them"
    assert timeout_ms >= 10_000, "a writer waits its turn instead of failing at once"


def test_the_models_list_their_tables_columns_in_table_order() -> None:
    # The ledger builds them from rows positionally (`occurrence_of`, `Channel(*row)`).
    assert [f.name for f in dataclasses.fields(Occurrence)] == occurrences.c.keys()
    assert [f.name for f in dataclasses.fields(Channel)] == channels.c.keys()
    assert [f.name for f in dataclasses.fields(ScheduleState)] == schedule_state.c.keys()
