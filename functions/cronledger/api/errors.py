"""The one place an exception becomes an HTTP answer (docs/guarantees.md#api).

Every error leaves as `{"error": {"code", "message", "details": [{"path", "code", "message"}]}}`:

| raised | status | code |
|---|---|---|
| `ValidationFailed` (every field problem) | 400 | `validation_failed` |
| `ValidationFailed` raised by `request_rules.screen`: text that is not valid Unicode | 400 | `validation_failed` |
| `NotFound`, or no such route | 404 | `not_found` |
| a known path with a method it does not answer | 405 (with `Allow`) | `method_not_allowed` |
| `Conflict` | 409 | `conflict` |
| a body over `request_rules.MAX_BODY_BYTES` | 413 | `too_large` |
| a body sent as anything but JSON | 415 | `unsupported_media_type` |
| a malformed query or body (Powertools' request validation), a body that is not a JSON object, not UTF-8, nested deeper than `request_rules.MAX_DEPTH` (the detail's path says where) or holding a number too long to read | 422 | `malformed_request` |
| `DatabaseUnavailable` | 503 | `database_unavailable` |
| anything else: a bug, logged at ERROR with its traceback, never echoed | 500 | `internal` |

Bad input is always one of the 4xx rows: what the resolver's request validation refuses is
reshaped here, so no client ever sees Powertools' own error shape. A refusal that comes
before routing (`request_rules.screen`) is answered here too, as a finished v2 response
(`as_v2`), and so is the local server's 403 (`forbidden`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping
from http import HTTPStatus
from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response, content_types
from aws_lambda_powertools.event_handler.exceptions import NotFoundError
from aws_lambda_powertools.event_handler.openapi.exceptions import (
    RequestUnsupportedContentType,
    RequestValidationError,
    ResponseValidationError,
)
from aws_lambda_powertools.event_handler.openapi.types import OpenAPIResponse

from cronledger.api.models import ErrorEnvelope
from cronledger.api.request_rules import (
    TOO_DEEP,
    BodyTooLarge,
    MalformedBody,
    RouteMethods,
    UnsupportedMediaType,
)
from cronledger.errors import Conflict, FieldError, NotFound, ValidationFailed
from cronledger.ledger import DatabaseUnavailable
from cronledger.validation import field_error

log = logging.getLogger(__name__)

MALFORMED = HTTPStatus.UNPROCESSABLE_ENTITY


def documented(tag: str, status: int, description: str, *errors: int) -> dict[str, Any]:
    """A route's keyword arguments: its tag, its success `status` (schema from the return
    annotation; none for 204), the given error statuses and those any route can answer (400,
    413, 415, 422, 500, 503), each the error envelope; a response that breaks the document is
    a 500 in that envelope too, not Powertools' own shape."""
    responses: dict[int, OpenAPIResponse] = {status: {"description": description}}
    if status == HTTPStatus.NO_CONTENT:
        responses[status]["content"] = {}
    for error in sorted({*errors, 400, 413, 415, 422, 500, 503}):
        responses[error] = {
            "description": HTTPStatus(error).phrase,
            "content": {"application/json": {"model": ErrorEnvelope}},
        }
    return {
        "tags": [tag],
        "responses": responses,
        "status_code": status,
        "custom_response_validation_http_code": HTTPStatus.INTERNAL_SERVER_ERROR,
    }


def install_error_mapping(app: APIGatewayHttpResolver, routes: Callable[[], RouteMethods]) -> None:
    """Send every exception a route raises, and every unmatched route, through
    `error_response`. `routes()` tells a wrong method from a path that does not exist."""

    def answer(exc: Exception) -> Response[Any]:
        event = app.current_event
        request = f"{event.http_method} {event.path}"
        allowed = routes().allowed(event.path) if isinstance(exc, NotFoundError) else frozenset()
        if allowed:
            return _answer(
                HTTPStatus.METHOD_NOT_ALLOWED,
                "method_not_allowed",
                f"{event.path} answers {', '.join(sorted(allowed))}, not {event.http_method}",
                headers={"Allow": ", ".join(sorted(allowed))},
            )
        return error_response(exc, request)

    app.exception_handler_manager.update_exception_handlers({Exception: answer})


