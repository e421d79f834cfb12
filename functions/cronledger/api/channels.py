"""Channel routes: create, list, read, new version, status, delete (docs/guarantees.md#api).

Every edit is a new immutable version, validated first (every problem in one 400) so the
scheduler never meets a document it cannot compile. A PUT equal to the current definition
writes nothing (applying a file twice is idempotent); activating re-checks the stored schedule
and the target against today's policy; `?dry_run=true` runs the request and rolls it back.
"""

from __future__ import annotations

import json
from typing import Annotated, Literal

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.params import Body, Path, Query

from cronledger.api.documents import Definition, read_new_channel, read_new_version
from cronledger.api.errors import Router, error_response
from cronledger.api.models import (
    PREFIX,
    After,
    BulkStatusChange,
    ChannelCreateBody,
    ChannelId,
    ChannelUpdateBody,
    ChannelVersion,
    ChannelView,
    ErrorBody,
    ExactTotal,
    LabelSelector,
    Limit,
    NamePrefix,
    Offset,
    One,
    Page,
    StatusChange,
    StatusMove,
    Text,
)
from cronledger.api.past_at import past_at_warnings
from cronledger.api.services import serving
from cronledger.api.views import channel_version, channel_view, cursors_of, fields_of
from cronledger.errors import Conflict, CronledgerError, FieldError, ValidationFailed
from cronledger.labels import selector
from cronledger.ledger import (
    CHANNEL_ACTIVE,
    CHANNEL_ARCHIVED,
    CHANNEL_DRAFT,
    Channel,
    Page as LedgerPage,
)
from cronledger.schedule_cache import SHARED_SCHEDULES
from cronledger.targets import validate_target

ChannelStatusName = Literal["draft", "active", "paused", "archived"]
AllowPastAt = Annotated[
    bool,
    Query(
        description="save a one-time `at` that is already past (it will never run; the answer "
        "carries a warning)"
    ),
]
DryRun = Annotated[
    bool,
    Query(
        description="check and write as usual, then roll back: the answer (or the refusal) is "
        "what the request would give, and nothing is written"
    ),
]


router = Router("channels", f"{PREFIX}/channels")


@router.answers("POST", "", 201, "created", 400, 409, 415)
def create_channel(
    body: Annotated[ChannelCreateBody, Body()],
    dry_run: DryRun = False,
    allow_past_at: AllowPastAt = False,
) -> One[ChannelView]:
    """Create a channel (draft unless status is active)"""
    ledger, settings, policy = serving()
    new = read_new_channel(body, settings.default_timeout_ms, policy)
    config = new.definition.transport_config
    warnings = past_at_warnings(config, ledger.db_now(), allowed=allow_past_at)
    channel = ledger.channels.create_channel(
        new.name, **fields_of(new.definition), status=new.status, dry_run=dry_run
    )
    return _view(channel, warnings)


@router.answers("GET", "", 200, "a page of channels")
def list_channels(
    status: Annotated[ChannelStatusName | None, Query()] = None,
    name: Annotated[Text | None, Query(description="exact name")] = None,
    label: LabelSelector = None,
    name_prefix: NamePrefix = None,
    limit: Limit = 50,
    offset: Offset = 0,
    after: After = None,
    exact_total: ExactTotal = False,
) -> Page[ChannelView]:
    """List channels, newest first, a page at a time (pass `next` as `after`)"""
    ledger = serving().ledger
    page = channel_page(status, name, label, name_prefix, limit, offset, after, exact_total)
    states = cursors_of(ledger, [c.channel_id for c in page.data])
    return Page.of(page, lambda c: channel_view(c, states.get(c.channel_id)))


def channel_page(
    status: str | None,
    name: str | None,
    label: list[str] | None,
    name_prefix: str | None,
    limit: int,
    offset: int,
    after: str | None,
    exact_total: bool,
) -> LedgerPage[Channel]:
    """A page of channels as the listings filter them (`label`: `key=value` terms)."""
    return serving().ledger.channels.list_channels(
        status=status,
        limit=limit,
        offset=offset,
        name=name,
        name_prefix=name_prefix,
        labels=selector(label or []),
        after=after,
        exact_total=exact_total,
    )


@router.answers("GET", "/<channel_id>", 200, "the channel", 404)
def get_channel(channel_id: ChannelId) -> One[ChannelView]:
    """Read a channel"""
    return _view(serving().ledger.channels.get_channel(channel_id))


@router.answers("GET", "/<channel_id>/versions", 200, "a page of versions", 404)
def list_versions(
    channel_id: ChannelId, limit: Limit = 50, offset: Offset = 0
) -> Page[ChannelVersion]:
    """List a channel's versions, newest first"""
    ledger = serving().ledger
    page = ledger.channels.list_channel_versions(channel_id, limit=limit, offset=offset)
    current = ledger.channels.get_channel(channel_id).version
    return Page.of(page, lambda version: channel_version(version, current))


