"""The ledger's rows: list, read, retry, cancel (docs/guarantees.md#api, docs/guarantees.md#ledger).

Retry and cancel are each one conditional write in the ledger; its answer is the row as
written, and a refusal (404 / 409) comes from the same write, never from an earlier read.
`since` and `until` bound `scheduled_for`, both inclusive; a timestamp that is not RFC 3339
with an offset is a 422. A `status` or `trigger` filter that names no such thing is a 400
(a typo would otherwise read as "nothing happened").
"""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver
from aws_lambda_powertools.event_handler.openapi.params import Body, Path, Query

from cronledger.api.errors import BROKEN_RESPONSE, responses
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
)
from cronledger.api.views import occurrence_record, occurrence_summary
from cronledger.errors import FieldError, ValidationFailed
from cronledger.ledger import OCCURRENCE_STATUSES, TRIGGERS, Ledger, OccurrenceFilter

OccurrenceId = Annotated[Text, Path(description="the occurrence's id")]


def add_occurrence_routes(app: APIGatewayHttpResolver, ledger: Ledger) -> None:

    @app.get(
        f"{PREFIX}/cron/occurrences",
        summary="List occurrences, newest scheduled_for first, a page at a time (pass `next` "
        "as `after`)",
        tags=["occurrences"],
        responses=responses(200, "a page of summaries", 400),
        custom_response_validation_http_code=BROKEN_RESPONSE,
    )
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
        _known("status", status, OCCURRENCE_STATUSES)
        _known("trigger", trigger, TRIGGERS)
        page = ledger.occurrences.list_occurrences(
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

    @app.get(
        f"{PREFIX}/cron/occurrences/<occurrence_id>",
        summary="Read one occurrence in full: lease, fencing token, trace id, result excerpt",
        tags=["occurrences"],
        responses=responses(200, "the occurrence", 404),
        custom_response_validation_http_code=BROKEN_RESPONSE,
    )
    def get_occurrence(occurrence_id: OccurrenceId) -> One[OccurrenceRecord]:
        occurrence = ledger.occurrences.get_occurrence(occurrence_id)
        return One(
            data=occurrence_record(occurrence, ledger.occurrences.attempts_of(occurrence_id))
        )

    @app.post(
        f"{PREFIX}/cron/occurrences/<occurrence_id>/retry",
        summary="Put a failed, cancelled or skipped occurrence back to pending (same id, one "
        "more attempt allowed); 409 for any other status or a channel that is not active",
        tags=["occurrences"],
        responses=responses(200, "the occurrence, pending again", 404, 409),
        custom_response_validation_http_code=BROKEN_RESPONSE,
    )
    def retry(occurrence_id: OccurrenceId) -> One[OccurrenceRecord]:
        return One(data=occurrence_record(ledger.occurrences.requeue(occurrence_id)))

    @app.post(
        f"{PREFIX}/cron/occurrences/<occurrence_id>/cancel",
        summary="Cancel a pending, claimed or running occurrence; an optional "
        '`{"reason": "…"}` is recorded with it, beside the IAM caller when there is one',
        tags=["occurrences"],
        responses=responses(200, "the occurrence, cancelled", 404, 409),
        custom_response_validation_http_code=BROKEN_RESPONSE,
    )
    def cancel(
        occurrence_id: OccurrenceId, body: Annotated[CancelReason | None, Body()] = None
    ) -> One[OccurrenceRecord]:
        reason = None if body is None else body.reason
        cancelled = ledger.occurrences.cancel(occurrence_id, by=_caller(app), reason=reason)
        return One(data=occurrence_record(cancelled))


def _caller(app: APIGatewayHttpResolver) -> str | None:
    """Who asks, as API Gateway's IAM authorizer names them (their ARN); None where no
    authorizer stands in front (the local server), rather than a guess."""
    context = app.current_event.raw_event.get("requestContext") or {}
    iam = (context.get("authorizer") or {}).get("iam") or {}
    caller = iam.get("userArn") or iam.get("callerId")
    return str(caller) if caller else None


def _known(name: str, value: str | None, known: tuple[str, ...]) -> None:
    """A filter that could never match is a mistake worth saying, not an empty page."""
    if value is not None and value not in known:
        raise ValidationFailed(
            [FieldError(name, "invalid", f"unknown {name} {value!r}; one of {', '.join(known)}")],
            "invalid filter",
        )
