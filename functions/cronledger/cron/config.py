"""`transport_config` as models: the one home of its limits, its JSON schema and its checks.

A document is a recurring `schedule` or a one-time `at`, told apart by which key it has. The
calendar checks live with the keys they judge and read the keys validated before them. A
schedule must fire at the same instants every time it is compiled, so random and hashed fields
(`R`, `H`) are refused; an `at` or `ends_at` in the past is accepted (a channel outlives its
last instant).
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Annotated, Any, ClassVar, Final, Literal, get_args
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from croniter import croniter
from pydantic import (
    BeforeValidator,
    Discriminator,
    Field,
    GetJsonSchemaHandler,
    PlainValidator,
    Tag,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    WrapValidator,
    field_validator,
)
from pydantic.json_schema import JsonSchemaValue, SkipJsonSchema
from pydantic_core import InitErrorDetails

from cronledger.alerts import Alerts
from cronledger.cron.compiled import ConcurrencyPolicy, MisfirePolicy, RetryPolicy
from cronledger.cron.expression import (
    DAY_OF_MONTH,
    DAY_OF_WEEK,
    FIELDS,
    ExpressionRefused,
    parse_expression,
)
from cronledger.cron.walk import (
    FIRST_SECOND,
    LAST_SECOND,
    calendar,
    ceil_seconds,
    clock_changes,
    floor_seconds,
    seconds,
    window,
)
from cronledger.instants import parse_rfc3339
from cronledger.validation import UNTAGGED, Document, choice, json_type, refused, whole

PAYLOAD_LIMIT_BYTES: Final = 256 * 1024
MAX_CATCH_UP_LIMIT: Final = 1000
MAX_SLOTS: Final = 100
MAX_JITTER_SECS: Final = 3600
MAX_ATTEMPTS: Final = 20
MAX_BACKOFF_SECS: Final = 86_400
VALIDITY_HORIZON: Final = timedelta(days=5 * 366)
DEFAULT_RETRY: Final = RetryPolicy()

_AT: Final = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}")
_AT_EXAMPLE: Final = "2026-09-01T02:15:00"
_LOCK_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
_EXAMPLE: Final = "a daily 02:15 is `0 15 2 * * *`"
_BOUND_EXAMPLE: Final = 'e.g. "2026-09-01T00:00:00Z" or "2026-09-01T02:00:00+02:00"'
_ALERTS_EXAMPLE: Final = {"on": ["failed", "overdue", "recovered"], "overdue_after_secs": 3600}
#: What croniter reads in a day field beyond its plain values, for `_explain_parse_error`.
_DAY_FORMS: Final = {DAY_OF_MONTH: ", L or nW", DAY_OF_WEEK: ", with L or #n"}
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


# --- one key at a time ------------------------------------------------------------------------


def _zone(value: Any) -> str:
    if not isinstance(value, str):
        raise refused("type_mismatch", f"must be a zone name, got {json_type(value)}")
    if not value.strip():
        raise refused("invalid", "is empty; leave it out for UTC")
    if "/" not in value and value != "UTC":
        hint = _ZONE_HINTS.get(value.upper(), "an Area/Location name such as Europe/London")
        raise refused(
            "invalid",
            f'"{value}" is an abbreviation or legacy alias, which is ambiguous; '
            f"use an IANA zone name: {hint}",
        )
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        close = [z for z in _zone_names() if z.lower() == value.lower()]
        close = close or difflib.get_close_matches(value, _zone_names(), n=1)
        hint = f'did you mean "{close[0]}"?' if close else "use an IANA name such as Europe/London"
        raise refused("invalid", f'unknown time zone "{value}"; {hint}') from None
    return value


@lru_cache(maxsize=1)
def _zone_names() -> list[str]:
    return sorted(available_timezones())


def _payload(value: Any) -> Any:
    """A JSON object whose compact JSON text, the size that is limited, fits."""
    if not isinstance(value, dict):
        raise refused(
            "type_mismatch",
            f'must be a JSON object, got {json_type(value)}; wrap it: {{"value": ...}}',
        )
    try:
        size = len(payload_json(value).encode())
    except (TypeError, ValueError) as exc:
        raise refused("invalid", f"must be plain JSON: {exc}") from None
    if size > PAYLOAD_LIMIT_BYTES:
        raise refused(
            "too_long",
            f"is {size:,} bytes as JSON; the limit is {PAYLOAD_LIMIT_BYTES:,} (256 KiB): "
            "store large data elsewhere and pass a reference to it",
        )
    return value


def payload_json(payload: dict[str, Any]) -> str:
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _bound(value: Any) -> datetime:
    """`starts_at` or `ends_at`: an RFC 3339 timestamp with its offset."""
    if not isinstance(value, str):
        raise refused("type_mismatch", f"must be an RFC 3339 timestamp string, {_BOUND_EXAMPLE}")
    try:
        return parse_rfc3339(value)
    except ValueError as exc:
        raise refused(
            "invalid", f"{exc}: an RFC 3339 timestamp with an offset, {_BOUND_EXAMPLE}"
        ) from None


def _lock_name(value: Any) -> str:
    if not isinstance(value, str):
        raise refused("type_mismatch", f"must be a string, got {json_type(value)}")
    if not _LOCK_NAME.fullmatch(value):
        raise refused(
            "invalid",
            f'"{value}" is not a lock name: 1-128 letters, digits, `_`, `.` or `-`, '
            "starting with a letter or digit",
        )
    return value


def _expression(value: Any) -> str:
    if not isinstance(value, str):
        raise refused("type_mismatch", f"must be a string, got {json_type(value)}; {_EXAMPLE}")
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
        shape = " ".join(field.name for field in FIELDS)
        raise refused("invalid", f"has {len(fields)} field(s), needs six ({shape}); {fix}")
    for field, text in zip(FIELDS, fields, strict=True):
        if any(item[:1].upper() in ("R", "H") for item in text.split(",")):
            raise refused(
                "invalid",
                f"the {field.name} field `{text}` is random or hashed (R/H); a schedule must fire "
                "at the same instants every time it is read: use fixed values",
            )
    try:
        parse_expression(fields)  # the meaning this project gives it (`expression`)
    except ExpressionRefused as exc:
        raise refused("invalid", str(exc)) from None
    expression = " ".join(fields)
    problem = _croniter_refusal(expression)
    if problem is not None:
        raise refused("invalid", problem)
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
    for i, field in enumerate(FIELDS):
        probe = ["*"] * 6
        probe[i] = fields[i]
        try:
            croniter(" ".join(probe), second_at_beginning=True)
        except Exception:
            allowed = field.allowed + _DAY_FORMS.get(field, "")
            return f"the {field.name} field `{fields[i]}` is not valid; allowed: {allowed}"
    return f"`{' '.join(fields)}` does not parse ({exc}); {_EXAMPLE}"


def _local_text(value: Any) -> str:
    text = value.strip() if isinstance(value, str) else None
    if text is not None and _AT.fullmatch(text):
        try:
            datetime.fromisoformat(text)
        except ValueError as exc:
            raise refused("invalid", f"{text!r} is not a real date-time ({exc})") from None
        return text
    if text is not None and _AT.match(text) and text[19:20] in ("Z", "z", "+", "-"):
        raise refused(
            "invalid",
            f"{value!r} carries an offset: `at` is a wall time read in `timezone`; drop the "
            "offset (for a UTC instant, set timezone UTC)",
        )
    raise refused(
        "type_mismatch" if text is None else "invalid",
        f'must be a local date-time `YYYY-MM-DDTHH:MM:SS` in `timezone`, e.g. "{_AT_EXAMPLE}"',
    )


def at_second(text: str, zone: str) -> int:
    """The UTC second a valid `at` stands for in `zone`: a wall time the zone skips is refused;
    one it shows twice means its first instant."""
    wall, z = datetime.fromisoformat(text), ZoneInfo(zone)
    try:
        shown = sorted({wall.replace(tzinfo=z, fold=fold).astimezone(UTC) for fold in (0, 1)})
    except OverflowError:  # 9999-12-31T23:00:00 west of UTC is in year 10000 in UTC
        raise refused("invalid", "must be between 1970 and 9998") from None
    real = [t for t in shown if t.astimezone(z).replace(tzinfo=None) == wall]
    if not real:
        raise refused("invalid", _skipped(text, wall, z, shown))
    second = floor_seconds(real[0])
    if not FIRST_SECOND <= second <= LAST_SECOND:
        raise refused("invalid", "must be between 1970 and 9998")
    return second


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


def _max_catch_up(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    if value == 0 and type(value) is int:
        raise refused("invalid", 'is 0, which catches nothing up: use misfire_policy "skip"')
    return handler(value)


def _refuse_with_at(message: str, instead: str | None = None) -> Any:
    def refuse(value: Any) -> Any:
        raise refused("invalid", message, instead)

    return SkipJsonSchema[Annotated[Any, PlainValidator(refuse), Field(None)]]  # type: ignore[misc]


class _Inline:
    """A model's JSON schema written in place, with an example (what OpenAPI tools show best)."""

    def __get_pydantic_json_schema__(
        self, core_schema: Any, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        schema = handler(core_schema)
        schema = next((s for s in schema.get("anyOf", [schema]) if "$ref" in s), schema)
        schema = handler.resolve_ref_schema(schema)
        return {**schema, "example": _ALERTS_EXAMPLE}


Zone = Annotated[str, BeforeValidator(_zone), Field(json_schema_extra={"example": "Europe/London"})]
Bound = Annotated[datetime | None, BeforeValidator(_bound)]
_NoBound = _refuse_with_at("bounds a recurring `schedule`; a one-time `at` fires once: drop it")


# --- the document -----------------------------------------------------------------------------


class Concurrency(Document):
    """Whether runs of the channel may overlap, and on which lock."""

    example: ClassVar[str] = '{"policy": "forbid"}'

    policy: choice(*get_args(ConcurrencyPolicy)) = "allow"  # type: ignore[valid-type]
    key: Annotated[str | None, BeforeValidator(_lock_name)] = Field(
        None, description="the lock name; default: the channel's id", pattern=_LOCK_NAME.pattern
    )
    slots: whole(1, MAX_SLOTS) = 1  # type: ignore[valid-type]


class Retry(Document):
    """Attempts per occurrence and the backoff between them."""

    example: ClassVar[str] = '{"max_attempts": 3}'

    max_attempts: whole(1, MAX_ATTEMPTS) = DEFAULT_RETRY.max_attempts  # type: ignore[valid-type]
    backoff_secs: whole(0, MAX_BACKOFF_SECS) = DEFAULT_RETRY.backoff_secs  # type: ignore[valid-type]
    max_backoff_secs: whole(0, MAX_BACKOFF_SECS) = DEFAULT_RETRY.max_backoff_secs  # type: ignore[valid-type]

    @field_validator("max_backoff_secs")
    @classmethod
    def _cap_covers_the_first_wait(cls, cap: int, info: ValidationInfo) -> int:
        backoff = info.data.get("backoff_secs")
        if backoff is not None and cap < backoff:
            raise refused(
                "invalid",
                f"is {cap}, below backoff_secs ({backoff}); the cap must be at least the first "
                "wait",
            )
        return cap

    def policy(self) -> RetryPolicy:
        """The policy; a cap left out is the default, or the first wait when that is longer."""
        cap = self.max_backoff_secs
        if "max_backoff_secs" not in self.model_fields_set:
            cap = max(cap, self.backoff_secs)
        return RetryPolicy(self.max_attempts, self.backoff_secs, cap)


class _Common(Document):
    example: ClassVar[str] = '{"schedule": "0 15 2 * * *"}'

    timezone: Zone = "UTC"
    payload: Annotated[dict[str, Any], BeforeValidator(_payload)] = Field(
        default_factory=dict, description=f"at most {PAYLOAD_LIMIT_BYTES} bytes as JSON"
    )
    misfire_policy: choice(*get_args(MisfirePolicy)) = "latest"  # type: ignore[valid-type]
    max_catch_up: Annotated[
        whole(1, MAX_CATCH_UP_LIMIT),  # type: ignore[valid-type]
        WrapValidator(_max_catch_up),
        Field(description='required under misfire_policy "catch_up"'),
    ] = 1
    concurrency: Concurrency = Field(default_factory=Concurrency)  # type: ignore[arg-type]
    retry: Retry = Field(
        default_factory=Retry,
        json_schema_extra={
            "example": {"max_attempts": 3, "backoff_secs": 10, "max_backoff_secs": 300}
        },
    )
    jitter_secs: whole(0, MAX_JITTER_SECS) = Field(  # type: ignore[valid-type]
        0,
        description="each instant's row is due up to this many seconds late, by a stable hash "
        "of the channel and instant; shorter than the schedule's shortest gap",
        json_schema_extra={"example": 60},
    )
    alerts: Annotated[Alerts | None, _Inline()] = None
    unknown_hints: ClassVar[Mapping[str, str]] = {
        "labels": "labels sit at the top of the channel document, beside name and "
        'transport_config, e.g. "labels": {"team": "billing"}'
    }

    @classmethod
    def relations(cls, document: Any) -> list[InitErrorDetails]:
        if document.get("misfire_policy") != "catch_up" or "max_catch_up" in document:
            return []
        message = (
            'is required when misfire_policy is "catch_up": how many missed occurrences to run '
            f"after an outage (1..{MAX_CATCH_UP_LIMIT})"
        )
        return [{"type": refused("required", message), "loc": ("max_catch_up",), "input": None}]


class Recurring(_Common):
    """A six-field cron `schedule` (second minute hour day-of-month month day-of-week), kept
    to its `starts_at`/`ends_at` bounds (inclusive)."""

    starts_at: Bound = Field(
        None,
        description="no instant before it fires (inclusive bound, RFC 3339 with offset)",
        json_schema_extra={"example": "2026-09-01T00:00:00Z"},
    )
    ends_at: Bound = Field(
        None,
        description="no instant after it fires (inclusive); past it the channel is ended, and "
        "moving it later resumes the channel from now",
        json_schema_extra={"example": "2026-12-31T23:59:59+01:00"},
    )
    schedule: str = Field(
        description="second minute hour day-of-month month day-of-week",
        json_schema_extra={"example": "0 15 2 * * MON-FRI"},
    )
    needs: ClassVar[dict[str, str]] = {
        "schedule": f"a six-field cron expression ({_EXAMPLE}), or `at` for a one-time schedule"
    }

    @field_validator("ends_at")
    @classmethod
    def _ends_after_it_starts(cls, ends: datetime | None, info: ValidationInfo) -> datetime | None:
        starts = info.data.get("starts_at")
        if ends is not None and starts is not None and starts > ends:
            raise refused("invalid", "is before starts_at")
        return ends

    @field_validator("schedule", mode="before")
    @classmethod
    def _fires(cls, value: Any, info: ValidationInfo) -> str:
        """A valid expression, checked against the keys validated before it: it fires in the
        next 5 years (in UTC when the zone is bad), inside its bounds, and every gap between its
        instants is longer than the jitter."""
        expression = _expression(value)
        data, context = info.data, info.context or {}
        zone, starts, ends = data.get("timezone"), data.get("starts_at"), data.get("ends_at")
        jitter_secs = data.get("jitter_secs", 0)
        start = ceil_seconds(context.get("now") or datetime.now(UTC))
        horizon = min(start + seconds(VALIDITY_HORIZON), LAST_SECOND)
        instants = calendar(expression, zone or "UTC")
        if instants.first(start, horizon) is None:
            raise refused(
                "invalid",
                f"`{expression}` never fires in the next 5 years in {zone or 'UTC'}; check the "
                "day-of-month and month fields (February 30th and April 31st never happen)",
            )
        lo, hi = window(starts, ends)
        found: list[InitErrorDetails] = []
        if (starts or ends) and lo <= hi and instants.first(lo, hi) is None:
            message = (
                f"no instant of `{expression}` in {zone or 'UTC'} falls between starts_at and "
                "ends_at: the channel would never fire; widen the window"
            )
            where = "ends_at" if ends else "starts_at"
            found.append({"type": refused("invalid", message, where), "loc": (), "input": None})
        if jitter_secs and zone is not None:
            gap = instants.gap_below(max(start, lo), min(horizon, hi), jitter_secs + 1)
            if gap is not None:
                message = (
                    f"is {jitter_secs}, not shorter than the schedule's shortest gap, {gap[0]} s "
                    f"({gap[1]}): rows would be due out of order; use at most {gap[0] - 1}"
                )
                found.append(
                    {"type": refused("invalid", message, "jitter_secs"), "loc": (), "input": None}
                )
        if found:
            raise ValidationError.from_exception_data("schedule", found)
        return expression


class OneTime(_Common):
    """A one-time schedule: a local date-time in `timezone`, no offset. A time the clocks skip
    is refused; one they repeat fires at its first instant."""

    at: str = Field(
        description="a one-time schedule: a local date-time in `timezone`, no offset; a time "
        "the clocks skip is refused, one they repeat fires at its first instant",
        pattern=rf"^{_AT.pattern}$",
        json_schema_extra={"example": _AT_EXAMPLE},
    )
    schedule: _refuse_with_at(  # type: ignore[valid-type]
        "give either `schedule` (a recurring cron expression) or `at` (one local date-time), "
        "not both",
        instead="at",
    )
    starts_at: _NoBound  # type: ignore[valid-type]
    ends_at: _NoBound  # type: ignore[valid-type]

    @field_validator("at", mode="before")
    @classmethod
    def _exists(cls, value: Any, info: ValidationInfo) -> str:
        text = _local_text(value)
        zone = info.data.get("timezone")
        if zone is not None:  # else the zone's own error says what to fix
            at_second(text, zone)
        return text


def _form(value: Any) -> Literal["schedule", "at"]:
    return "at" if isinstance(value, dict) and "at" in value else "schedule"


class _OneObject:
    """The union's JSON schema as one object: every key of both forms, and `oneOf` naming the
    key that tells them apart (what OpenAPI tools show best)."""

    def __get_pydantic_json_schema__(
        self, core_schema: Any, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        forms = [
            handler.resolve_ref_schema(handler(form.__pydantic_core_schema__))
            for form in (Recurring, OneTime)
        ]
        return {
            "type": "object",
            "description": "When the channel fires: a six-field cron `schedule` or a one-time "
            "`at`, exactly one of the two. Unknown keys are refused.",
            "properties": {key: v for form in forms for key, v in form["properties"].items()},
            "additionalProperties": False,
            "oneOf": [{"required": ["schedule"]}, {"required": ["at"]}],
            "example": {
                "schedule": "0 0 3 * * *",
                "timezone": "Europe/London",
                "starts_at": "2026-09-01T00:00:00Z",
                "ends_at": "2026-12-31T23:59:59Z",
                "jitter_secs": 300,
                "alerts": _ALERTS_EXAMPLE,
            },
        }


TransportConfig = Annotated[
    Annotated[Recurring, Tag("schedule")] | Annotated[OneTime, Tag("at")],
    Discriminator(_form),
    UNTAGGED,
    _OneObject(),
]
"""A `transport_config` document (see the module header)."""

TRANSPORT_CONFIG: Final = TypeAdapter[Recurring | OneTime](TransportConfig)
