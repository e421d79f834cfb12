"""The events listing: every event the ledger recorded, delivered or not, newest first.

Pages are read by key, never by offset: `next` names the last event of a page and the
following page starts strictly after it, so an operator paging back while the scheduler
writes new events sees each event once. A `kind` that names no kind is a 400 (a typo would
otherwise read as "nothing happened"); it may be written short (`failed`) or in full
(`occurrence.failed`), as `alerts.on` is.
"""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler.openapi.params import Query
from aws_lambda_powertools.event_handler.router import APIGatewayHttpRouter

from cronledger.alerts import KINDS
from cronledger.api.errors import BROKEN_RESPONSE, responses
from cronledger.api.models import PREFIX, EventView, Instant, KeysetPage, Limit, Text
from cronledger.api.services import serving
from cronledger.api.views import event_view
from cronledger.errors import FieldError, ValidationFailed
from cronledger.ledger import EventFilter

_KNOWN = ", ".join(KINDS)


router = APIGatewayHttpRouter()  # type: ignore[no-untyped-call]


@router.get(
    f"{PREFIX}/cron/events",
    summary="List events, newest first, a page at a time by key (pass `next` as `after`)",
    tags=["events"],
    responses=responses(200, "a page of events"),
    custom_response_validation_http_code=BROKEN_RESPONSE,
)
def list_events(
    channel_id: Annotated[Text | None, Query()] = None,
    kind: Annotated[Text | None, Query(description=f"short or full name: one of {_KNOWN}")] = None,
    since: Annotated[Instant | None, Query(description="at or after")] = None,
    after: Annotated[Text | None, Query(description="the `next` of the previous page")] = None,
    limit: Limit = 50,
) -> KeysetPage[EventView]:
    page = serving().ledger.events.list_events(
        EventFilter(
            channel_id=channel_id,
            kind=_kind(kind),
            since=since,
            after=after,
            limit=limit,
        )
    )
    return KeysetPage(data=[event_view(e) for e in page.data], limit=page.limit, next=page.next)


def _kind(value: str | None) -> str | None:
    """The full name of `value`, written short or in full."""
    if value is None or value in KINDS.values():
        return value
    if value in KINDS:
        return KINDS[value]
    raise ValidationFailed(
        [FieldError("kind", "invalid", f"unknown kind {value!r}; one of {_KNOWN}")],
        "invalid filter",
    )
