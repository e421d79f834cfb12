"""A ledger write transaction that PostgreSQL aborts to break a deadlock is run again at
once: the abort rolled all of it back, so running it again writes it exactly once."""

from __future__ import annotations

import threading
import time

import sqlalchemy as sa

from cronledger.ledger import Ledger
from cronledger.ledger.tables import singletons
from tests.ledger.helpers import empty_tables

STEP_SECS = 10.0


def tokens(ledger: Ledger) -> dict[str, int]:
    with ledger.engine.connect() as conn:
        found = conn.execute(sa.select(singletons.c.singleton_key, singletons.c.fencing_token))
        return {key: int(token) for key, token in found}


def bump(conn: sa.Connection, key: str, by: int) -> None:
    conn.execute(
        sa.update(singletons)
        .where(singletons.c.singleton_key == key)
        .values(fencing_token=singletons.c.fencing_token + by)
    )


def test_a_write_aborted_by_a_deadlock_is_run_again_and_written_once(pg_ledger: Ledger) -> None:
    # Given two rows, and a peer transaction that holds the lock on "b" and will want "a"
    empty_tables(pg_ledger)  # the run's database is shared by the tests of this worker
    with pg_ledger.engine.begin() as conn:
        conn.execute(
            sa.insert(singletons),
            [{"singleton_key": k, "slot": 0, "fencing_token": 0} for k in ("a", "b")],
        )
    peer_holds_b, ledger_holds_a, peer_done = (
        threading.Event(),
        threading.Event(),
        threading.Event(),
    )
    peer_errors: list[BaseException] = []

    def peer() -> None:
        try:
            with pg_ledger.engine.begin() as conn:
                # The ledger's transaction, waiting first and checking sooner, is the victim
                conn.execute(sa.text("SET LOCAL deadlock_timeout = '10s'"))
                bump(conn, "b", 100)
                peer_holds_b.set()
                assert ledger_holds_a.wait(STEP_SECS)
                time.sleep(0.3)  # let the ledger start waiting for "b" first
                bump(conn, "a", 100)
        except BaseException as exc:  # surfaced below
            peer_errors.append(exc)
        finally:
            peer_done.set()

    calls = 0

    def body(conn: sa.Connection) -> None:
        nonlocal calls
        calls += 1
        if calls > 1:  # the run again, once the peer it deadlocked with has committed
            assert peer_done.wait(STEP_SECS)
        bump(conn, "a", 1)
        ledger_holds_a.set()
        bump(conn, "b", 1)

    thread = threading.Thread(target=peer)
    thread.start()
    assert peer_holds_b.wait(STEP_SECS)

    # When the ledger's write takes "a" and then "b", closing the cycle
    pg_ledger._atomic(body)
    thread.join()

    # Then its first run was aborted and rolled back, its second committed: each row has
    # the peer's bump and exactly one of the ledger's
    assert peer_errors == []
    assert calls == 2
    assert tokens(pg_ledger) == {"a": 101, "b": 101}
