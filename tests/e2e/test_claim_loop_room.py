"""A local scheduler whose workers no longer take attempts claims nothing, rather than
claiming, failing to dispatch and handing back over and over. The claim loop's own pacing
with no room is tested on the in-memory ledger (tests/unit/test_claim_loop.py)."""

from __future__ import annotations

import time
from datetime import timedelta

from cronledger.ledger import PENDING, Ledger
from cronledger.local import LocalScheduler
from cronledger.settings import Settings
from tests.ledger.helpers import row, sent_statements

RUN_SECS = 0.6


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
