"""A local scheduler whose workers no longer take attempts claims nothing, rather than
claiming, failing to dispatch and handing back over and over; under a backlog the claims
grow to what there is room for, and shrink back once the backlog is gone. The claim
loop's own pacing with no room is tested on the in-memory ledger
(tests/unit/test_claim_loop.py)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import timedelta

from cronledger.claim import ClaimRound, next_batch, run_claim_loop
from cronledger.invokers import OneByOne
from cronledger.ledger import PENDING, Ledger
from cronledger.local import LocalScheduler
from cronledger.settings import Settings
from tests.ledger.helpers import row, sent_statements

RUN_SECS = 0.6


def test_a_scheduler_whose_workers_are_shut_down_claims_nothing(ledger: Ledger) -> None:
    # Given due rows, and a local scheduler whose pool no longer takes attempts (it is
    # draining, or the interpreter is exiting) while its loops still run
    now = ledger.db_now()
    ledger.occurrences.insert_occurrences(row(now - timedelta(seconds=s)) for s in range(1, 4))
    scheduler = LocalScheduler(ledger, Settings(poll_interval_ms=100), workers=2)
    scheduler.invoker.shutdown(0.0)

    # When the loops run for a few poll intervals
    with sent_statements(ledger.engine) as sent:
        scheduler.start()
        time.sleep(RUN_SECS)
        scheduler.shutdown(5.0)

    # Then not one row was claimed: no claim, failed dispatch and return to pending, over
    # and over
    rows = ledger.occurrences.list_occurrences().data
    assert [(o.status, o.attempt) for o in rows] == [(PENDING, 0)] * 3
    writes = [st for st, _ in sent if st.lstrip().upper().startswith("UPDATE CRON_OCCURRENCES")]
    assert writes == []


class Batches(OneByOne):
    """Each claim's hand-over, as the sizes of the batches dispatched."""

    def __init__(self) -> None:
        self.sizes: list[int] = []

    def dispatch_all(self, occurrence_ids: Sequence[str], claimant: str) -> dict[str, str]:
        if occurrence_ids:
            self.sizes.append(len(occurrence_ids))
        return {}


def test_a_burst_is_claimed_in_batches_that_grow_to_the_room_there_is(ledger: Ledger) -> None:
    # Given a burst of 300 due rows, and the default batch size (20)
    now = ledger.db_now()
    ledger.occurrences.insert_occurrences(
        row(now - timedelta(milliseconds=ms)) for ms in range(1, 301)
    )
    roomy, tight = Batches(), Batches()

    # When a loop with room for them all drains it, and another (max_in_flight 100) finds
    # it again after the first one's leases were dropped
    run_claim_loop(ledger, Settings(max_in_flight=10_000), roomy, until=time.monotonic() + 1)
    _back_to_pending(ledger)
    run_claim_loop(ledger, Settings(max_in_flight=100), tight, until=time.monotonic() + 0.5)

    # Then each full claim doubled the next, within the room under max_in_flight
    assert roomy.sizes == [20, 40, 80, 160]
    assert tight.sizes == [20, 40, 40], "never more in flight than max_in_flight"


def test_the_batch_grows_after_a_full_claim_keeps_without_room_and_resets_after_a_short_one() -> (
    None
):
    settings = Settings(claim_batch_size=20)

    def after(limit: int, dispatched: int, batch: int) -> int:
        return next_batch(batch, ClaimRound(limit=limit, dispatched=["x"] * dispatched), settings)

    assert after(limit=40, dispatched=40, batch=40) == 80
    assert after(limit=0, dispatched=0, batch=640) == 640
    assert after(limit=40, dispatched=39, batch=640) == 20
    assert after(limit=1000, dispatched=1000, batch=1000) == 1000, "at most MOST_PER_CLAIM"


def _back_to_pending(ledger: Ledger) -> None:
    import sqlalchemy as sa

    from cronledger.ledger.tables import occurrences

    with ledger.engine.begin() as conn:
        conn.execute(
            sa.update(occurrences).values(
                status=PENDING, claimed_by=None, claimed_until=None, attempt=0
            )
        )
