"""The trigger envelope: the one event every target type receives. `occurrence_id` and
`scheduled_for` are the target's idempotency key, the same for every attempt; `attempt` and
`fencing_token` tell attempts apart; `due_at` (with jitter or a retry's backoff) is never part
of the key. Timestamps are RFC 3339 UTC.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Literal, TypedDict, get_args

from cronledger.instants import to_rfc3339

TriggerType = Literal["cron", "manual", "backfill"]
_TRIGGER_TYPES = get_args(TriggerType)


class Trigger(TypedDict):
    type: TriggerType
    occurrence_id: str
    channel_id: str
    channel_name: str
    scheduled_for: str
    due_at: str
    started_at: str
    timezone: str
    attempt: int
    singleton_key: str | None
    fencing_token: int | None


class Envelope(TypedDict):
    payload: dict[str, Any]
    trigger: Trigger


def build_envelope(
    *,
    payload: Mapping[str, Any],
    trigger: TriggerType,
    occurrence_id: str,
    channel_id: str,
    channel_name: str,
    scheduled_for: datetime,
    started_at: datetime,
    timezone: str,
    attempt: int,
    singleton_key: str | None,
    fencing_token: int | None,
    due_at: datetime | None = None,
) -> Envelope:
    """The envelope for one attempt. `fencing_token` is None when the channel holds no
    singleton (concurrency `allow`); `due_at` defaults to `scheduled_for`; datetimes must be
    timezone-aware."""
    if trigger not in _TRIGGER_TYPES:
        raise ValueError(f"trigger must be one of {', '.join(_TRIGGER_TYPES)}, got {trigger!r}")
    if attempt < 1:
        raise ValueError(f"attempt counts from 1, got {attempt}")
    return {
        "payload": dict(payload),
        "trigger": {
            "type": trigger,
            "occurrence_id": occurrence_id,
            "channel_id": channel_id,
            "channel_name": channel_name,
            "scheduled_for": to_rfc3339(scheduled_for),
            "due_at": to_rfc3339(scheduled_for if due_at is None else due_at),
            "started_at": to_rfc3339(started_at),
            "timezone": timezone,
            "attempt": attempt,
            "singleton_key": singleton_key,
            "fencing_token": fencing_token,
        },
    }


def envelope_json(envelope: Envelope) -> str:
    """The envelope as the JSON text a target receives."""
    return json.dumps(envelope, separators=(",", ":"), ensure_ascii=False)


def delivery_id(envelope: Envelope) -> str:
    """`<occurrence_id>-<attempt>`: the same for a redelivery of one attempt, different for the
    next attempt, so a service's deduplication drops repeats without swallowing a retry."""
    trigger = envelope["trigger"]
    return f"{trigger['occurrence_id']}-{trigger['attempt']}"
