"""`transport_config` in, a `Schedule` out, or every problem with the document at once.

Validation never stops at the first error: each key is checked on its own and all findings are
raised together in `ScheduleInvalid`, each with its path, a code and a message that says how
to fix it, because a user should fix a document in one round trip.

Decisions where SPEC §1.1 is silent:
- `null` for a key is a type mismatch; only leaving the key out means "use the default".
- A zone name without a `/` is refused as an abbreviation or legacy alias (`IST`, `EST`,
  `Japan`), except `UTC`.
- `max_catch_up` is accepted under `skip` and `latest` but does nothing there, so it is hashed
  only under `catch_up`: editing an inert number must not reset the cursor.
- Random and hashed fields (croniter's `R`, `H`) are refused: a schedule must fire at the same
  instants every time it is compiled.
- croniter still validates every expression, but the fields mean what `expression` reads them
  to mean (standard cron; croniter's own quirks are not inherited), and the forms without a
  plain meaning are refused there, each with a fix.
- "At least one occurrence in the next 5 years" is measured from `now=`, or the wall clock.
- An `at` or an `ends_at` already in the past is accepted: a channel outlives its last instant
  (it must still compile in every view and pass), and shows as ended. A window of bounds that
  holds no instant at all is refused; `starts_at`/`ends_at` with `at` are refused (bounds of a
  single instant are a mistake, not a schedule).
- `jitter_secs` must be shorter than the shortest gap between two consecutive instants, in
  UTC, over the next 5 years: wall-clock gaps within a day and across midnight, and the pair
  straddling each clock change (the `0 30 1 * * *` of a fall-back night is an hour apart). It
  keeps due times in the instants' order. A one-time schedule takes any jitter up to 3600.
- `retry.backoff_secs` may be 0 (retry at the next claim); `retry.max_backoff_secs` defaults to
  300, or to `backoff_secs` when that is larger, and is refused below it. `retry` is not in
  the scheduling hash: how failures are retried does not move when the schedule fires.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Any, Final, cast, get_args
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from croniter import croniter

from cronledger.alerts import alert_rules
from cronledger.errors import FieldError, ValidationFailed, refuse_unknown_keys
from cronledger.instants import parse_rfc3339, require_utc, to_rfc3339
from cronledger.schedule.compiled import ConcurrencyPolicy, MisfirePolicy, RetryPolicy, Schedule
from cronledger.schedule.expression import ExpressionRefused, parse_expression
from cronledger.schedule.walk import (
    FIRST_SECOND,
    LAST_SECOND,
    Bounded,
    Instants,
    OneInstant,
    ceil_seconds,
    clock_changes,
    floor_seconds,
    seconds,
)
from cronledger.schedule.walk import calendar as shared_calendar

PAYLOAD_LIMIT_BYTES: Final = 256 * 1024
MAX_CATCH_UP_LIMIT: Final = 1000
MAX_SLOTS: Final = 100
VALIDITY_HORIZON: Final = timedelta(days=5 * 366)

MAX_JITTER_SECS: Final = 3600

MAX_ATTEMPTS: Final = 20
MAX_BACKOFF_SECS: Final = 86_400

_KEYS: Final = (
    "schedule",
    "at",
    "timezone",
    "payload",
    "misfire_policy",
    "max_catch_up",
    "concurrency",
    "retry",
    "starts_at",
    "ends_at",
    "jitter_secs",
    "alerts",
)
_JITTER: Final = "transport_config.jitter_secs"
_AT: Final = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}")
_AT_EXAMPLE: Final = "2026-09-01T02:15:00"
_CONCURRENCY_KEYS: Final = ("policy", "key", "slots")
_RETRY_KEYS: Final = ("max_attempts", "backoff_secs", "max_backoff_secs")
_MISFIRE_POLICIES: Final = ("skip", "latest", "catch_up")
_CONCURRENCY_POLICIES: Final = get_args(ConcurrencyPolicy)
_LOCK_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
_EXAMPLE: Final = "a daily 02:15 is `0 15 2 * * *`"
_FIELDS: Final = (
    ("second", "0-59"),
    ("minute", "0-59"),
    ("hour", "0-23"),
    ("day-of-month", "1-31, L or nW"),
    ("month", "1-12 or JAN-DEC"),
    ("day-of-week", "0-7 or SUN-SAT, with L or #n"),
)
_NICKNAMES: Final = {
    "@yearly": "0 0 0 1 1 *",
    "@annually": "0 0 0 1 1 *",
    "@monthly": "0 0 0 1 * *",
    "@weekly": "0 0 0 * * 0",
    "@daily": "0 0 0 * * *",
    "@midnight": "0 0 0 * * *",
    "@hourly": "0 0 * * * *",
}
_ZONE_HINTS: Final = {
    "IST": "Asia/Kolkata, Europe/Dublin or Asia/Jerusalem",
    "EST": "America/New_York",
    "EDT": "America/New_York",
    "CST": "America/Chicago or Asia/Shanghai",
    "PST": "America/Los_Angeles",
    "BST": "Europe/London",
    "CET": "Europe/Paris",
    "GMT": "UTC or Europe/London",
}


class ScheduleInvalid(ValidationFailed):
    """`transport_config` was refused; `errors` lists every problem, each with its path."""

    def __init__(self, errors: list[FieldError]) -> None:
        super().__init__(errors, "invalid transport_config")


class _Missing:
    """An absent key, told apart from an explicit `null`."""


_MISSING: Final = _Missing()


def compile_schedule(
    transport_config: Mapping[str, Any], channel_id: str, *, now: datetime | None = None
) -> Schedule:
    """Validate `transport_config` (SPEC §1.1) and compile it for `channel_id`.

    Raises `ScheduleInvalid` listing every problem. `now` anchors the "fires at least once in
    the next 5 years" check and defaults to the wall clock.
    """
    if not isinstance(channel_id, str) or not channel_id:
        raise ValueError(f"channel_id must be a non-empty string, got {channel_id!r}")
    anchor = datetime.now(UTC) if now is None else require_utc(now, "now")
    if not isinstance(transport_config, Mapping):
        raise ScheduleInvalid(
            [
                FieldError(
                    "transport_config",
                    "type_mismatch",
                    f"must be an object, got {_json_type(transport_config)}; "
                    'e.g. {"schedule": "0 15 2 * * *"}',
                )
            ]
        )

    def get(key: str) -> Any:
        return transport_config.get(key, _MISSING)

    errors: list[FieldError] = []
    refuse_unknown_keys(transport_config, _KEYS, "transport_config", errors)
    zone = _timezone(get("timezone"), errors)
    when = _shared_when(get, zone, anchor, errors)
    payload_json = _payload(get("payload"), errors)
    policy = _choice(get("misfire_policy"), "misfire_policy", _MISFIRE_POLICIES, "latest", errors)
    max_catch_up = _max_catch_up(get("max_catch_up"), policy, errors)
    concurrency = _concurrency(get("concurrency"), channel_id, errors)
    retry = _retry(get("retry"), errors)
    alerts = alert_rules(transport_config.get("alerts"), errors)
    if errors:
        raise ScheduleInvalid(errors)

    assert when is not None and zone is not None
    assert payload_json is not None and policy is not None
    assert max_catch_up is not None and concurrency is not None and retry is not None
    assert alerts is not None
    misfire_policy = cast(MisfirePolicy, policy)
    return Schedule(
        channel_id=channel_id,
        expression=when.expression,
        at=when.at,
        timezone=zone,
        payload_json=payload_json,
        misfire_policy=misfire_policy,
        max_catch_up=max_catch_up,
        concurrency_policy=cast(ConcurrencyPolicy, concurrency[0]),
        concurrency_key=concurrency[1],
        slots=concurrency[2],
        retry=retry,
        starts_at=when.starts_at,
        ends_at=when.ends_at,
        jitter_secs=when.jitter_secs,
        config_hash=_config_hash(when, zone, misfire_policy, max_catch_up),
        _calendar=when.instants,
        alerts=alerts,
    )


#: The keys `_when` reads: what decides when a channel fires.
_WHEN_KEYS: Final = ("schedule", "at", "starts_at", "ends_at", "jitter_secs")


def _shared_when(
    get: Callable[[str], Any], zone: str | None, anchor: datetime, errors: list[FieldError]
) -> _When | None:
    """`_when`, computed once per (expression or instant, zone, bounds, jitter, minute of the
    anchor): thousands of channels share a schedule, and walking it (its validity, its
    shortest gap) is most of a compile. A value JSON cannot make hashable is not shared."""
    raw = tuple(get(key) for key in _WHEN_KEYS)
    try:
        hash(raw)
    except TypeError:
        return _when(get, zone, anchor, errors)
    when, found = _when_of(raw, zone, anchor.replace(second=0, microsecond=0))
    errors.extend(found)
    return when


@lru_cache(maxsize=4096)
def _when_of(
    raw: tuple[Any, ...], zone: str | None, anchor: datetime
) -> tuple[_When | None, tuple[FieldError, ...]]:
    values = dict(zip(_WHEN_KEYS, raw, strict=True))
    found: list[FieldError] = []
    when = _when(lambda key: values.get(key, _MISSING), zone, anchor, found)
    return when, tuple(found)


@dataclass(frozen=True, slots=True)
class _When:
    """When a channel fires: an expression or one instant, its bounds, its jitter."""

    expression: str | None
    at: str | None
    starts_at: datetime | None
    ends_at: datetime | None
    jitter_secs: int
    instants: Instants


def _when(
    get: Callable[[str], Any], zone: str | None, anchor: datetime, errors: list[FieldError]
) -> _When | None:
    """`schedule` or `at`, `starts_at`/`ends_at` and `jitter_secs`, checked together: a
    bound or a jitter only means something against the instants it bounds or spreads."""
    found = len(errors)
    starts = _bound(get("starts_at"), "starts_at", errors)
    ends = _bound(get("ends_at"), "ends_at", errors)
    jitter = get("jitter_secs")
    jitter_secs = 0
    if jitter is not _MISSING:
        jitter_secs = _integer(jitter, _JITTER, MAX_JITTER_SECS, errors, low=0) or 0
    if starts is not None and ends is not None and starts > ends:
        errors.append(FieldError("transport_config.ends_at", "invalid", "is before starts_at"))

    if get("at") is not _MISSING:
        if get("schedule") is not _MISSING:
            errors.append(
                FieldError(
                    "transport_config.at",
                    "invalid",
                    "give either `schedule` (a recurring cron expression) or `at` (one local "
                    "date-time), not both",
                )
            )
        for key in ("starts_at", "ends_at"):
            path = f"transport_config.{key}"
            if get(key) is not _MISSING and all(e.path != path for e in errors):
                errors.append(
                    FieldError(
                        path,
                        "invalid",
                        "bounds a recurring `schedule`; a one-time `at` fires once: drop it",
                    )
                )
        at = _at(get("at"), zone, errors)
        if at is None or len(errors) > found:
            return None
        return _When(None, at[0], None, None, jitter_secs, OneInstant(at[1]))

    expression = _expression(get("schedule"), errors)
    if expression is None:
        return None
    # A bad zone does not hide an impossible date: that is impossible in UTC too.
    calendar = shared_calendar(expression, zone or "UTC")
    start = ceil_seconds(anchor)
    horizon = min(start + seconds(VALIDITY_HORIZON), LAST_SECOND)
    if calendar.first(start, horizon) is None:
        errors.append(
            FieldError(
                "transport_config.schedule",
                "invalid",
                f"`{expression}` never fires in the next 5 years in {zone or 'UTC'}; check "
                "the day-of-month and month fields (February 30th and April 31st never happen)",
            )
        )
        return None
    lo = FIRST_SECOND if starts is None else ceil_seconds(starts)
    hi = LAST_SECOND if ends is None else floor_seconds(ends)
    if (starts or ends) and lo <= hi and calendar.first(lo, hi) is None:
        errors.append(
            FieldError(
                "transport_config.ends_at" if ends else "transport_config.starts_at",
                "invalid",
                f"no instant of `{expression}` in {zone or 'UTC'} falls between starts_at and "
                "ends_at: the channel would never fire; widen the window",
            )
        )
    if jitter_secs and zone is not None:
        gap = calendar.gap_below(max(start, lo), min(horizon, hi), jitter_secs + 1)
        if gap is not None:
            errors.append(
                FieldError(
                    _JITTER,
                    "invalid",
                    f"is {jitter_secs}, not shorter than the schedule's shortest gap, "
                    f"{gap[0]} s ({gap[1]}): rows would be due out of order; use at most "
                    f"{gap[0] - 1}",
                )
            )
    if len(errors) > found:
        return None
    bounded: Instants = calendar if starts is None and ends is None else Bounded(calendar, lo, hi)
    return _When(expression, None, starts, ends, jitter_secs, bounded)


def _config_hash(when: _When, zone: str, policy: MisfirePolicy, max_catch_up: int) -> str:
    """SHA-256 over what decides *when* the schedule fires, each part length-prefixed so
    `("ab", "c")` and `("a", "bc")` cannot collide. Payload and concurrency stay out: editing
    what a job does must not move when it next runs.

    Of the newer keys: `at` is the instant itself, so it is in. `starts_at` and `ends_at` are
    in: a channel parked past its end must resume when `ends_at` moves later (a changed hash
    re-initialises the cursor from now), rows materialised ahead beyond a moved end must go
    (a reset removes them), and an earlier start must not leave the cursor waiting at the old
    one. `jitter_secs` is out: it moves when rows are due, not which instants there are, so
    editing it keeps the cursor's place (rows already written keep their due time). Each new
    part is added only when its key is given, so a schedule without them hashes as before."""
    digest = hashlib.sha256()
    bound = str(max_catch_up) if policy == "catch_up" else ""
    parts = ["cronledger.schedule/1", when.expression or "", zone, policy, bound]
    if when.at is not None:
        parts += ["at", when.at]
    if when.starts_at is not None:
        parts += ["starts_at", to_rfc3339(when.starts_at)]
    if when.ends_at is not None:
        parts += ["ends_at", to_rfc3339(when.ends_at)]
    for part in parts:
        raw = part.encode()
        digest.update(len(raw).to_bytes(8, "big"))
        digest.update(raw)
    return digest.hexdigest()


def _expression(value: Any, errors: list[FieldError]) -> str | None:
    path = "transport_config.schedule"
    if value is _MISSING:
        errors.append(
            FieldError(
                path,
                "required",
                f"a six-field cron expression ({_EXAMPLE}), or `at` for a one-time schedule",
            )
        )
        return None
    if not isinstance(value, str):
        errors.append(
            FieldError(
                path, "type_mismatch", f"must be a string, got {_json_type(value)}; {_EXAMPLE}"
            )
        )
        return None
    fields = value.split()
    if len(fields) != 6:
        if len(fields) == 5:
            fix = f"add the second first: `0 {' '.join(fields)}`"
        elif len(fields) == 1 and fields[0].lower() in _NICKNAMES:
            fix = f"write `{_NICKNAMES[fields[0].lower()]}` for {fields[0]}"
        elif len(fields) == 7:
            fix = f"there is no year field, drop it: `{' '.join(fields[:6])}`"
        else:
            fix = _EXAMPLE
        shape = " ".join(name for name, _ in _FIELDS)
        errors.append(
            FieldError(path, "invalid", f"has {len(fields)} field(s), needs six ({shape}); {fix}")
        )
        return None
    for (name, _), text in zip(_FIELDS, fields, strict=True):
        if any(item[:1].upper() in ("R", "H") for item in text.split(",")):
            errors.append(
                FieldError(
                    path,
                    "invalid",
                    f"the {name} field `{text}` is random or hashed (R/H); a schedule must fire "
                    "at the same instants every time it is read: use fixed values",
                )
            )
            return None
    try:
        parse_expression(fields)  # the meaning this project gives it (`expression`)
    except ExpressionRefused as exc:
        errors.append(FieldError(path, "invalid", str(exc)))
        return None
    expression = " ".join(fields)
    refused = _croniter_refusal(expression)
    if refused is not None:
        errors.append(FieldError(path, "invalid", refused))
        return None
    return expression


@lru_cache(maxsize=4096)
def _croniter_refusal(expression: str) -> str | None:
    """Why croniter, the parser of record, refuses `expression`, or None. Cached: it is most of
    a compile, and thousands of channels share a handful of expressions."""
    try:
        croniter(expression, second_at_beginning=True)  # parses and checks each field
    except Exception as exc:  # croniter reports some malformed input with non-croniter errors
        return _explain_parse_error(expression.split(), exc)
    return None


def _explain_parse_error(fields: list[str], exc: Exception) -> str:
    """Name the field at fault by parsing each one alone, the others left as `*`."""
    for i, (name, allowed) in enumerate(_FIELDS):
        probe = ["*"] * 6
        probe[i] = fields[i]
        try:
            croniter(" ".join(probe), second_at_beginning=True)
        except Exception:
            return f"the {name} field `{fields[i]}` is not valid; allowed: {allowed}"
    return f"`{' '.join(fields)}` does not parse ({exc}); {_EXAMPLE}"


def _at(value: Any, zone: str | None, errors: list[FieldError]) -> tuple[str, int] | None:
    """A one-time schedule: `(local text, UTC second)`. A wall time the zone skips is refused;
    one it shows twice means its first instant."""
    path = "transport_config.at"
    if not isinstance(value, str) or not _AT.fullmatch(value.strip()):
        offset = (
            isinstance(value, str)
            and _AT.match(value.strip()) is not None
            and value.strip()[19:20] in ("Z", "z", "+", "-")
        )
        errors.append(
            FieldError(
                path,
                "invalid" if isinstance(value, str) else "type_mismatch",
                (
                    f"{value!r} carries an offset: `at` is a wall time read in `timezone`; drop "
                    "the offset (for a UTC instant, set timezone UTC)"
                    if offset
                    else f"must be a local date-time `YYYY-MM-DDTHH:MM:SS` in `timezone`, e.g. "
                    f'"{_AT_EXAMPLE}"'
                ),
            )
        )
        return None
    text = value.strip()
    try:
        wall = datetime.fromisoformat(text)
    except ValueError as exc:
        errors.append(FieldError(path, "invalid", f"{text!r} is not a real date-time ({exc})"))
        return None
    if zone is None:
        return None  # the zone's own error says what to fix
    z = ZoneInfo(zone)
    try:
        shown = sorted({wall.replace(tzinfo=z, fold=fold).astimezone(UTC) for fold in (0, 1)})
    except OverflowError:  # 9999-12-31T23:00:00 west of UTC is in year 10000 in UTC
        errors.append(FieldError(path, "invalid", "must be between 1970 and 9998"))
        return None
    real = [t for t in shown if t.astimezone(z).replace(tzinfo=None) == wall]
    if not real:
        errors.append(FieldError(path, "invalid", _skipped(text, wall, z, shown)))
        return None
    second = floor_seconds(real[0])
    if not FIRST_SECOND <= second <= LAST_SECOND:
        errors.append(FieldError(path, "invalid", "must be between 1970 and 9998"))
        return None
    return text, second


def _skipped(text: str, wall: datetime, zone: ZoneInfo, shown: list[datetime]) -> str:
    """Why a wall time does not exist: the clock change that skips it, as the wall shows it."""
    before = wall.replace(tzinfo=zone, fold=0).utcoffset()
    after = wall.replace(tzinfo=zone, fold=1).utcoffset()
    changes = clock_changes(str(zone), floor_seconds(shown[0]), floor_seconds(shown[-1]))
    if not changes or before is None or after is None:
        return f"{text} does not exist in {zone} (the clocks skip it); pick another time"
    change = datetime.fromtimestamp(changes[0], UTC).replace(tzinfo=None)
    jumped_from, jumped_to = (change + before).time(), (change + after).time()
    return (
        f"{text} does not exist in {zone}: that night the clocks jump from {jumped_from} to "
        f"{jumped_to}; pick a time outside the gap, e.g. {jumped_to}"
    )


def _bound(value: Any, key: str, errors: list[FieldError]) -> datetime | None:
    """`starts_at` or `ends_at`: an RFC 3339 timestamp with its offset."""
    path = f"transport_config.{key}"
    if value is _MISSING:
        return None
    example = 'e.g. "2026-09-01T00:00:00Z" or "2026-09-01T02:00:00+02:00"'
    if not isinstance(value, str):
        errors.append(
            FieldError(path, "type_mismatch", f"must be an RFC 3339 timestamp string, {example}")
        )
        return None
    try:
        return parse_rfc3339(value)
    except ValueError as exc:
        errors.append(
            FieldError(path, "invalid", f"{exc}: an RFC 3339 timestamp with an offset, {example}")
        )
        return None


def _timezone(value: Any, errors: list[FieldError]) -> str | None:
    path = "transport_config.timezone"
    if value is _MISSING:
        return "UTC"
    if not isinstance(value, str):
        errors.append(
            FieldError(path, "type_mismatch", f"must be a zone name, got {_json_type(value)}")
        )
        return None
    if not value.strip():
        errors.append(FieldError(path, "invalid", "is empty; leave it out for UTC"))
        return None
    if "/" not in value and value != "UTC":
        hint = _ZONE_HINTS.get(value.upper(), "an Area/Location name such as Europe/London")
        errors.append(
            FieldError(
                path,
                "invalid",
                f'"{value}" is an abbreviation or legacy alias, which is ambiguous; '
                f"use an IANA zone name: {hint}",
            )
        )
        return None
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        close = [z for z in _zone_names() if z.lower() == value.lower()]
        close = close or difflib.get_close_matches(value, _zone_names(), n=1)
        hint = f'did you mean "{close[0]}"?' if close else "use an IANA name such as Europe/London"
        errors.append(FieldError(path, "invalid", f'unknown time zone "{value}"; {hint}'))
        return None
    return value


@lru_cache(maxsize=1)
def _zone_names() -> list[str]:
    return sorted(available_timezones())


def _payload(value: Any, errors: list[FieldError]) -> str | None:
    """The payload as compact JSON text, which is also the size that is limited."""
    path = "transport_config.payload"
    if value is _MISSING:
        return "{}"
    if not isinstance(value, Mapping):
        errors.append(
            FieldError(
                path,
                "type_mismatch",
                f'must be a JSON object, got {_json_type(value)}; wrap it: {{"value": ...}}',
            )
        )
        return None
    try:
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        errors.append(FieldError(path, "invalid", f"must be plain JSON: {exc}"))
        return None
    size = len(text.encode())
    if size > PAYLOAD_LIMIT_BYTES:
        errors.append(
            FieldError(
                path,
                "too_long",
                f"is {size:,} bytes as JSON; the limit is {PAYLOAD_LIMIT_BYTES:,} (256 KiB): "
                "store large data elsewhere and pass a reference to it",
            )
        )
        return None
    return text


def _choice(
    value: Any, key: str, choices: tuple[str, ...], default: str, errors: list[FieldError]
) -> str | None:
    path = f"transport_config.{key}"
    allowed = ", ".join(f'"{c}"' for c in choices)
    if value is _MISSING:
        return default
    if not isinstance(value, str):
        errors.append(
            FieldError(path, "type_mismatch", f"must be one of {allowed}, got {_json_type(value)}")
        )
        return None
    if value not in choices:
        errors.append(FieldError(path, "invalid", f'"{value}" is not one of {allowed}'))
        return None
    return value


def _integer(
    value: Any, path: str, high: int, errors: list[FieldError], low: int = 1
) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        errors.append(
            FieldError(
                path,
                "type_mismatch",
                f"must be an integer {low}..{high}, got {_json_type(value)}",
            )
        )
        return None
    if not low <= value <= high:
        errors.append(FieldError(path, "invalid", f"must be {low}..{high}, got {value}"))
        return None
    return value


def _max_catch_up(value: Any, policy: str | None, errors: list[FieldError]) -> int | None:
    path = "transport_config.max_catch_up"
    if value is _MISSING and policy == "catch_up":
        errors.append(
            FieldError(
                path,
                "required",
                'is required when misfire_policy is "catch_up": how many missed occurrences '
                f"to run after an outage (1..{MAX_CATCH_UP_LIMIT})",
            )
        )
        return None
    if value is _MISSING:
        return 1
    if value == 0 and not isinstance(value, bool):
        errors.append(
            FieldError(path, "invalid", 'is 0, which catches nothing up: use misfire_policy "skip"')
        )
        return None
    return _integer(value, path, MAX_CATCH_UP_LIMIT, errors)


def _concurrency(
    value: Any, channel_id: str, errors: list[FieldError]
) -> tuple[str, str, int] | None:
    """`(policy, key, slots)`; the key defaults to the channel's own id."""
    prefix = "transport_config.concurrency"
    if value is _MISSING:
        return "allow", channel_id, 1
    if not isinstance(value, Mapping):
        errors.append(
            FieldError(
                prefix,
                "type_mismatch",
                f'must be an object, got {_json_type(value)}; e.g. {{"policy": "forbid"}}',
            )
        )
        return None
    found = len(errors)
    refuse_unknown_keys(value, _CONCURRENCY_KEYS, prefix, errors)

    policy = _choice(
        value.get("policy", _MISSING), "concurrency.policy", _CONCURRENCY_POLICIES, "allow", errors
    )

    key = value.get("key", _MISSING)
    if key is _MISSING:
        key = channel_id
    elif not isinstance(key, str):
        errors.append(
            FieldError(f"{prefix}.key", "type_mismatch", f"must be a string, got {_json_type(key)}")
        )
    elif not _LOCK_NAME.fullmatch(key):
        errors.append(
            FieldError(
                f"{prefix}.key",
                "invalid",
                f'"{key}" is not a lock name: 1-128 letters, digits, `_`, `.` or `-`, '
                "starting with a letter or digit",
            )
        )

    slots = value.get("slots", 1)
    _integer(slots, f"{prefix}.slots", MAX_SLOTS, errors)
    if len(errors) > found:
        return None
    return str(policy), str(key), int(slots)


