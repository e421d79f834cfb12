"""A revision's backfill of a large table runs in committed batches, stops at its deadline
with a clear error, and the next run resumes where it stopped."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from cronledger.ledger import DeadlineReached
from cronledger.ledger.online_ddl import backfill_in_batches
from tests.conftest import PG_SERVER_URL
from tests.pg import scratch_database

ROWS = 60_000


@pytest.fixture
def big_table() -> Iterator[sa.Engine]:
    with scratch_database(PG_SERVER_URL, "backfill") as url:
        engine = sa.create_engine(url, isolation_level="AUTOCOMMIT")
        with engine.connect() as conn:
            conn.execute(sa.text("CREATE TABLE big (id bigint PRIMARY KEY, late integer)"))
            conn.execute(
                sa.text(f"INSERT INTO big (id) SELECT g FROM generate_series(1, {ROWS}) g")
            )
        yield engine
        engine.dispose()


def filled(engine: sa.Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.text("SELECT count(late) FROM big")).scalar_one())


def test_a_backfill_stopped_at_its_deadline_keeps_its_batches_and_resumes(
    big_table: sa.Engine,
) -> None:
    # Given a deadline that comes after three batches (a clock that moves a second a look)
    ticks = iter(range(100))
    with big_table.connect() as conn, pytest.raises(DeadlineReached, match="stopped at its"):
        backfill_in_batches(
            conn,
            "big",
            "late = id * 2",
            "late IS NULL",
            batch=5_000,
            until=3,
            clock=lambda: next(ticks),
        )
    # Then the batches it ran are committed, not rolled back with the stop
    partly = filled(big_table)
    assert partly == 3 * 5_000
    # When the next run has time, it resumes and finishes, touching only what was left
    with big_table.connect() as conn:
        rest = backfill_in_batches(conn, "big", "late = id * 2", "late IS NULL", batch=5_000)
    assert rest == ROWS - partly
    with big_table.connect() as conn:
        wrong = conn.execute(sa.text("SELECT count(*) FROM big WHERE late <> id * 2")).scalar()
    assert filled(big_table) == ROWS
    assert wrong == 0
