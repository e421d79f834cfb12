"""A claim loop with no room to claim into (every local worker busy, or `max_in_flight`
reached) waits for room instead of asking the database again at once: due rows stay due, so
"sleep until the next due instant" alone would never sleep."""

from __future__ import annotations

import time
from datetime import timedelta

from cronledger.claim import NO_ROOM_NAP_SECS, run_claim_loop
from cronledger.invokers import OneByOne
from cronledger.ledger import PENDING, Ledger
from cronledger.local import LocalScheduler
from cronledger.settings import Settings
from tests.ledger.helpers import row, sent_statements

RUN_SECS = 0.6


class Collect(OneByOne):
    def __init__(self) -> None:
        self.dispatched: list[str] = []

    def dispatch(self, occurrence_id: str, claimant: str) -> None:
        self.dispatched.append(occurrence_id)


def test_a_claim_loop_with_no_room_waits_instead_of_spinning(ledger: Ledger) -> None:
    # Given a backlog of due rows, and a process whose workers are all busy
    now = ledger.db_now()
    ledger.insert_occurrences(row(now - timedelta(seconds=s)) for s in range(1, 6))
    invoker = Collect()

    # When the claim loop runs for a while with no room
    with sent_statements(ledger.engine) as sent:
        run_claim_loop(
            ledger, Settings(), invoker, until=time.monotonic() + RUN_SECS, room=lambda: 0
        )

    # Then it claimed nothing and looked about once per nap, not thousands of times
    assert invoker.dispatched == []
    rounds = RUN_SECS / NO_ROOM_NAP_SECS
    assert len(sent) <= 3 * (rounds + 1), f"{len(sent)} statements in {RUN_SECS} s"


def test_a_claim_loop_claims_as_soon_as_room_appears(ledger: Ledger) -> None:
    # Given a backlog, and workers that come free a moment after the loop starts
    now = ledger.db_now()
    ledger.insert_occurrences(row(now - timedelta(seconds=s)) for s in range(1, 4))
    free_at = time.monotonic() + 0.2
    invoker = Collect()

    # When the loop runs past that moment
    run_claim_loop(
        ledger,
        Settings(),
        invoker,
        until=time.monotonic() + 0.5,
        room=lambda: 10 if time.monotonic() >= free_at else 0,
    )

    # Then the backlog was dispatched
    assert len(invoker.dispatched) == 3


def test_a_scheduler_whose_workers_are_shut_down_claims_nothing(ledger: Ledger) -> None:
    # Given due rows, and a local scheduler whose pool no longer takes attempts (it is
    # draining, or the interpreter is exiting) while its loops still run
    now = ledger.db_now()
    ledger.insert_occurrences(row(now - timedelta(seconds=s)) for s in range(1, 4))
    scheduler = LocalScheduler(ledger, Settings(poll_interval_ms=100), workers=2)
    scheduler.invoker.shutdown(0.0)

    # When the loops run for a few poll intervals
    with sent_statements(ledger.engine) as sent:
        scheduler.start()
        time.sleep(RUN_SECS)
        scheduler.shutdown(5.0)

    # Then not one row was claimed: no claim, failed dispatch and return to pending, over
    # and over
    rows = ledger.list_occurrences().data
    assert [(o.status, o.attempt) for o in rows] == [(PENDING, 0)] * 3
    writes = [st for st, _ in sent if st.lstrip().upper().startswith("UPDATE CRON_OCCURRENCES")]
    assert writes == []
