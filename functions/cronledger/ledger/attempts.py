"""Attempts: claim, start, renew, settle, release.

Every write here is conditional on ownership and its affected-row count is the answer;
nothing trusts an earlier read.
- A claim leases due `pending` rows and `claimed`/`running` rows whose lease expired (crash
  recovery), oldest due first, `attempt + 1`; an expired row on its last allowed attempt is
  settled `failed` ("abandoned: …") by the same statement instead. On PostgreSQL concurrent
  claimers skip each other's rows (`FOR UPDATE SKIP LOCKED`), never waiting or sharing.
- A start takes the singleton slot and moves the occurrence `claimed → running` in one
  transaction, so it never runs without its key; a busy key's overlap policy decides in that
  same transaction (`singletons.py`).
- A slot acquisition bumps the slot's fencing token. Renew, settle and release are
  conditional on (occurrence, holder, token), so a superseded holder writes nothing.
- A failed attempt with attempts left is settled back to `pending`, due after its backoff.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from cronledger import alerts
from cronledger.excerpts import ERROR_MESSAGE_BYTES, truncate_excerpt
from cronledger.ledger import attempt_log
from cronledger.ledger.backend import Backend
from cronledger.ledger.events import EventStore, draft
from cronledger.ledger.models import (
    ABANDONED,
    CLAIMED,
    COMPLETED,
    FAILED,
    LEASED_STATUSES,
    PENDING,
    RUNNING,
    SETTLED_STATUSES,
    SKIPPED_SINGLETON,
    AttemptStart,
    ClaimResult,
    Event,
    Occurrence,
    OpenedAttempt,
    SingletonSpec,
)
from cronledger.ledger.singletons import (
    WAITER_SLOT,
    add_key_rows,
    release_slot,
    release_slots_of,
    renew_slot,
    take_key,
)
from cronledger.ledger.starts import open_statement, opened_attempt, start_statement
from cronledger.ledger.store import Store
from cronledger.ledger.tables import (
    attempts,
    channel_alerts,
    constant,
    occurrence_of,
    occurrences,
    param,
    status_is,
    status_rechecked,
)

log = logging.getLogger(__name__)

Item = TypeVar("Item")

#: Starts tried in all when the key lacks slot rows: the first adds them, the next finds
#: them (rows are never deleted, so a third is never needed).
SLOT_ROW_TRIES = 3
#: What the log says of an attempt whose lease ran out before anything settled it.
LEASE_RAN_OUT = "abandoned: the lease ran out before the attempt was settled"
#: What `_ends` holds of each end, by its parameter's name.
ENDS = ("p_id", "p_claimant", "p_error", "p_result", "p_trace")
#: The event an attempt's end makes, by the status it left (`pending`: a failure retried);
#: any other is a completion's, made only when it is told or has an alert to answer.
END_EVENTS = {
    PENDING: alerts.ATTEMPT_FAILED,
    FAILED: alerts.FAILED,
    SKIPPED_SINGLETON: alerts.SKIPPED,
}


@dataclass(frozen=True, slots=True)
class StartRequest:
    """One attempt to start: `max_attempts`, when given, refreshes the row's from its
    channel's policy; the start records the batch's `trace_id` in the same write."""

    occurrence: Occurrence | str
    executing_version: int
    singleton: SingletonSpec | None
    max_attempts: int | None = None

    @property
    def occurrence_id(self) -> str:
        return self.occurrence if isinstance(self.occurrence, str) else self.occurrence.id

    @property
    def key(self) -> str:
        return self.singleton.key if self.singleton else ""

    @property
    def releases(self) -> bool:
        """Whether the start must first give back what its occurrence may hold from an
        earlier attempt (a crashed one, or a queued contender back for its slot). Under
        `allow`, one read after its claim with no `singleton_key` holds nothing. With a key
        the rows are always read: a duplicate delivery must find its own slot free, reach
        the conditional UPDATE and come out `lost`, not `singleton_busy`."""
        occurrence = self.occurrence
        return (
            self.singleton is not None
            or isinstance(occurrence, str)
            or occurrence.singleton_key is not None
        )


@dataclass(frozen=True, slots=True)
class SettleRequest:
    """One attempt's end (`completed`, `failed`, `skipped_singleton`): the lease dropped and
    the slot released, in one transaction conditional on the claimant still owning the
    occurrence and, with a token, the slot. With `retry_in` (a failure with attempts left)
    the occurrence goes back to `pending` instead, due that many seconds from now, its error
    kept. `release_held` (no token: an attempt that ends before it starts) also gives back
    what the occurrence holds from before (a queued place, a crashed attempt's slot). The
    end's event (`attempt_failed`, `failed`, `skipped`; for `completed`, an open alert's
    recovery, and itself when `completed_is_told`) and the end of the attempt's row in the
    log (with `error_detail`) are written in that transaction too."""

    occurrence_id: str
    claimant: str
    status: str
    fencing_token: int | None = None
    error_message: str | None = None
    error_detail: str | None = None
    result: str | None = None
    trace_id: str | None = None
    retry_in: float | None = None
    release_held: bool = False
    completed_is_told: bool = False

    def __post_init__(self) -> None:
        if self.status not in SETTLED_STATUSES:
            raise ValueError(f"cannot settle as {self.status!r}; use one of {SETTLED_STATUSES}")
        if self.retry_in is not None and self.status != FAILED:
            raise ValueError(f"only a failure is retried, not {self.status!r}")

    @property
    def quiet(self) -> bool:
        """A completion that makes no event unless its channel has failures or an alert."""
        return (
            self.status == COMPLETED
            and self.fencing_token is None
            and not self.release_held
            and not self.completed_is_told
        )

    def parameters(self) -> dict[str, Any]:
        return {
            "p_id": self.occurrence_id,
            "p_claimant": self.claimant,
            "p_status": self.status,
            "p_error": truncate_excerpt(self.error_message, ERROR_MESSAGE_BYTES),
            "p_result": truncate_excerpt(self.result),
            "p_trace": self.trace_id,
            "p_retry_in": self.retry_in,
            "p_detail": truncate_excerpt(self.error_detail, ERROR_MESSAGE_BYTES),
        }


class AttemptStore(Store):
    """Claims, starts, leases (renew, release) and settles, on the ledger's base, writing
    their events through `events` (see the module's header)."""

    def __init__(self, base: Store, events: EventStore) -> None:
        super().__init__(base)
        self.events = events

    def claim(self, claimant: str, limit: int, lease_secs: float) -> ClaimResult:
        """Lease up to `limit` claimable occurrences to `claimant`, and settle the expired
        ones that have no attempt left (their slots are given back too)."""
        if limit <= 0:
            return ClaimResult([], [])
        statement = self._statement(
            ("claim", lease_secs), lambda: self._claim_statement(lease_secs)
        )

        def claim(conn: sa.Connection) -> tuple[list[Occurrence], list[Event]]:
            rows = conn.execute(statement, {"p_claimant": claimant, "p_limit": limit}).all()
            # RETURNING promises no order; the caller gets the oldest due first.
            found = sorted(
                map(occurrence_of, rows), key=lambda o: (o.due_at, o.scheduled_for, o.id)
            )
            abandoned = sorted(
                (o for o in found if o.status != CLAIMED),
                key=lambda o: (o.channel_id, o.scheduled_for),
            )
            # A lease that ran out ends its attempt, if it had started: abandoned, whether
            # the row is leased again or settled here (its event is written with it).
            expired = [o.id for o in found if o.status != CLAIMED or o.attempt > 1]
            attempt_log.end_open(conn, self._sql, expired, ABANDONED, LEASE_RAN_OUT)
            return found, self.events.record(conn, [draft(alerts.ABANDONED, o) for o in abandoned])

        found, made = self._atomic(claim)
        self.events.announce(made)
        abandoned = [o for o in found if o.status != CLAIMED]
        if abandoned:
            # Rare, so not in the claim's statement: free the slots whose lease ran out with
            # their holder's. Housekeeping only (an expired slot is free to take anyway), so
            # a failure here must not cost the caller the rows the claim leased.
            ids = [o.id for o in abandoned]
            try:
                self._atomic(
                    lambda conn: release_slots_of(conn, self._sql, ids, expired_by=self._sql.now()),
                    single=True,
                )
            except Exception as exc:
                log.warning("could not free the expired slots of abandoned occurrences: %s", exc)
        return ClaimResult([o for o in found if o.status == CLAIMED], abandoned)

    def _claim_statement(self, lease_secs: float) -> sa.Update:
        now = self._sql.now()
        limit = sa.bindparam("p_limit", type_=sa.Integer)
        # Two arms, each an index range scan that stops at the limit, rather than one OR
        # that would read the whole backlog on every claim: due `pending` rows, and
        # leases that ran out. Each arm locks its own rows, skipping another claimer's.
        pending = self._claimable(sa.and_(status_is(PENDING), occurrences.c.due_at <= now), limit)
        expired = self._claimable(
            sa.and_(status_is(*LEASED_STATUSES), occurrences.c.claimed_until < now), limit
        )
        both = sa.union_all(
            sa.select(pending.c.id, pending.c.due_at),
            sa.select(expired.c.id, expired.c.due_at),
        ).subquery()
        due = sa.select(both.c.id).order_by(both.c.due_at).limit(limit)
        # An expired lease on the last allowed attempt: settled here, not leased again.
        leasable = sa.or_(status_is(PENDING), occurrences.c.attempt < occurrences.c.max_attempts)

        def leased_else(leased: Any, abandoned: Any) -> Any:
            return sa.case((leasable, leased), else_=abandoned)

        return (
            sa.update(occurrences)
            .where(occurrences.c.id.in_(due.scalar_subquery()))
            .values(
                status=leased_else(constant(CLAIMED), constant(FAILED)),
                claimed_by=leased_else(
                    param(occurrences.c.claimed_by, "p_claimant"), occurrences.c.claimed_by
                ),
                claimed_until=leased_else(self._sql.now_plus(lease_secs), sa.null()),
                attempt=leased_else(occurrences.c.attempt + 1, occurrences.c.attempt),
                error_message=leased_else(occurrences.c.error_message, _abandoned_message()),
                completed_at=leased_else(sa.null(), now),
                updated_at=now,
            )
            .returning(*occurrences.c)
        )

    def _claimable(
        self, condition: sa.ColumnElement[bool], limit: sa.BindParameter[int]
    ) -> sa.Subquery:
        arm = (
            sa.select(occurrences.c.id, occurrences.c.due_at)
            .where(condition)
            .order_by(occurrences.c.due_at)
            .limit(limit)
        )
        if self._sql.is_postgres:
            arm = arm.with_for_update(skip_locked=True)
        return arm.subquery()

    def open_attempts(
        self,
        occurrence_ids: Sequence[str],
        claimant: str,
        lease_secs: float,
        trace_id: str,
        *,
        misfire_grace_secs: float,
    ) -> dict[str, OpenedAttempt]:
        """Each occurrence with its channel as it is now (None: deleted), in one read, and
        whether it is a late cron row the misfire rule has yet to judge; an id with no
        occurrence is left out. On PostgreSQL the same statement starts a plain attempt when
        nothing stands in its way (still claimed by `claimant`, not late, holding no slot,
        channel active, overlap allowed), each row on its own conditions; otherwise `start`
        is None and the caller decides, with `start_attempts` if it should start."""
        many = len(occurrence_ids) != 1
        ids = {"p_ids": list(occurrence_ids)} if many else {"p_id": occurrence_ids[0]}
        rows, _ = self._run(
            ("open", many, lease_secs, misfire_grace_secs),
            lambda: open_statement(self._sql, lease_secs, misfire_grace_secs, many=many),
            {**ids, "p_claimant": claimant, "p_trace": trace_id},
            write=self._sql.is_postgres,
        )
        return {attempt.occurrence.id: attempt for attempt in map(opened_attempt, rows)}

    def start_attempts(
        self,
        requests: Sequence[StartRequest],
        claimant: str,
        lease_secs: float,
        *,
        trace_id: str | None = None,
        wait_secs: float = 1.0,
    ) -> list[AttemptStart]:
        """Start each request's attempt: take a slot of its singleton key (if any) and move
        it to `running`, answered in order. Each start locks its key's slot rows, and any its
        occurrence holds from an earlier attempt, in (key, slot) order; gives back what it
        held; and takes the first slot free, expired or its own under the slot's next fencing
        token, so the earlier holder's writes stop matching. When every slot is held, the
        key's policy decides (see `AttemptStart`); a `queue_one` waiter is due again
        `wait_secs` later. All in one transaction, each start under a savepoint (one that
        loses undoes its own writes only), keyed starts in key order; a lone plain start (an
        `Occurrence` read after its claim, showing no key) is one statement."""
        start_one = partial(self._start_one, claimant, lease_secs, trace_id, wait_secs)
        answers: dict[int, AttemptStart] = {}
        todo = sorted(range(len(requests)), key=lambda i: requests[i].key)
        for _ in range(SLOT_ROW_TRIES):
            batch = [requests[i] for i in todo]
            alone = len(batch) == 1 and not batch[0].releases
            # Each start's answer and events, or None: its key lacks slot rows (nothing
            # written for it).
            outcomes = self._atomic(partial(_each_undoable, batch, start_one), single=alone)
            self.events.announce([event for o in outcomes if o is not None for event in o[1]])
            answers |= {i: o[0] for i, o in zip(todo, outcomes, strict=True) if o is not None}
            todo = [i for i, o in zip(todo, outcomes, strict=True) if o is None]
            if not todo:
                return [answers[i] for i in range(len(requests))]
            for spec in {requests[i].singleton for i in todo}:
                assert spec is not None
                # Added in a statement of its own, holding no lock: see `singletons.py`.
                self._atomic(partial(add_key_rows, sql=self._sql, spec=spec), single=True)
        raise RuntimeError(f"the slot rows of {[requests[i].key for i in todo]} keep disappearing")

    def _start_one(
        self,
        claimant: str,
        lease_secs: float,
        trace_id: str | None,
        wait_secs: float,
        conn: sa.Connection,
        request: StartRequest,
    ) -> tuple[AttemptStart, list[Event]] | None:
        """One start in the caller's transaction: None when the key lacks slot rows (nothing
        written); `_Undone` when it lost and its writes must be undone."""
        occurrence_id, singleton = request.occurrence_id, request.singleton
        key = singleton.key if singleton else None
        taken: tuple[int, int, Occurrence | None] | str | None = None
        if singleton is not None:
            taken = take_key(
                conn, self._sql, singleton, occurrence_id, claimant, lease_secs, wait_secs
            )
            if taken is None:
                return None
        elif request.releases:
            release_slots_of(conn, self._sql, [occurrence_id])
        if taken == "wait" and _hand_back(
            conn, self._sql, occurrence_id, claimant, wait_secs, waits_on=key
        ):
            return AttemptStart("waiting"), []
        if isinstance(taken, str):
            raise _Undone((AttemptStart("singleton_busy" if taken == "busy" else "lost"), []))
        slot, token, replaced = taken or (None, None, None)
        started_at = attempt_log.run_logged_start(
            conn,
            self._sql,
            self._statement(("start", lease_secs), lambda: start_statement(self._sql, lease_secs)),
            {
                "p_id": occurrence_id,
                "p_claimant": claimant,
                "p_version": request.executing_version,
                "p_key": key,
                "p_trace": trace_id,
                "p_max": request.max_attempts,
                "p_slot": slot,
                "p_token": token,
            },
        )
        if started_at is None:
            # Our lease ran out and a peer re-claimed it, or it was cancelled: the slot
            # taken above (and any holder replaced for it) is undone with the rest.
            raise _Undone((AttemptStart("lost"), []))
        started = AttemptStart("started", fencing_token=token, slot=slot, started_at=started_at)
        if replaced is None:
            return started, []
        made = self.events.record(conn, [draft(alerts.CANCELLED, replaced)])
        return replace(started, replaced=replaced.id), made

    def renew(
        self, occurrence_id: str, claimant: str, fencing_token: int | None, lease_secs: float
    ) -> bool:
        """Extend a running attempt's claim and (with a token) its singleton slot, both or
        neither. False: ownership is lost and the attempt must stop without writing."""
        claim = (
            sa.update(occurrences)
            .where(occurrences.c.id == occurrence_id)
            .where(occurrences.c.claimed_by == claimant)
            .where(status_rechecked(RUNNING))
            .values(claimed_until=self._sql.now_plus(lease_secs), updated_at=self._sql.now())
        )

        def renew(conn: sa.Connection) -> bool:
            slot = fencing_token is None or renew_slot(
                conn, self._sql, occurrence_id, claimant, fencing_token, lease_secs
            )
            if slot and conn.execute(claim).rowcount == 1:
                return True
            conn.rollback()
            return False

        return self._atomic(renew, single=fencing_token is None)

    def release_claim(self, occurrence_id: str, claimant: str, due_in: float | None = None) -> bool:
        """Hand a claimed, not yet started occurrence back to `pending`, its attempt given back
        too: a deferral is not an attempt, nor is waiting. `due_in` (its key is busy): due that
        many seconds from now, so a backfill row run one after another takes its turn instead
        of being skipped."""
        return self._atomic(
            lambda conn: _hand_back(conn, self._sql, occurrence_id, claimant, due_in), single=True
        )

    def settle_many(self, requests: Sequence[SettleRequest]) -> list[bool]:
        """Write each attempt's end (see `SettleRequest`), answered in order; False: a
        superseded holder, and nothing was written for it. Quiet completions are written
        first; the rest, and those the quiet write did not match (their channel has failures
        or an open alert to answer), in one transaction where one that lost is undone alone."""
        quiet = [r for r in requests if r.quiet]
        done: set[str] = set()
        if quiet:
            done = self._atomic(partial(self._settle_quietly, quiet), single=self._sql.is_postgres)
        rest = [r for r in requests if not (r.quiet and r.occurrence_id in done)]
        if rest:
            # Each end's events, or None: it lost, and wrote nothing.
            outcomes = self._atomic(partial(_each_undoable, rest, self._settle_one))
            self.events.announce([event for o in outcomes if o is not None for event in o])
            done |= {r.occurrence_id for r, o in zip(rest, outcomes, strict=True) if o is not None}
        return [r.occurrence_id in done for r in requests]

    def _settle_one(self, conn: sa.Connection, request: SettleRequest) -> list[Event]:
        """An end with its slot's release and its events, in the caller's transaction;
        `_Undone` when the holder was superseded."""
        parameters = request.parameters()
        if request.fencing_token is None:
            if request.release_held:
                # Singleton first (the lock order); undone below if the settle loses.
                release_slots_of(conn, self._sql, [request.occurrence_id])
        elif not release_slot(
            conn, request.occurrence_id, request.fencing_token, holder=request.claimant
        ):
            raise _Undone(None)
        key, build = (
            ("settle", self._settle_statement)
            if request.retry_in is None
            else ("retry", self._retry_statement)
        )
        row = conn.execute(self._statement(key, build), parameters).one_or_none()
        if row is None:
            raise _Undone(None)
        settled = occurrence_of(row)
        self._end_attempt(conn, parameters)
        event = END_EVENTS.get(settled.status, alerts.COMPLETED)
        told = request.completed_is_told or event != alerts.COMPLETED
        if not told and conn.execute(_alerting(settled.channel_id)).first() is None:
            return []
        return self.events.record(conn, [draft(event, settled)])

    def _settle_quietly(self, requests: list[SettleRequest], conn: sa.Connection) -> set[str]:
        """Each quiet completion (`_quiet_settle_statement`) and the end of its attempt's
        row, in the caller's transaction: the ids it settled (one not matched wrote nothing).
        On PostgreSQL one statement, the ends a CTE of it; on SQLite two a request."""
        each = [r.parameters() for r in requests]
        if self._sql.is_postgres and len(each) > 1:
            arrays = {f"{name}s": [p[name] for p in each] for name in ENDS}
            statement = self._statement(
                "settle-quiet-many", lambda: self._quiet_settle_logged(_ends())
            )
            return {str(i) for i in conn.execute(statement, arrays).scalars()}
        if self._sql.is_postgres:
            statement = self._statement("settle-quiet", self._quiet_settle_logged)
            return {p["p_id"] for p in each if conn.execute(statement, p).scalar_one() == 1}
        settled: set[str] = set()
        for p in each:
            if conn.execute(self._quiet_settle_statement(), p).rowcount == 1:
                self._end_attempt(conn, p)
                settled.add(p["p_id"])
        return settled

    def _quiet_settle_logged(self, ends: sa.CTE | None = None) -> sa.Select[Any]:
        """PostgreSQL: `_quiet_settle_statement` and its attempt's end (`completed`), one
        statement answering how many occurrences it settled (0 or 1); with `ends` (see
        `_owned_update`), the ids of those it settled."""
        settled = self._quiet_settle_statement(ends).returning(occurrences.c.id).cte("settled")
        of = attempts.c.occurrence_id.in_(sa.select(settled.c.id))
        ended = attempt_log.ending(self._sql, of, outcome=constant(COMPLETED)).cte("ended")
        answer = sa.select(sa.func.count()) if ends is None else sa.select(settled.c.id)
        return answer.select_from(settled).add_cte(ended)

    def _end_attempt(self, conn: sa.Connection, parameters: dict[str, Any]) -> None:
        """The end of the settled occurrence's attempt: a retried failure is `failed`."""
        statement = self._statement("end-attempt", partial(attempt_log.end_statement, self._sql))
        conn.execute(statement, parameters)

    def _settle_statement(self) -> sa.Update:
        """A leased occurrence's end, conditional on its claimant; drops the lease. A
        completed instant is no longer watched for being overdue."""
        status = param(occurrences.c.status, "p_status")
        overdue_at = sa.case(
            (status == constant(COMPLETED), sa.null()), else_=occurrences.c.overdue_at
        )
        return self._ended(status, overdue_at).returning(*occurrences.c)

    def _quiet_settle_statement(self, ends: sa.CTE | None = None) -> sa.Update:
        """`completed`, as `_settle_statement`, for a channel with no failures in a row and
        no open alert: such a completion makes no event."""
        quiet = self._ended(constant(COMPLETED), None, ends)
        return quiet.where(~_alerting(occurrences.c.channel_id).exists())

    def _ended(self, status: Any, overdue_at: Any, ends: sa.CTE | None = None) -> sa.Update:
        """`_owned_update`, ended as `status`, its lease dropped."""
        return self._owned_update(ends).values(
            status=status, claimed_until=None, completed_at=self._sql.now(), overdue_at=overdue_at
        )

    def _retry_statement(self) -> sa.Update:
        """A failed attempt's occurrence back to `pending`, due after its backoff, holding
        nothing, its error kept; conditional on its claimant."""
        return (
            self._owned_update()
            .values(
                status=PENDING,
                claimed_by=None,
                claimed_until=None,
                due_at=self._sql.now_plus_bound("p_retry_in"),
                singleton_key=None,
                singleton_slot=None,
                fencing_token=None,
                started_at=None,
                completed_at=None,
            )
            .returning(*occurrences.c)
        )

    def _owned_update(self, ends: sa.CTE | None = None) -> sa.Update:
        """What every end of an attempt writes (error, result excerpt, trace), conditional
        on the claimant still holding the occurrence's lease: the values bound as `p_id`,
        `p_claimant`, `p_error`, `p_result`, `p_trace`, or, with `ends` (`_ends`), each row
        of it, every one on its own row's conditions."""

        def value(name: str, column: sa.Column[Any]) -> Any:
            return param(column, name) if ends is None else ends.c[name.removeprefix("p_")]

        return (
            sa.update(occurrences)
            .where(occurrences.c.id == value("p_id", occurrences.c.id))
            .where(occurrences.c.claimed_by == value("p_claimant", occurrences.c.claimed_by))
            .where(status_rechecked(*LEASED_STATUSES))
            .values(
                error_message=value("p_error", occurrences.c.error_message),
                result=value("p_result", occurrences.c.result),
                trace_id=sa.func.coalesce(
                    value("p_trace", occurrences.c.trace_id), occurrences.c.trace_id
                ),
                updated_at=self._sql.now(),
            )
        )


class _Undone(Exception):
    """One attempt's write lost: what it wrote is rolled back, and its argument is its answer."""


def _each_undoable(
    items: Sequence[Item], write: Callable[[sa.Connection, Item], Any], conn: sa.Connection
) -> list[Any]:
    """`write(conn, item)` of each item in the caller's transaction, answered in order; one
    that raised `_Undone` answers its argument, what it wrote undone: its savepoint, or the
    whole transaction when it is alone in it."""
    alone = len(items) == 1
    answers = []
    for item in items:
        try:
            with nullcontext() if alone else conn.begin_nested():
                answers.append(write(conn, item))
        except _Undone as undone:
            if alone:
                conn.rollback()
            answers.append(undone.args[0])
    return answers


def _hand_back(
    conn: sa.Connection,
    sql: Backend,
    occurrence_id: str,
    claimant: str,
    due_in: float | None = None,
    *,
    waits_on: str | None = None,
) -> bool:
    """claimed → pending, attempt given back; with `due_in`, due that many seconds from
    now and exempt from the misfire rule (a queued contender was admitted already).
    `waits_on`: the key whose waiting place it holds, recorded on the row (slot
    `WAITER_SLOT`) like a held slot, so that whatever ends or starts it next gives the
    place back even if its channel no longer queues on that key."""
    values: dict[str, Any] = {}
    if due_in is not None:
        values = {"due_at": sql.now_plus(due_in), "misfire_judged": True}
    if waits_on is not None:
        values |= {
            "singleton_key": waits_on,
            "singleton_slot": WAITER_SLOT,
            "fencing_token": None,
        }
    stmt = (
        sa.update(occurrences)
        .where(occurrences.c.id == occurrence_id)
        .where(occurrences.c.claimed_by == claimant)
        .where(occurrences.c.status == CLAIMED)
        .values(
            status=PENDING,
            claimed_by=None,
            claimed_until=None,
            attempt=occurrences.c.attempt - 1,
            updated_at=sql.now(),
            **values,
        )
    )
    return conn.execute(stmt).rowcount == 1


def _ends() -> sa.CTE:
    """PostgreSQL: one row per end, from the parallel arrays `p_ids`, `p_claimants`, …
    (each name of `ENDS`, plural), as columns `id`, `claimant`, `error`, `result`, `trace`."""
    columns = [
        sa.func.unnest(sa.bindparam(f"{name}s", type_=postgresql.ARRAY(sa.Text))).label(
            name.removeprefix("p_")
        )
        for name in ENDS
    ]
    return sa.select(*columns).cte("ends")


def _alerting(channel_id: Any) -> sa.Select[tuple[str]]:
    """The channel's alert row, when a completion must answer it: failures in a row to
    reset, or a delivered alert to recover from."""
    return sa.select(channel_alerts.c.channel_id).where(
        channel_alerts.c.channel_id == channel_id,
        sa.or_(channel_alerts.c.consecutive_failures > 0, channel_alerts.c.open_alert.is_not(None)),
    )


def _abandoned_message() -> sa.ColumnElement[str]:
    """'abandoned: lease expired after N attempt(s)', then the last error, if any."""
    count = occurrences.c.attempt
    unit = sa.case((count == 1, constant(" attempt")), else_=constant(" attempts"))
    last_error = sa.func.coalesce(
        constant("; last error: ") + occurrences.c.error_message, constant("")
    )
    return (
        constant("abandoned: lease expired after ") + sa.cast(count, sa.String) + unit + last_error
    )
