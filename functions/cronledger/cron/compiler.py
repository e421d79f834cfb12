"""`transport_config` in, a `Schedule` out, or every problem with the document at once.

The models (`config`) check every key and raise every finding together; they become
`ScheduleInvalid`, each with its path, a code and a message saying how to fix it, so a
document is fixed in one round trip.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from cronledger.alerts import AlertRules
from cronledger.cron.compiled import Schedule
from cronledger.cron.config import TRANSPORT_CONFIG, OneTime, Recurring, at_second, payload_json
from cronledger.cron.walk import EVERY_SECOND, Bounded, calendar, window
from cronledger.errors import FieldError, ValidationFailed
from cronledger.instants import require_utc, to_rfc3339
from cronledger.validation import field_errors


class ScheduleInvalid(ValidationFailed):
    """`transport_config` was refused; `errors` lists every problem, each with its path."""

    def __init__(self, errors: list[FieldError]) -> None:
        super().__init__(errors, "invalid transport_config")


def compile_schedule(
    transport_config: Mapping[str, Any], channel_id: str, *, now: datetime | None = None
) -> Schedule:
    """Validate `transport_config` and compile it for `channel_id`, or raise `ScheduleInvalid`
    listing every problem. `now` anchors the "fires at least once in the next 5 years" check
    and defaults to the wall clock."""
    anchor = datetime.now(UTC) if now is None else require_utc(now, "now")
    document = dict(transport_config) if isinstance(transport_config, Mapping) else transport_config
    try:
        config = TRANSPORT_CONFIG.validate_python(document, context={"now": anchor})
    except ValidationError as exc:
        raise ScheduleInvalid(field_errors(exc, ("transport_config",))) from None
    if isinstance(config, OneTime):
        second = at_second(config.at, config.timezone)
        instants = Bounded(EVERY_SECOND, second, second)
    else:
        bounds = window(config.starts_at, config.ends_at)
        instants = Bounded(calendar(config.schedule, config.timezone), *bounds)
    return Schedule(
        channel_id=channel_id,
        expression=config.schedule if isinstance(config, Recurring) else None,
        at=config.at if isinstance(config, OneTime) else None,
        timezone=config.timezone,
        payload_json=payload_json(config.payload),
        misfire_policy=config.misfire_policy,
        max_catch_up=config.max_catch_up,
        concurrency_policy=config.concurrency.policy,
        concurrency_key=config.concurrency.key or channel_id,
        slots=config.concurrency.slots,
        retry=config.retry.policy(),
        starts_at=getattr(config, "starts_at", None),
        ends_at=getattr(config, "ends_at", None),
        jitter_secs=config.jitter_secs,
        config_hash=_config_hash(config),
        _calendar=instants,
        alerts=AlertRules() if config.alerts is None else config.alerts.rules(),
    )


def _config_hash(config: Recurring | OneTime) -> str:
    """SHA-256 over what decides *which instants* fire, each part length-prefixed so parts
    cannot run into each other. A changed hash re-initialises the cursor from now, so the
    bounds are in (a moved end resumes a parked channel and drops rows beyond it) and what a
    job does is out: payload, concurrency, retry, alerts, jitter (it moves due times, not
    instants) and `max_catch_up` except under `catch_up`. A key adds its part only when
    given, so a schedule without it hashes as before."""
    digest = hashlib.sha256()
    bound = str(config.max_catch_up) if config.misfire_policy == "catch_up" else ""
    expression = config.schedule if isinstance(config, Recurring) else ""
    parts = ["cronledger.schedule/1", expression, config.timezone, config.misfire_policy, bound]
    if isinstance(config, OneTime):
        parts += ["at", config.at]
    else:
        if config.starts_at is not None:
            parts += ["starts_at", to_rfc3339(config.starts_at)]
        if config.ends_at is not None:
            parts += ["ends_at", to_rfc3339(config.ends_at)]
    for part in parts:
        raw = part.encode()
        digest.update(len(raw).to_bytes(8, "big"))
        digest.update(raw)
    return digest.hexdigest()