@router.answers("GET", "/<channel_id>/versions/<version>", 200, "the version", 404)
def get_version(
    channel_id: ChannelId,
    version: Annotated[int, Path(ge=1, le=2**31 - 1, description="a version number")],
) -> One[ChannelVersion]:
    """Read one version of a channel"""
    ledger = serving().ledger
    current = ledger.channels.get_channel(channel_id).version
    return One(data=channel_version(ledger.channels.get_channel(channel_id, version), current))


@router.answers("PUT", "/<channel_id>", 200, "the channel at its new version", 400, 404, 409, 415)
def update_channel(
    channel_id: ChannelId,
    body: Annotated[ChannelUpdateBody, Body()],
    dry_run: DryRun = False,
    allow_past_at: AllowPastAt = False,
) -> One[ChannelView]:
    """Write the channel's next version"""
    ledger, settings, policy = serving()
    current = ledger.channels.get_channel(channel_id)
    new = read_new_version(body, current.name, settings.default_timeout_ms, policy)
    before = current.transport_config
    warnings = past_at_warnings(
        new.transport_config, ledger.db_now(), allowed=allow_past_at, before=before
    )
    if new == Definition.of(current):
        return _view(current)
    written = ledger.channels.new_channel_version(channel_id, **fields_of(new), dry_run=dry_run)
    return _view(written, warnings)


@router.answers("PATCH", "/<channel_id>/status", 200, "the channel", 400, 404, 409, 415)
def set_status(
    channel_id: ChannelId, body: Annotated[StatusChange, Body()], dry_run: DryRun = False
) -> One[ChannelView]:
    """Activate, pause or archive a channel"""
    channel = serving().ledger.channels.get_channel(channel_id)
    return _view(_move(channel, body.status, body.reason, dry_run))


@router.answers("POST", "/status", 200, "each selected channel, moved or with why not", 415)
def set_status_by_selector(body: Annotated[BulkStatusChange, Body()]) -> One[list[StatusMove]]:
    """Activate, pause or archive every channel carrying the selector's labels

    Each channel moves in its own transaction, with the checks of a single change: one
    that may not move is reported with its error and the others still move. Archived
    channels are final and never selected; a draft is never activated by a selector (it
    was never running, so it is not "resumed")."""
    if not body.selector:
        message = 'name at least one label, e.g. {"team": "billing"}'
        raise ValidationFailed(
            [FieldError("selector", "required", message)], "invalid bulk status change"
        )
    moves = []
    for channel in serving().ledger.channels.labelled_channels(body.selector):
        error = None
        try:
            if body.status == CHANNEL_ACTIVE and channel.status == CHANNEL_DRAFT:
                raise Conflict(
                    f"channel {channel.channel_id} is a draft: a selector resumes paused "
                    "channels; activate a draft on its own"
                )
            after = _move(channel, body.status, body.reason, False).status
        except CronledgerError as exc:
            after, error = channel.status, _error_of(exc, f"PATCH {PREFIX}/channels/status")
        move = {**fields_of(channel), "before": channel.status, "status": after, "error": error}
        moves.append(StatusMove.model_validate(move))
    return One(data=moves)


def _move(channel: Channel, status: str, reason: str | None, dry_run: bool) -> Channel:
    """`channel` moved to `status`. Activating re-checks its schedule and its target against
    today's policy, unless it is archived (final: the ledger's 409, not a 400 inviting a fix)."""
    if status == CHANNEL_ACTIVE and channel.status != CHANNEL_ARCHIVED:
        SHARED_SCHEDULES.get(channel)
        validate_target(channel.target, serving().policy)
    return serving().ledger.channels.set_channel_status(
        channel.channel_id, status, dry_run=dry_run, reason=reason
    )


def _error_of(exc: CronledgerError, request: str) -> ErrorBody:
    """The error body a single request refused with `exc` would answer."""
    answer = error_response(exc, request)
    return ErrorBody.model_validate(json.loads(str(answer.body))["error"])


@router.answers("DELETE", "/<channel_id>", 204, "deleted", 404)
def delete_channel(channel_id: ChannelId) -> Response[None]:
    """Delete a channel with its versions, cursor and occurrences"""
    serving().ledger.channels.delete_channel(channel_id)
    return Response(status_code=204, content_type=None, body=None)


def _view(channel: Channel, warnings: list[str] | None = None) -> One[ChannelView]:
    states = cursors_of(serving().ledger, [channel.channel_id])
    view = channel_view(channel, states.get(channel.channel_id))
    view.warnings = warnings or []
    return One(data=view)
