"""Claim and dispatch: lease due occurrences and hand each to an executor.

A claim is one conditional statement (`FOR UPDATE SKIP LOCKED` on PostgreSQL), so any number
of claimers may run at once and none shares a row. Each round mints a fresh claimant id and
the executor starts the attempt only under it: a duplicate or late delivery finds the
occurrence no longer its own and writes nothing. An expired lease on its last attempt comes
back settled `failed` ("abandoned: …") and is logged.

A batch is bounded by the room under `max_in_flight` (a lease ticks from the claim) and sized
to the backlog: `claim_batch_size` while claims come back short, doubled after each full one
up to `MOST_PER_CLAIM`. What the invoker could not hand over goes straight back to `pending`.
A failed claim backs off (`pacing.Backoff`), probing for the database's return.

On Lambda the loop runs only while something is due before the invocation's deadline
(`while_due`): rows exist ahead of their time, so "nothing due" is known, not guessed.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from cronledger import metrics
from cronledger.ids import new_claimant_id
from cronledger.invokers import Invoker
from cronledger.ledger import FAILED
from cronledger.pacing import (
    JOB_HEARTBEAT_EVERY_SECS,
    SYSTEM_CLOCK,
    Backoff,
    Clock,
    Every,
    sleep_until_next,
)
from cronledger.ports import ClaimPort
from cronledger.settings import Settings

log = logging.getLogger(__name__)

JOB = "claim"
#: How long a loop waits for room once `max_in_flight` is reached, before counting again:
#: short enough to add little lag, long enough not to spin on the database.
NO_ROOM_NAP_SECS = 0.01
#: How often a loop whose local workers are all busy looks at them again (no database call).
WORKER_WAIT_SECS = 0.005
#: The most rows one claim leases, however large the backlog and the room.
MOST_PER_CLAIM = 1000


@dataclass
class ClaimRound:
    claimant: str | None = None
    dispatched: list[str] = field(default_factory=list)
    returned: list[str] = field(default_factory=list)
    #: Expired leases on their last allowed attempt, settled `failed` by the claim.
    abandoned: list[str] = field(default_factory=list)
    limit: int = 0
    error: Exception | None = None

    @property
    def full(self) -> bool:
        """It claimed all it asked for: more may be due right now."""
        settled = len(self.dispatched) + len(self.returned) + len(self.abandoned)
        return 0 < self.limit <= settled


def claim_once(
    ledger: ClaimPort,
    settings: Settings,
    invoker: Invoker,
    room: int | None = None,
    batch: int | None = None,
) -> ClaimRound:
    """One round: claim up to `batch` (default `claim_batch_size`) that there is room for and
    dispatch each occurrence. `room`: how many more attempts this process can start now (a
    local pool's free workers); `max_in_flight` is honoured too."""
    round_ = ClaimRound()
    wanted = settings.claim_batch_size if batch is None else batch
    try:
        in_flight = ledger.reporting.in_flight_count(at_most=settings.max_in_flight)
        limit = min(wanted, settings.max_in_flight - in_flight)
        round_.limit = limit if room is None else min(limit, room)
        if round_.limit <= 0:
            return round_
        round_.claimant = new_claimant_id()
        result = ledger.attempts.claim(round_.claimant, round_.limit, settings.claim_lease_secs)
    except Exception as exc:
        metrics.record_db_unavailable(JOB)
        round_.error = exc
        return round_
    claimed = result.leased
    round_.abandoned = [occurrence.id for occurrence in result.abandoned]
    for occurrence in result.abandoned:
        log.warning("occurrence %s: %s", occurrence.id, occurrence.error_message)
    if result.abandoned:
        metrics.record_occurrences(FAILED, len(result.abandoned))

    failed = invoker.dispatch_all([o.id for o in claimed], round_.claimant)
    for occurrence in claimed:
        if occurrence.id not in failed:
            round_.dispatched.append(occurrence.id)
            continue
        # Hand it straight back rather than leave it leased to nobody until expiry.
        why = failed[occurrence.id]
        log.warning("dispatch of %s failed, returning it to pending: %s", occurrence.id, why)
        try:
            if ledger.attempts.release_claim(occurrence.id, round_.claimant):
                round_.returned.append(occurrence.id)
        except Exception as release_exc:
            log.warning(
                "could not return %s; its lease will expire: %s", occurrence.id, release_exc
            )
    return round_


def run_claim_loop(
    ledger: ClaimPort,
    settings: Settings,
    invoker: Invoker,
    until: float,
    stop: threading.Event | None = None,
    room: Callable[[], int] | None = None,
    wake: threading.Event | None = None,
    *,
    while_due: bool = False,
    clock: Clock = SYSTEM_CLOCK,
) -> int:
    """Claim and dispatch until the monotonic deadline `until` (or `stop`), sleeping until the
    next due instant or the poll interval, whichever is sooner; a full batch goes round again
    at once, and with no room it waits for a local worker (`room`) or `NO_ROOM_NAP_SECS`.
    Setting `wake` ends a sleep early (an in-process reconciler has just materialised due
    rows). With `while_due` it returns once nothing is due before `until`. A failed claim is
    retried after a backoff. Answers how many occurrences were dispatched."""
    stop = stop or threading.Event()
    nap = wake or stop
    heartbeat = Every(JOB_HEARTBEAT_EVERY_SECS, clock)
    poll = settings.poll_interval.total_seconds()
    backoff = Backoff(JOB, poll, log, clock)
    dispatched = 0
    batch = settings.claim_batch_size
    while not stop.is_set() and clock.monotonic() < until:
        free = room() if room else None
        if free is not None and free <= 0:
            # Every local worker is busy: wait for one without asking the database anything.
            sleep_until_next(stop, WORKER_WAIT_SECS, until, clock)
            continue
        round_ = claim_once(ledger, settings, invoker, free, batch)
        dispatched += len(round_.dispatched)
        if round_.error is not None:
            backoff.wait(round_.error, nap, until, probe=ledger.db_now)
            continue
        backoff.succeeded()
        if heartbeat.due():
            _beat(ledger)
        batch = next_batch(batch, round_, settings)
        if round_.full:
            continue  # a full batch: more may be due right now
        next_due = _seconds_to_next_due(ledger, poll)
        if while_due and (next_due is None or clock.monotonic() + next_due >= until):
            break  # nothing due in this invocation: the next one will see what comes
        if round_.limit <= 0:
            # `max_in_flight` is reached and what is due stays due: nap instead of spinning.
            wait = min(poll, NO_ROOM_NAP_SECS)
        else:
            wait = poll if next_due is None else min(poll, next_due)
        sleep_until_next(nap, wait, until, clock)
        if wake is not None:
            wake.clear()
    return dispatched


def next_batch(batch: int, round_: ClaimRound, settings: Settings) -> int:
    """The next claim's size: twice this one's after a full claim (a backlog), up to
    `MOST_PER_CLAIM`; the same after a round with no room; `claim_batch_size` again after a
    short one (the backlog is gone)."""
    if round_.limit <= 0:
        return batch
    if not round_.full:
        return settings.claim_batch_size
    return max(settings.claim_batch_size, min(batch * 2, MOST_PER_CLAIM))


def _seconds_to_next_due(ledger: ClaimPort, poll: float) -> float | None:
    """Seconds until something is claimable (None: nothing is pending or leased); a failed
    read answers one poll interval, so the next round's claim meets the failure."""
    try:
        return ledger.reporting.seconds_until_next_due()
    except Exception:
        return poll


def _beat(ledger: ClaimPort) -> None:
    try:
        ledger.reporting.record_job_ok(JOB)
    except Exception as exc:
        log.warning("could not record the claim heartbeat: %s", exc)
