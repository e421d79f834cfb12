"""PostgreSQL: an attempt's start reaches its occurrence by primary key whatever the planner
was told, so its cost does not grow with the work in flight: statistics taken before a burst
(the in-flight index looks empty) and plans cached while the table was small (a scan of a
few pages) are never what a start after the burst runs."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from cronledger.ledger import Ledger, Occurrence
from tests.ledger.helpers import empty_tables, row, start_attempt


@pytest.fixture
def one_connection(pg_database_url: str, pg_ledger: Ledger) -> Iterator[Ledger]:
    """A ledger on one pooled connection: every statement runs on the same session."""
    empty_tables(pg_ledger)
    ledger = Ledger.connect(pg_database_url, pool_size=1, max_overflow=0)
    yield ledger
    ledger.dispose()


def claimed(ledger: Ledger, count: int, claimant: str) -> list[Occurrence]:
    now = ledger.db_now()
    ledger.occurrences.insert_occurrences(
        row(now - timedelta(seconds=n + 1), f"{claimant}-{n % 50}") for n in range(count)
    )
    leased: list[Occurrence] = []
    while len(leased) < count:
        leased += ledger.attempts.claim(claimant, 1000, 600).leased
    return leased


def start(ledger: Ledger, occurrence: Occurrence) -> None:
    assert start_attempt(ledger, occurrence, occurrence.claimed_by or "", 1, None, 600).started


def test_a_start_after_a_burst_reaches_its_row_by_primary_key(one_connection: Ledger) -> None:
    ledger = one_connection
    # Given starts run while little was in flight, with the statistics taken then
    few = claimed(ledger, 10, "quiet")
    with ledger.engine.begin() as conn:
        conn.exec_driver_sql("ANALYZE cron_occurrences")
    for occurrence in few:
        start(ledger, occurrence)

    # When a burst of five thousand is claimed, with no ANALYZE since, and one starts
    burst = claimed(ledger, 5000, "burst")
    plans: list[str] = []

    def explain(conn: Any, cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        if "UPDATE cron_occurrences" in statement:
            cursor.execute("BEGIN")
            cursor.execute("EXPLAIN " + statement, parameters)
            plans.append("\n".join(line for (line,) in cursor.fetchall()))
            cursor.execute("ROLLBACK")

    start(ledger, burst[0])
    sa.event.listen(ledger.engine, "before_cursor_execute", explain)
    try:
        start(ledger, burst[1])
    finally:
        sa.event.remove(ledger.engine, "before_cursor_execute", explain)

    # Then no statement with parameters ran under a plan cached before the burst, and
    # the start's plan reads the row through the primary key
    with ledger.engine.connect() as conn:
        generic, custom = conn.exec_driver_sql(
            "SELECT coalesce(sum(generic_plans), 0), coalesce(sum(custom_plans), 0) "
            "FROM pg_prepared_statements WHERE cardinality(parameter_types) > 0"
        ).one()
    assert (generic, custom > 0) == (0, True)
    [plan] = plans
    assert re.search(r"Index Scan (using|on) cron_occurrences_pkey", plan), plan
    assert "ix_cron_occurrences_leased" not in plan and "Seq Scan" not in plan, plan
