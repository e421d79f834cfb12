"""Starting an attempt: the one UPDATE that moves an occurrence `claimed → running`.

Every start is `running_update`, conditional on the claimant still holding the claim, writing
its attempt's row in the log with it (`attempt_log`). It is sent as `start_statement` once a
concurrency key's slot is taken (`AttemptStore.start_attempts`), or on PostgreSQL inside
`open_statement`, the executor's first read, for a plain attempt with no key to take (the
channel's version and retry policy then come from the joined channel row).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from cronledger.ledger import attempt_log
from cronledger.ledger.backend import Backend
from cronledger.ledger.misfires import misfire_due
from cronledger.ledger.models import (
    CHANNEL_ACTIVE,
    CLAIMED,
    RUNNING,
    AttemptStart,
    Channel,
    OpenedAttempt,
)
from cronledger.ledger.tables import (
    channels,
    constant,
    occurrence_of,
    occurrences,
    param,
    status_rechecked,
)
from cronledger.retry import DEFAULT_MAX_ATTEMPTS

#: An occurrence's columns, then its channel's (NULL when the channel is gone).
OCCURRENCE_AND_CHANNEL = sa.select(occurrences, channels).select_from(
    occurrences.outerjoin(channels, channels.c.channel_id == occurrences.c.channel_id)
)


def running_update(
    sql: Backend, lease_secs: float, *, many: bool = False, **values: Any
) -> sa.Update:
    """claimed → running of occurrence `p_id` (`many`: each of `p_ids`) under claimant
    `p_claimant`, with what every start writes; `values` adds the rest (version, slot, trace)."""
    return (
        sa.update(occurrences)
        .where(_one_or_many(many))
        .where(occurrences.c.claimed_by == param(occurrences.c.claimed_by, "p_claimant"))
        .where(status_rechecked(CLAIMED))
        .values(
            status=RUNNING,
            started_at=sql.now(),
            claimed_until=sql.now_plus(lease_secs),
            # Whatever starts has passed the misfire rule: a retry of it never misfires.
            misfire_judged=True,
            updated_at=sql.now(),
            **values,
        )
    )


def start_statement(sql: Backend, lease_secs: float) -> sa.Insert | sa.Update:
    """claimed → running, with the slot (if any), trace id and attempts allowed (each kept
    when not given), and the attempt's row in the log (`attempt_log.logged_start`)."""
    running = running_update(
        sql,
        lease_secs,
        executing_version=param(occurrences.c.executing_version, "p_version"),
        singleton_key=param(occurrences.c.singleton_key, "p_key"),
        singleton_slot=param(occurrences.c.singleton_slot, "p_slot"),
        fencing_token=param(occurrences.c.fencing_token, "p_token"),
        trace_id=sa.func.coalesce(param(occurrences.c.trace_id, "p_trace"), occurrences.c.trace_id),
        max_attempts=sa.func.coalesce(
            param(occurrences.c.max_attempts, "p_max"), occurrences.c.max_attempts
        ),
    )
    return attempt_log.logged_start(sql, running)


def open_statement(
    sql: Backend, lease_secs: float, misfire_grace_secs: float, *, many: bool = False
) -> sa.Select[Any]:
    """`OCCURRENCE_AND_CHANNEL` (`many`: of each of `p_ids`), whether the row is a late one
    the misfire rule has yet to judge, and (PostgreSQL) the start time of the plain attempt
    it started, NULL if none."""
    late = misfire_due(sql, misfire_grace_secs)
    read = OCCURRENCE_AND_CHANNEL.where(_one_or_many(many)).add_columns(late)
    if not sql.is_postgres:
        return read.add_columns(sa.null())
    policy = channels.c.transport_config["concurrency"]["policy"].as_string()
    running = (
        running_update(
            sql,
            lease_secs,
            many=many,
            executing_version=channels.c.version,
            trace_id=param(occurrences.c.trace_id, "p_trace"),
            max_attempts=_retry_max_attempts(),
        )
        .where(occurrences.c.singleton_key.is_(None))
        .where(sa.not_(late))
        .where(channels.c.channel_id == occurrences.c.channel_id)
        .where(channels.c.status == constant(CHANNEL_ACTIVE))
        .where(sa.func.coalesce(policy, "allow") == "allow")
    )
    started, logged = attempt_log.started_and_logged(running)
    joined = started.c.id == occurrences.c.id if many else sa.true()
    return (
        read.add_columns(started.c.started_at)
        .outerjoin_from(occurrences, started, joined)
        .add_cte(logged.cte("logged"))
    )


def _one_or_many(many: bool) -> sa.ColumnElement[bool]:
    """The occurrence `p_id`, or (`many`) each of the list `p_ids`."""
    if many:
        return occurrences.c.id.in_(sa.bindparam("p_ids", expanding=True))
    return occurrences.c.id == param(occurrences.c.id, "p_id")


def _retry_max_attempts() -> sa.ColumnElement[int]:
    """PostgreSQL: the channel's `retry.max_attempts` read from its stored document (a
    number there, as validation left it), or the policy's default."""
    stored = channels.c.transport_config["retry"]["max_attempts"]
    number = sa.case(
        (
            sa.func.jsonb_typeof(stored) == "number",
            sa.cast(sa.cast(stored.as_string(), sa.Numeric), sa.Integer),
        ),
        else_=sa.null(),
    )
    return sa.func.coalesce(number, DEFAULT_MAX_ATTEMPTS)


def opened_attempt(row: Sequence[Any]) -> OpenedAttempt:
    """An `open_statement` row: the occurrence, its channel (None when its columns are all
    NULL: the channel is gone), whether it is a late row to judge, and the start it made."""
    split, end = len(occurrences.c), len(occurrences.c) + len(channels.c)
    # Fields in table order, as `occurrence_of`; the channel's id first.
    channel = None if row[split] is None else Channel(*row[split:end])
    misfire_due, started_at = row[-2:]
    start = AttemptStart("started", started_at=started_at) if started_at else None
    return OpenedAttempt(occurrence_of(row[:split]), channel, start, bool(misfire_due))
