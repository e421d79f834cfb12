"""Upgrades the running code survives, in both directions: code meets a schema one revision
newer than it was written for (the previous release runs while the deploy migrates), or a
schema newer than any revision it knows (a rollback); and a migration interrupted halfway, or
out of time, leaves a database the next run finishes."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.config import Config

from cronledger.ledger import COMPLETED, DeadlineReached, Ledger
from cronledger.ledger.migration import (
    ALEMBIC_INI,
    MIGRATION_LOCK_ID,
    VERSION_TABLE,
)
from tests.pg import scratch_database

AN_INSTANT = datetime(2026, 3, 1, 2, 15, tzinfo=UTC)
#: How long a migration's DDL waits for a table lock (ledger/migrations/env.py).
LOCK_TIMEOUT_SECS = 5


@contextlib.contextmanager
def database(backend: str, pg_database_url: str, tmp_path: Path) -> Iterator[Ledger]:
    """An empty database of its own on `backend`, and a ledger on it."""
    with contextlib.ExitStack() as stack:
        if backend == "postgresql":
            url = stack.enter_context(scratch_database(pg_database_url, "upgrades"))
        else:
            url = f"sqlite:///{tmp_path / 'upgrades.db'}"
        ledger = Ledger.connect(url)
        stack.callback(ledger.dispose)
        yield ledger


def migrate_to(ledger: Ledger, revision: str) -> None:
    """Run the migrations up to `revision` only, as an older release's deploy did."""
    config = Config(str(ALEMBIC_INI))
    with ledger.engine.begin() as conn:
        config.attributes["connection"] = conn
        command.upgrade(config, revision)


def recorded_revision(ledger: Ledger) -> str:
    with ledger.engine.connect() as conn:
        return str(conn.execute(sa.text(f"SELECT version_num FROM {VERSION_TABLE}")).scalar_one())


def schema(ledger: Ledger) -> dict[str, object]:
    """Each table's columns (name, type, nullability) and indexes, as the database has them."""
    inspector = sa.inspect(ledger.engine)
    return {
        table: (
            [(c["name"], str(c["type"]), c["nullable"]) for c in inspector.get_columns(table)],
            sorted(
                (i["name"] or "", tuple(i["column_names"])) for i in inspector.get_indexes(table)
            ),
        )
        for table in inspector.get_table_names()
    }


