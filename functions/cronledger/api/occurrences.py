"""The ledger's rows: list, read, retry, cancel (docs/guarantees.md#ledger).

Retry and cancel are each one conditional write whose answer is the row as written, so a
refusal (404 / 409) comes from the write itself. `since`/`until` bound `scheduled_for`,
inclusive; a filter naming no such status or trigger is a 400, not an empty page.
"""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler.openapi.params import Body, Path, Query

from cronledger.api.errors import Router
from cronledger.api.models import (
    PREFIX,
    After,
    CancelReason,
    ExactTotal,
    Instant,
    Limit,
    OccurrenceRecord,
    OccurrenceSummary,
    Offset,
    One,
    Page,
    Text,
    known,
)
from cronledger.api.services import serving
from cronledger.api.views import occurrence_record, occurrence_summary
from cronledger.ledger import OCCURRENCE_STATUSES, TRIGGERS, OccurrenceFilter

OccurrenceId = Annotated[Text, Path(description="the occurrence's id")]


router = Router("occurrences", f"{PREFIX}/cron/occurrences")


@router.answers("GET", "", 200, "a page of summaries", 400)
def list_occurrences(
    channel_id: Annotated[Text | None, Query()] = None,
    status: Annotated[
        Text | None, Query(description=f"one of {', '.join(OCCURRENCE_STATUSES)}")
    ] = None,
    trigger: Annotated[Text | None, Query(description=f"one of {', '.join(TRIGGERS)}")] = None,
    since: Annotated[Instant | None, Query(description="scheduled_for at or after")] = None,
    until: Annotated[Instant | None, Query(description="scheduled_for at or before")] = None,
    limit: Limit = 50,
    offset: Offset = 0,
    after: After = None,
    exact_total: ExactTotal = False,
) -> Page[OccurrenceSummary]:
    """List occurrences, newest scheduled_for first, a page at a time (pass `next` as `after`)"""
    known("status", status, OCCURRENCE_STATUSES)
    known("trigger", trigger, TRIGGERS)
    page = serving().ledger.occurrences.list_occurrences(
        OccurrenceFilter(
            channel_id=channel_id,
            status=status,
            trigger=trigger,
            since=since,
            until=until,
            limit=limit,
            offset=offset,
            after=after,
            exact_total=exact_total,
        )
    )
    return Page.of(page, occurrence_summary)


@router.answers("GET", "/<occurrence_id>", 200, "the occurrence", 404)
def get_occurrence(occurrence_id: OccurrenceId) -> One[OccurrenceRecord]:
    """Read one occurrence in full: lease, fencing token, trace id, result excerpt"""
    ledger = serving().ledger
    occurrence = ledger.occurrences.get_occurrence(occurrence_id)
    return One(data=occurrence_record(occurrence, ledger.occurrences.attempts_of(occurrence_id)))


@router.answers("POST", "/<occurrence_id>/retry", 200, "the occurrence, pending again", 404, 409)
def retry(occurrence_id: OccurrenceId) -> One[OccurrenceRecord]:
    """Put a failed, cancelled or skipped occurrence back to pending (same id, one more attempt
    allowed); 409 for any other status or a channel that is not active"""
    return One(data=occurrence_record(serving().ledger.occurrences.requeue(occurrence_id)))


@router.answers("POST", "/<occurrence_id>/cancel", 200, "the occurrence, cancelled", 404, 409)
def cancel(
    occurrence_id: OccurrenceId, body: Annotated[CancelReason | None, Body()] = None
) -> One[OccurrenceRecord]:
    """Cancel a pending, claimed or running occurrence; an optional `{"reason": "…"}` is
    recorded with it, beside the IAM caller when there is one"""
    reason = None if body is None else body.reason
    cancelled = serving().ledger.occurrences.cancel(occurrence_id, by=_caller(), reason=reason)
    return One(data=occurrence_record(cancelled))


def _caller() -> str | None:
    """Who asks, as API Gateway's IAM authorizer names them (their ARN); None where no
    authorizer stands in front (the local server), rather than a guess."""
    context = router.current_event.raw_event.get("requestContext") or {}
    iam = (context.get("authorizer") or {}).get("iam") or {}
    caller = iam.get("userArn") or iam.get("callerId")
    return str(caller) if caller else None
