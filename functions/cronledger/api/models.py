"""What crosses the wire: request bodies, response shapes and the error envelope.

These models are the OpenAPI document, and every response is validated against them, so the
document cannot drift from what is served. A channel body is documented as its model but read
as a JSON object (`documents`), so a wrong type is reported beside every other problem.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Annotated, Any, Generic, Literal, TypeVar

from aws_lambda_powertools.event_handler.openapi.params import Path, Query
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    GetJsonSchemaHandler,
    WithJsonSchema,
)
from pydantic.json_schema import JsonSchemaValue

from cronledger.api.documents import ChannelCreate, ChannelUpdate
from cronledger.api.request_rules import storable_text
from cronledger.api_client import PREFIX as PREFIX
from cronledger.errors import FieldError, ValidationFailed
from cronledger.instants import parse_rfc3339, to_rfc3339
from cronledger.labels import Labels
from cronledger.ledger import Page as LedgerPage

T = TypeVar("T")

MAX_TEXT = 512
"""The longest id, name or filter value a request may carry."""


def _text(value: Any) -> Any:
    # NUL and lone surrogates cannot be stored (PostgreSQL refuses them): malformed, not a 500.
    if isinstance(value, str) and not storable_text(value):
        raise ValueError("must be valid Unicode text without NUL characters")
    return value


def _instant(value: Any) -> datetime:
    if not isinstance(value, str):
        raise ValueError("must be an RFC 3339 timestamp string, e.g. 2026-09-01T02:15:00Z")
    return parse_rfc3339(value)


_DATE_TIME = WithJsonSchema(
    {"type": "string", "format": "date-time", "example": "2026-09-01T02:15:00Z"}
)
Text = Annotated[str, BeforeValidator(_text), Field(min_length=1, max_length=MAX_TEXT)]
"""An id or a filter value from a path or a query string."""

Instant = Annotated[datetime, BeforeValidator(_instant), _DATE_TIME]
"""An RFC 3339 timestamp with an offset in a request; anything else is a 422."""


def _timestamp(value: Any) -> Any:
    return to_rfc3339(value) if isinstance(value, datetime) else value


Timestamp = Annotated[str, BeforeValidator(_timestamp), _DATE_TIME]
"""An RFC 3339 UTC timestamp with `Z` in a response (a datetime is written so)."""

ChannelId = Annotated[Text, Path(description="the channel's id")]
Limit = Annotated[int, Query(ge=1, le=1000, description="page size, 1..1000")]
Offset = Annotated[
    int,
    Query(
        ge=0,
        le=2**31 - 1,
        description="rows to skip, up to 10000; further pages are read with `after`",
    ),
]
After = Annotated[
    Text | None, Query(description="the `next` of the previous page: the page after it")
]
NamePrefix = Annotated[Text | None, Query(description="names starting with this")]
ExactTotal = Annotated[
    bool, Query(description="count every matching row (otherwise counted up to 10000)")
]
LabelSelector = Annotated[
    list[Text] | None,
    Query(
        description="key=value: only channels carrying that label; repeat it (or join terms "
        "with commas) for channels carrying all of them",
        examples=["team=billing"],
    ),
]


def invalid(path: str, message: str, summary: str = "validation failed") -> ValidationFailed:
    """A refusal of one value, at `path`, saying how to fix it."""
    return ValidationFailed([FieldError(path, "invalid", message)], summary)


def known(name: str, value: str | None, choices: tuple[str, ...]) -> None:
    """A filter that could never match is a mistake worth saying, not an empty page."""
    if value is not None and value not in choices:
        message = f"unknown {name} {value!r}; one of {', '.join(choices)}"
        raise invalid(name, message, "invalid filter")


# --- request bodies -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DocumentedAs:
    """A body read as any JSON object and documented as `model`: the route validates it with
    the model itself, so every problem of a channel document is one 400 (with the target
    checked against the operator's policy), never a lone 422."""

    model: type[BaseModel]

    def __get_pydantic_json_schema__(
        self, core_schema: Any, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return handler(self.model.__pydantic_core_schema__)


ChannelCreateBody = Annotated[dict[str, Any], DocumentedAs(ChannelCreate)]
ChannelUpdateBody = Annotated[dict[str, Any], DocumentedAs(ChannelUpdate)]


class _Closed(BaseModel):
    """A request body: an unknown key is refused, not ignored."""

    model_config = ConfigDict(extra="forbid")


class StatusChange(_Closed):
    status: Literal["active", "paused", "archived"]
    reason: str | None = Field(
        None, max_length=500, description="why, shown with the status (e.g. a pause's reason)"
    )


class BulkStatusChange(_Closed):
    """Every channel carrying all of `selector`'s labels moved to `status`, one at a time."""

    selector: Labels = Field(description="labels a channel must all carry (at least one)")
    status: Literal["active", "paused", "archived"]
    reason: str | None = Field(
        None, max_length=500, description="why, shown with each channel's status"
    )


class CancelReason(_Closed):
    """Why an operator cancels; recorded in the occurrence's error and its event."""

    reason: Text | None = None


class BackfillWindow(_Closed):
    """Both ends inclusive, on the schedule's instants; `to` must not be in the future."""

    model_config = ConfigDict(populate_by_name=True)

    from_: Instant = Field(alias="from")
    to: Instant
    overlap: Literal["sequential", "policy"] = Field(
        "sequential",
        description="sequential: the rows run one after another, each waiting while the "
        "channel's concurrency key is busy; policy: the channel's concurrency.policy decides, "
        "as for its scheduled rows (forbid skips a row whose key is busy)",
    )


# --- responses --------------------------------------------------------------------------------


class One(BaseModel, Generic[T]):
    data: T


class Page(BaseModel, Generic[T]):
    """A page of a list: pass `next` back as `after` for the one after it. `total` is exact
    when `total_is_exact`, and otherwise a lower bound (more rows than that match)."""

    data: list[T]
    total: int
    total_is_exact: bool = True
    limit: int
    offset: int
    next: str | None = Field(
        default=None, description="the `after` of the next page; null on the last page"
    )

    @classmethod
    def of(cls, page: LedgerPage[Any], view: Callable[[Any], T]) -> Page[T]:
        """The wire form of a ledger page, each row through `view`."""
        rows = replace(page, data=[view(row) for row in page.data])
        return cls.model_validate(rows, from_attributes=True)


class KeysetPage(BaseModel, Generic[T]):
    """A page of a list read by key: pass `next` back as `after` for the one after it."""

    data: list[T]
    limit: int
    next: str | None = Field(description="the `after` of the next page; null on the last page")


class ErrorDetail(BaseModel):
    path: str
    code: str
    message: str


class ErrorBody(BaseModel):
    code: str
    message: str
    details: list[ErrorDetail]


class ErrorEnvelope(BaseModel):
    error: ErrorBody


_ENDED = (
    "the schedule has no instant left (its `at` fired or was missed, or it is past `ends_at`): "
    "the cursor is parked and `next_fire_at` is null"
)


class CompiledView(BaseModel):
    """The schedule as the scheduler reads it, with the cursor when one exists.
    `next_fire_at` is null before the first reconcile, while the channel is paused, and once
    it has ended."""

    schedule: str | None = Field(description="the cron expression; null for a one-time `at`")
    at: str | None = Field(description="a one-time schedule's local date-time")
    timezone: str
    starts_at: Timestamp | None
    ends_at: Timestamp | None
    jitter_secs: int
    misfire_policy: str
    max_catch_up: int
    concurrency_policy: str
    concurrency_key: str
    slots: int
    next_fire_at: Timestamp | None
    paused_at: Timestamp | None
    ended: bool = Field(description=_ENDED)


class ChannelView(BaseModel):
    channel_id: str
    name: str
    status: str
    version: int
    labels: dict[str, str]
    transport_config: dict[str, Any]
    target: dict[str, Any]
    target_ref: str | None
    timeout_ms: int
    created_at: Timestamp
    updated_at: Timestamp
    compiled: CompiledView | None = Field(
        description="null when the stored definition no longer compiles"
    )
    status_reason: str | None = Field(None, description="why it is in its status, if said")
    warnings: list[str] = Field(
        default_factory=list,
        description="what the write accepted but the caller should know (a past `at`)",
    )


class ChannelVersion(BaseModel):
    """One version of a channel's definition, as it was written."""

    channel_id: str
    name: str
    version: int
    current: bool = Field(description="whether this is the channel's current version")
    labels: dict[str, str]
    transport_config: dict[str, Any]
    target: dict[str, Any]
    timeout_ms: int
    created_at: Timestamp = Field(description="when this version was written")


MAX_ATTEMPTS_DESCRIPTION = (
    "attempts allowed in all: the channel's retry.max_attempts, or one more than were made "
    "when an operator retried it"
)


class StatusMove(BaseModel):
    """One channel of a bulk status change: where it was, where it is, and why not moved."""

    channel_id: str
    name: str
    before: str = Field(description="its status before the change")
    status: str = Field(description="its status after it")
    error: ErrorBody | None = Field(
        description="why this channel did not move (the error a single change would answer); "
        "null when it moved or already had the status"
    )


class OccurrenceSummary(BaseModel):
    id: str
    channel_id: str
    channel_name: str
    trigger: str
    scheduled_for: Timestamp
    due_at: Timestamp = Field(
        description="when it is (or was) claimable: scheduled_for plus jitter, or a retry's backoff"
    )
    status: str
    attempt: int = Field(description="attempts made so far (the claim counts each)")
    max_attempts: int = Field(description=MAX_ATTEMPTS_DESCRIPTION)
    started_at: Timestamp | None
    completed_at: Timestamp | None
    lag_ms: int | None = Field(description="started_at - due_at")
    late_by_ms: int | None = Field(
        None, description="started_at - scheduled_for: how late after its instant it ran"
    )
    duration_ms: int | None = Field(description="completed_at - started_at")
    error_message: str | None = Field(
        description="the first 300 characters; while a retry waits (pending, due_at ahead), "
        "the last attempt's error"
    )


class OccurrenceRecord(OccurrenceSummary):
    channel_version: int
    executing_version: int | None
    target_ref: str | None
    due_at: Timestamp = Field(description="when it is (or was) claimable; a retry's next try")
    claimed_by: str | None
    claimed_until: Timestamp | None
    singleton_key: str | None
    singleton_slot: int | None
    fencing_token: int | None
    trace_id: str | None
    error_message: str | None
    result: str | None = Field(description="the target's answer, truncated")
    created_at: Timestamp
    updated_at: Timestamp
    attempts: list[AttemptRecord] = Field(
        default_factory=list,
        description="every attempt on record, first to last (in the single-occurrence read)",
    )


class AttemptRecord(BaseModel):
    number: int
    claimant: str
    started_at: Timestamp
    ended_at: Timestamp | None = Field(description="None while it runs")
    outcome: str | None = Field(
        description="completed, failed, cancelled, skipped_singleton, or abandoned (its lease "
        "ran out unsettled); None while it runs"
    )
    error_message: str | None
    error_detail: str | None = Field(description="a Python target's last traceback frames")
    duration_ms: int | None
    fencing_token: int | None


class PreviewInstant(BaseModel):
    utc: Timestamp
    local: str = Field(
        description="wall time in the channel's zone with its offset",
        examples=["2026-10-25T01:30:00+01:00"],
    )
    due_at: Timestamp = Field(
        description="when its row becomes claimable: the instant plus the channel's jitter"
    )
    weekday: str = Field("", description="the local day of the week", examples=["Sun"])
    dst: str | None = Field(
        None,
        description="the zone's offset changed since the instant before (a DST transition "
        "between them): old → new offset; null when it did not",
        examples=["+01:00 → +00:00"],
    )


class Preview(BaseModel):
    channel_id: str
    schedule: str | None
    at: str | None
    timezone: str
    instants: list[PreviewInstant]
    ended: bool = Field(
        description="no instant is left after now: its `at` has passed, or it is past `ends_at`"
    )
    note: str | None = Field(description="why fewer instants than asked for, when it ended")


class BackfillResult(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    channel_id: str
    from_: Timestamp = Field(alias="from")
    to: Timestamp
    instants: int = Field(description="schedule instants in the window")
    created: int = Field(description="backfill occurrences written")
    already_present: int = Field(description="instants that already had an occurrence")
    overlap: str
    dry_run: bool = False
    planned: list[Timestamp] = Field(
        default_factory=list, description="with dry_run: the instants it would write, oldest first"
    )


class ChannelStatus(BaseModel):
    channel_id: str
    name: str
    version: int
    labels: dict[str, str]
    schedule: str | None
    at: str | None
    timezone: str | None
    next_fire_at: Timestamp | None
    paused_at: Timestamp | None
    ended: bool = Field(description=_ENDED)
    last_occurrence_id: str | None
    last_status: str | None
    last_scheduled_for: Timestamp | None
    last_completed_at: Timestamp | None
    pending: int
    concurrency_policy: str | None
    concurrency_key: str | None
    slots: int | None
    slots_held: int | None = Field(description='live holders of the key under "forbid"')
    open_alert: str | None = Field(
        description="the kind of the channel's delivered failed, abandoned, overdue or stalled "
        "event that no completed occurrence has answered yet; null when none is open"
    )


class Health(BaseModel):
    database: Literal["reachable"]
    db_now: Timestamp
    oldest_pending_secs: float | None
    pending: int
    last_reconcile_at: Timestamp | None
    last_claim_at: Timestamp | None
    undelivered_events: int = Field(description="events waiting to be delivered")
    oldest_undelivered_event_secs: float | None = Field(
        description="how long the oldest of them has waited; null when none waits"
    )


class EventLinks(BaseModel):
    api: str = Field(description="the API path of the occurrence, or of the channel")
    console: str = Field(
        description="the console's deep link", examples=["/#occurrence=0193…", "/#channel=0193…"]
    )


class EventView(BaseModel):
    """An event as its receiver gets it, with where its delivery stands. Keys a kind adds
    (`oldest_scheduled_for` of a stalled channel, `singleton_key`) are kept."""

    model_config = ConfigDict(extra="allow")

    event_id: str = Field(description="stable: a redelivery carries the same one")
    sequence: int | None = Field(
        description="the channel's gapless delivery counter; null for an event only recorded "
        "(its kind is not in the channel's `alerts.on`)"
    )
    kind: str = Field(examples=["occurrence.failed"])
    at: Timestamp
    channel_id: str
    channel_name: str | None
    timezone: str
    occurrence_id: str | None
    scheduled_for: Timestamp | None
    due_at: Timestamp | None
    trigger: str | None
    attempt: int | None
    max_attempts: int | None
    status: str | None
    error: str | None = Field(description="the error excerpt the ledger keeps")
    count: int | None = Field(description="instants a skip summary stands for")
    consecutive_failures: int
    links: EventLinks
    deliver: bool = Field(description="whether the event is to be delivered")
    delivered_at: Timestamp | None = Field(description="when the destination accepted it")
    send_attempts: int
    last_error: str | None = Field(description="why the last send did not land")