@pytest.mark.parametrize("backend", ["postgresql", "sqlite"])
def test_a_database_migrated_by_newer_code_is_left_as_it_is_and_the_log_says_so(
    backend: str, pg_database_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with database(backend, pg_database_url, tmp_path) as ledger:
        # Given a database a later release migrated past this code's newest revision
        ledger.migrate()
        with ledger.engine.begin() as conn:
            conn.execute(sa.text(f"UPDATE {VERSION_TABLE} SET version_num = '0099'"))
        before = schema(ledger)

        # When this code's deploy migrates it
        with caplog.at_level(logging.INFO, logger="cronledger.ledger.migration"):
            ledger.migrate()

        # Then it succeeded, changed nothing, and said why
        assert recorded_revision(ledger) == "0099"
        assert schema(ledger) == before
        [said] = [r.getMessage() for r in caplog.records if "ahead of this code" in r.message]
        assert "0099 is unknown here" in said and "newest is 0011" in said


#: The columns of `cron_occurrences` the previous release (schema 0005) writes, as it lists
#: them in its INSERT.
PREVIOUS_RELEASE_COLUMNS = (
    "id, channel_id, channel_name, channel_version, executing_version, target_ref, trigger,"
    " scheduled_for, status, attempt, claimed_by, claimed_until, singleton_key, singleton_slot,"
    " fencing_token, trace_id, error_message, result, started_at, completed_at, created_at,"
    " updated_at, due_at, max_attempts, misfire_judged"
)


def test_the_previous_releases_writes_succeed_against_the_new_schema(
    pg_database_url: str, tmp_path: Path
) -> None:
    with database("postgresql", pg_database_url, tmp_path) as ledger:
        # Given the previous release's column list, which is all schema 0005 had
        migrate_to(ledger, "0005")
        at_0005 = [c["name"] for c in sa.inspect(ledger.engine).get_columns("cron_occurrences")]
        assert PREVIOUS_RELEASE_COLUMNS.split(", ") == at_0005

        # When the schema moves to the newest revision while that release still runs, and it
        # materialises, claims and settles an occurrence with its own statements
        ledger.migrate()
        with ledger.engine.begin() as conn:
            inserted = conn.execute(
                sa.text(
                    f"INSERT INTO cron_occurrences ({PREVIOUS_RELEASE_COLUMNS}) VALUES"
                    " ('occ-1', 'ch', 'nightly', 1, NULL, NULL, 'cron', :at, 'pending', 0,"
                    " NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, :at, :at,"
                    " :at, 3, false) ON CONFLICT (channel_id, scheduled_for) DO NOTHING"
                ),
                {"at": AN_INSTANT},
            )
            claimed = conn.execute(
                sa.text(
                    "UPDATE cron_occurrences SET status = 'claimed', attempt = attempt + 1,"
                    " claimed_by = 'old-node', claimed_until = now() + interval '60 seconds',"
                    " updated_at = now() WHERE id = 'occ-1' AND status = 'pending'"
                )
            )
            settled = conn.execute(
                sa.text(
                    "UPDATE cron_occurrences SET status = 'completed', claimed_by = NULL,"
                    " claimed_until = NULL, result = 'done', completed_at = now(),"
                    " updated_at = now() WHERE id = 'occ-1' AND claimed_by = 'old-node'"
                    " AND status = 'claimed'"
                )
            )

        # Then each wrote its row, and the new code reads it back as the old code meant it
        assert (inserted.rowcount, claimed.rowcount, settled.rowcount) == (1, 1, 1)
        occurrence = ledger.occurrences.get_occurrence("occ-1")
        assert occurrence.status == COMPLETED
        assert occurrence.attempt == 1
        assert occurrence.result == "done"
        assert occurrence.claimed_by is None
        assert occurrence.scheduled_for == occurrence.due_at == AN_INSTANT
        assert occurrence.overdue_at is None, "the new column is empty, not a guess"


def index_validity(ledger: Ledger, name: str) -> bool | None:
    with ledger.engine.connect() as conn:
        found = conn.execute(
            sa.text(
                "SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
                " WHERE c.relname = :name"
            ),
            {"name": name},
        ).scalar_one_or_none()
    return None if found is None else bool(found)


def test_an_index_an_interrupted_migration_left_invalid_is_built_again(
    pg_database_url: str, tmp_path: Path
) -> None:
    with database("postgresql", pg_database_url, tmp_path) as ledger:
        # Given a run of 0006 stopped after its first commit, midway through building an
        # index concurrently (which leaves the index behind, marked invalid)
        migrate_to(ledger, "0005")
        with ledger.engine.begin() as conn:
            conn.execute(sa.text("ALTER TABLE cron_occurrences ADD COLUMN overdue_at timestamptz"))
            conn.execute(
                sa.text(
                    "CREATE INDEX ix_cron_occurrences_overdue ON cron_occurrences (overdue_at)"
                    " WHERE overdue_at IS NOT NULL"
                )
            )
            conn.execute(
                sa.text(
                    "UPDATE pg_index SET indisvalid = false"
                    " WHERE indexrelid = 'ix_cron_occurrences_overdue'::regclass"
                )
            )
        assert index_validity(ledger, "ix_cron_occurrences_overdue") is False

        # When the next deploy migrates
        ledger.migrate()

        # Then the revision finished, and the index is one the planner may use; the head
        # serves due cursors from one index (`ix_cron_schedule_state_due`), valid too
        assert recorded_revision(ledger) == "0011"
        assert index_validity(ledger, "ix_cron_occurrences_overdue") is True
        assert index_validity(ledger, "ix_cron_schedule_state_due") is True
        assert index_validity(ledger, "ix_cron_schedule_state_next") is None


def test_a_migration_kept_waiting_past_its_deadline_stops_naming_it(
    pg_database_url: str, tmp_path: Path
) -> None:
    with (
        database("postgresql", pg_database_url, tmp_path) as ledger,
        ledger.engine.connect() as other,
    ):
        # Given another deploy's migration holding the lock
        other.execute(sa.select(sa.func.pg_advisory_lock(MIGRATION_LOCK_ID)))
        other.commit()

        # When this one may take a second
        started = time.monotonic()
        with pytest.raises(DeadlineReached, match=r"deadline of 1 s .*held the lock"):
            ledger.migrate(until=started + 1.0)

        # Then it stopped by then and created nothing
        assert time.monotonic() - started < 1.5
        assert "cron_occurrences" not in sa.inspect(ledger.engine).get_table_names()


def test_ddl_kept_waiting_by_a_long_transaction_gives_way_and_is_tried_again(
    pg_database_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with database("postgresql", pg_database_url, tmp_path) as ledger:
        # Given the previous schema, and a transaction reading the occurrences for longer
        # than DDL may wait for its lock
        migrate_to(ledger, "0005")
        held = threading.Event()

        def long_reader() -> None:
            with ledger.engine.begin() as conn:
                conn.execute(sa.text("SELECT count(*) FROM cron_occurrences"))
                held.set()
                time.sleep(LOCK_TIMEOUT_SECS + 1)

        reader = threading.Thread(target=long_reader)
        reader.start()
        held.wait()

        # When the deploy migrates meanwhile
        with caplog.at_level(logging.WARNING, logger="cronledger.ledger.migration"):
            ledger.migrate()
        reader.join()

        # Then the revision gave way once (letting the table's other users through) and,
        # tried again once the reader was done, completed
        assert recorded_revision(ledger) == "0011"
        waited = [r for r in caplog.records if "waited too long for a table lock" in r.message]
        assert len(waited) == 1


@pytest.mark.parametrize("backend", ["postgresql", "sqlite"])
def test_channels_written_before_labels_have_none_after_the_upgrade(
    backend: str, pg_database_url: str, tmp_path: Path
) -> None:
    with database(backend, pg_database_url, tmp_path) as ledger:
        # Given a channel and its first version written by the release before labels (0006
        # builds indexes in autocommit blocks: migrated as the ledger does, outside a
        # transaction)
        config = Config(str(ALEMBIC_INI))
        with ledger.engine.connect() as conn:
            config.attributes["connection"] = conn
            command.upgrade(config, "0009")
            conn.commit()
        document = {"transport_config": '{"schedule": "0 15 2 * * *"}', "target": "{}"}
        with ledger.engine.begin() as conn:
            conn.execute(
                sa.text(
                    "INSERT INTO cron_channels (channel_id, name, status, version,"
                    " transport_config, target, timeout_ms, created_at, updated_at)"
                    " VALUES ('c1', 'old', 'active', 1, :transport_config, :target, 5000,"
                    " :at, :at)"
                ),
                {**document, "at": AN_INSTANT.replace(tzinfo=None)},
            )
            conn.execute(
                sa.text(
                    "INSERT INTO cron_channel_versions (channel_id, version, transport_config,"
                    " target, timeout_ms, created_at)"
                    " VALUES ('c1', 1, :transport_config, :target, 5000, :at)"
                ),
                {**document, "at": AN_INSTANT.replace(tzinfo=None)},
            )

        # When the deploy migrates, and the channel is relabelled
        ledger.migrate()
        ledger.channels.new_channel_version(
            "c1", {"schedule": "0 15 2 * * *"}, {}, 5000, labels={"team": "billing"}
        )

        # Then the old version has no labels, the new one has them, and a selector finds it
        assert ledger.channels.get_channel("c1", version=1).labels == {}
        assert ledger.channels.get_channel("c1").labels == {"team": "billing"}
        assert [c.name for c in ledger.channels.list_channels(labels={"team": "billing"}).data] == [
            "old"
        ]
        assert ledger.channels.list_channels(labels={"team": "ops"}).data == []