def _retry(value: Any, errors: list[FieldError]) -> RetryPolicy | None:
    """The retry policy; each key defaults on its own (`RetryPolicy`'s defaults)."""
    prefix = "transport_config.retry"
    default = RetryPolicy()
    if value is _MISSING:
        return default
    if not isinstance(value, Mapping):
        errors.append(
            FieldError(
                prefix,
                "type_mismatch",
                f'must be an object, got {_json_type(value)}; e.g. {{"max_attempts": 3}}',
            )
        )
        return None
    found = len(errors)
    refuse_unknown_keys(value, _RETRY_KEYS, prefix, errors)
    attempts = _integer(
        value.get("max_attempts", default.max_attempts),
        f"{prefix}.max_attempts",
        MAX_ATTEMPTS,
        errors,
    )
    backoff = _integer(
        value.get("backoff_secs", default.backoff_secs),
        f"{prefix}.backoff_secs",
        MAX_BACKOFF_SECS,
        errors,
        low=0,
    )
    cap = _integer(
        value.get("max_backoff_secs", max(default.max_backoff_secs, backoff or 0)),
        f"{prefix}.max_backoff_secs",
        MAX_BACKOFF_SECS,
        errors,
        low=0,
    )
    if backoff is not None and cap is not None and cap < backoff:
        errors.append(
            FieldError(
                f"{prefix}.max_backoff_secs",
                "invalid",
                f"is {cap}, below backoff_secs ({backoff}); the cap must be at least the "
                "first wait",
            )
        )
    if len(errors) > found:
        return None
    assert attempts is not None and backoff is not None and cap is not None
    return RetryPolicy(max_attempts=attempts, backoff_secs=backoff, max_backoff_secs=cap)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, list | tuple):
        return "an array"
    return type(value).__name__
