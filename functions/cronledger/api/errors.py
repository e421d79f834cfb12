"""The one place an exception becomes an HTTP answer (docs/guarantees.md#api).

Every error leaves as `{"error": {"code", "message", "details": [{"path", "code", "message"}]}}`:
`ValidationFailed` 400 `validation_failed`; `NotFound` or no route 404 `not_found`; a known path
with another method 405 `method_not_allowed` (with `Allow`); `Conflict` 409 `conflict`; a body
too large 413 `too_large`, not JSON 415 `unsupported_media_type`, malformed (Powertools'
request validation, not an object, not UTF-8, too deep, a number too long) 422
`malformed_request`; `DatabaseUnavailable` 503 `database_unavailable`; anything else, a bug
logged with its traceback and never echoed, 500 `internal`. No client sees Powertools' shape.
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
    """Every exception a route raises, and every unmatched route, through `error_response`;
    `routes()` tells a wrong method from a path that does not exist."""

    def answer(exc: Exception) -> Response[Any]:
        event = app.current_event
        request = f"{event.http_method} {event.path}"
        allowed = routes().allowed(event.path) if isinstance(exc, NotFoundError) else frozenset()
        if allowed:
            listed = ", ".join(sorted(allowed))
            message = f"{event.path} answers {listed}, not {event.http_method}"
            return _answer(
                HTTPStatus.METHOD_NOT_ALLOWED, "method_not_allowed", message, (), {"Allow": listed}
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
        return _malformed(str(exc), [FieldError(exc.path, exc.code, str(exc))])
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
        return _malformed("; ".join(f"{d.path}: {d.message}" for d in details), details)
    if isinstance(exc, RecursionError):
        return _malformed(TOO_DEEP)
    if isinstance(exc, UnicodeDecodeError):
        return _malformed("the body is not UTF-8 text")
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
    """An answer made outside the resolver, as the v2 response the resolver's own are."""
    return {
        "statusCode": response.status_code,
        "headers": dict(response.headers),
        "body": response.body,
        "isBase64Encoded": False,
        "cookies": [],
    }


def _malformed(message: str, details: Iterable[FieldError] = ()) -> Response[Any]:
    return _answer(MALFORMED, "malformed_request", f"malformed request: {message}", details)


def _answer(
    status: HTTPStatus,
    code: str,
    message: str,
    details: Iterable[FieldError] = (),
    headers: Mapping[str, str] | None = None,
) -> Response[Any]:
    error = {"code": code, "message": message, "details": [d.as_dict() for d in details]}
    # ASCII-only JSON: nothing a caller sent can make the answer unencodable.
    return Response(
        status.value, content_types.APPLICATION_JSON, json.dumps({"error": error}), headers
    )
