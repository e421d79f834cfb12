"""A reconcile pass's writes reach PostgreSQL as one statement however many channels are
due (one JSON parameter, not a parameter per cell), and every value survives the trip."""

from __future__ import annotations

import socket
from datetime import timedelta

import sqlalchemy as sa

from cronledger.ledger import PENDING, SKIPPED_MISFIRE, CursorMove, Ledger
from tests.ledger.helpers import empty_tables, row, sent_statements, upsert_cursor

PASS_SIZE = 10_000


def test_ten_thousand_rows_and_cursors_are_one_statement(pg_ledger: Ledger) -> None:
    # Given ten thousand cursors at t0, as a pass over ten thousand due channels finds them
    empty_tables(pg_ledger)
    t0 = pg_ledger.db_now()
    t1 = t0 + timedelta(minutes=1)
    ids = [f"ch-{n:05d}" for n in range(PASS_SIZE)]
    with pg_ledger.engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO cron_schedule_state (channel_id, channel_version, config_hash, "
                "next_fire_at, updated_at) SELECT unnest(CAST(:ids AS text[])), 1, 'h', :t0, :t0"
            ),
            {"ids": ids, "t0": t0},
        )

    # When the pass writes a row per channel and moves every cursor
    with sent_statements(pg_ledger.engine) as sent:
        inserted, won = pg_ledger.occurrences.materialise(
            (row(t0, channel_id) for channel_id in ids),
            (CursorMove(channel_id, t0, t1, "h") for channel_id in ids),
        )

    # Then that took one statement, and every row and cursor is where it should be
    assert (inserted, len(won)) == (PASS_SIZE, PASS_SIZE)
    assert len(sent) == 1
    with pg_ledger.engine.connect() as conn:
        moved = conn.execute(
            sa.text("SELECT count(*) FROM cron_schedule_state WHERE next_fire_at = :t1"),
            {"t1": t1},
        ).scalar_one()
        pending = conn.execute(
            sa.text("SELECT count(*) FROM cron_occurrences WHERE status = 'pending'")
        ).scalar_one()
    assert (moved, pending) == (PASS_SIZE, PASS_SIZE)


def test_a_thousand_cursor_moves_fit_one_sqlite_pass(sqlite_ledger: Ledger) -> None:
    # Given a thousand cursors at t0 (SQLite refuses an expression deeper than 1,000)
    t0 = sqlite_ledger.db_now()
    t1 = t0 + timedelta(minutes=1)
    ids = [f"ch-{n:04d}" for n in range(1000)]
    for channel_id in ids:
        upsert_cursor(sqlite_ledger, channel_id, 1, "h", t0)

    # When one pass moves them all and writes a row each
    inserted, won = sqlite_ledger.occurrences.materialise(
        (row(t0, channel_id) for channel_id in ids),
        (CursorMove(channel_id, t0, t1, "h") for channel_id in ids),
    )

    # Then every cursor moved and every row went in
    assert (inserted, won) == (1000, set(ids))
    assert {s.next_fire_at for s in sqlite_ledger.cursors.schedule_states()} == {t1}


def test_every_value_survives_a_batched_insert(ledger: Ledger) -> None:
    # Given rows whose text needs escaping, with and without optional values
    at = ledger.db_now().replace(microsecond=123456)
    awkward = 'quote " backslash \\ newline \n unicode é ✓ and a % sign'
    pending = row(at, "a", target_ref=None)
    summary = row(at - timedelta(seconds=1), "b", status=SKIPPED_MISFIRE, error_message=awkward)
    assert ledger.occurrences.insert_occurrences([pending, summary]) == 2

    # Then each reads back as it was given
    first, second = (
        ledger.occurrences.get_occurrence(pending.id),
        ledger.occurrences.get_occurrence(summary.id),
    )
    assert (first.status, first.target_ref, first.error_message) == (PENDING, None, None)
    assert first.scheduled_for == at
    assert first.completed_at is None and first.attempt == 0
    assert (second.status, second.error_message) == (SKIPPED_MISFIRE, awkward)
    assert second.completed_at is not None


def test_a_batched_insert_with_a_duplicate_instant_inside_it_keeps_one(ledger: Ledger) -> None:
    at = ledger.db_now()
    assert (
        ledger.occurrences.insert_occurrences([row(at), row(at), row(at + timedelta(seconds=1))])
        == 2
    )


def test_postgresql_connections_send_each_message_at_once(pg_ledger: Ledger) -> None:
    # Nagle's algorithm would hold the tail of a large message for the server's delayed ACK
    # (40 ms a statement); the ledger's connections turn it off, as libpq does.
    with pg_ledger.engine.connect() as conn:
        sock = conn.connection.driver_connection.socket
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