def error_response(exc: Exception, request: str) -> Response[Any]:
    """The table above, for `exc` raised while answering `request` (e.g. `GET /health`)."""
    if isinstance(exc, ValidationFailed):
        return _answer(HTTPStatus.BAD_REQUEST, "validation_failed", str(exc), exc.errors)
    if isinstance(exc, NotFound):
        return _answer(HTTPStatus.NOT_FOUND, "not_found", str(exc))
    if isinstance(exc, NotFoundError):
        return _answer(
            HTTPStatus.NOT_FOUND, "not_found", f"no route for {request}; see /openapi.json"
        )
    if isinstance(exc, MalformedBody):
        detail = FieldError(exc.path, exc.code, str(exc))
        return _answer(MALFORMED, "malformed_request", f"malformed request: {exc}", [detail])
    if isinstance(exc, BodyTooLarge):
        detail = FieldError("body", "too_long", str(exc))
        return _answer(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "too_large", str(exc), [detail])
    if isinstance(exc, Conflict):
        return _answer(HTTPStatus.CONFLICT, "conflict", str(exc))
    if isinstance(exc, RequestUnsupportedContentType | UnsupportedMediaType):
        return _answer(
            HTTPStatus.UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "send the body as JSON with Content-Type: application/json",
        )
    if isinstance(exc, RequestValidationError):
        details = [field_error(error) for error in exc.errors()]
        summary = "; ".join(f"{d.path}: {d.message}" for d in details)
        return _answer(MALFORMED, "malformed_request", f"malformed request: {summary}", details)
    if isinstance(exc, RecursionError):
        return _answer(MALFORMED, "malformed_request", f"malformed request: {TOO_DEEP}")
    if isinstance(exc, UnicodeDecodeError):
        return _answer(
            MALFORMED, "malformed_request", "malformed request: the body is not UTF-8 text"
        )
    if isinstance(exc, DatabaseUnavailable):
        # The driver's text can name hosts and users: log it, answer in general terms.
        log.warning("%s: database unavailable: %s", request, exc)
        return _answer(
            HTTPStatus.SERVICE_UNAVAILABLE,
            "database_unavailable",
            "the ledger database is unavailable; try again shortly",
        )
    if isinstance(exc, ResponseValidationError):
        log.error("%s: response does not match the OpenAPI document: %s", request, exc.errors())
    else:
        log.error("%s: unhandled error", request, exc_info=exc)
    return _answer(
        HTTPStatus.INTERNAL_SERVER_ERROR, "internal", "internal error; see the API's logs"
    )


def forbidden(message: str) -> dict[str, Any]:
    """A 403 as a finished v2 response: the local server's answer to a foreign web page."""
    return as_v2(_answer(HTTPStatus.FORBIDDEN, "forbidden", message))


def as_v2(response: Response[Any]) -> dict[str, Any]:
    """An answer made outside the resolver, as the API Gateway v2 response the resolver's own
    answers are."""
    return {
        "statusCode": response.status_code,
        "headers": dict(response.headers),
        "body": response.body,
        "isBase64Encoded": False,
        "cookies": [],
    }


def _answer(
    status: HTTPStatus,
    code: str,
    message: str,
    details: Iterable[FieldError] = (),
    headers: Mapping[str, str] | None = None,
) -> Response[Any]:
    body = {
        "error": {
            "code": code,
            "message": message,
            "details": [d.as_dict() for d in details],
        }
    }
    # ASCII-only JSON: nothing a caller sent can make the answer unencodable.
    return Response(
        status_code=status.value,
        content_type=content_types.APPLICATION_JSON,
        body=json.dumps(body),
        headers=headers,
    )
