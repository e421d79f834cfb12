"""The events listing, newest first, paged by key: `next` names a page's last event and the
following page starts strictly after it, so each event is seen once while new ones arrive.
A `kind` is short (`failed`) or full (`occurrence.failed`); an unknown one is a 400.
"""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler.openapi.params import Query

from cronledger.alerts import KINDS
from cronledger.api.errors import Router
from cronledger.api.models import PREFIX, EventView, Instant, KeysetPage, Limit, Text, known
from cronledger.api.services import serving
from cronledger.api.views import event_view
from cronledger.ledger import EventFilter

_KNOWN = ", ".join(KINDS)


router = Router("events", f"{PREFIX}/cron/events")


@router.answers("GET", "", 200, "a page of events")
def list_events(
    channel_id: Annotated[Text | None, Query()] = None,
    kind: Annotated[Text | None, Query(description=f"short or full name: one of {_KNOWN}")] = None,
    since: Annotated[Instant | None, Query(description="at or after")] = None,
    after: Annotated[Text | None, Query(description="the `next` of the previous page")] = None,
    limit: Limit = 50,
) -> KeysetPage[EventView]:
    """List events, newest first, a page at a time by key (pass `next` as `after`)"""
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
    known("kind", value, tuple(KINDS))
    return KINDS[value]
