"""The one place an exception becomes an HTTP answer (docs/guarantees.md#api).

Every error leaves as `{"error": {"code", "message", "details": [{"path", "code", "message"}]}}`,
by the table `_ANSWERS`; a known path with another method is a 405 (with `Allow`); anything
else is a bug, logged with its traceback and never echoed: 500 `internal`. No client sees
Powertools' shape.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping
from http import HTTPStatus
from typing import Any, Final, TypeVar

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response, content_types
from aws_lambda_powertools.event_handler.exceptions import NotFoundError
from aws_lambda_powertools.event_handler.openapi.exceptions import (
    RequestValidationError,
    ResponseValidationError,
)
from aws_lambda_powertools.event_handler.openapi.types import OpenAPIResponse
from aws_lambda_powertools.event_handler.router import APIGatewayHttpRouter

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
_Route = TypeVar("_Route", bound=Callable[..., Any])


class Router(APIGatewayHttpRouter):
    """The routes of one `tag`, at paths under `prefix`, registered and documented alike by
    `answers`."""

    def __init__(self, tag: str, prefix: str) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.tag, self.prefix = tag, prefix

    def answers(
        self, method: str, path: str, status: int, description: str, *errors: int, summary: str = ""
    ) -> Callable[[_Route], _Route]:
        """A route summed up by `summary` or else its docstring's first paragraph, answering
        `status` (schema from the return annotation) and, in the error envelope, the given
        `errors` and those any route can answer; a response that breaks the document is a 500
        in that envelope too."""
        responses: dict[int, OpenAPIResponse] = {status: {"description": description}}
        if status == HTTPStatus.NO_CONTENT:
            responses[status]["content"] = {}
        for error in sorted({*errors, 400, 413, 415, 422, 500, 503}):
            responses[error] = {
                "description": HTTPStatus(error).phrase,
                "content": {"application/json": {"model": ErrorEnvelope}},
            }

        def register(route: _Route) -> _Route:
            said = summary or (route.__doc__ or "").split("\n\n")[0]
            if not said.strip():
                raise TypeError(f"route {route.__name__} needs a docstring: it is its summary")
            return self.route(
                self.prefix + path,
                method,
                summary=" ".join(said.split()),
                tags=[self.tag],
                responses=responses,
                status_code=status,
                custom_response_validation_http_code=HTTPStatus.INTERNAL_SERVER_ERROR,
            )(route)

        return register


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


#: What each exception answers (the first that matches): status, code, and the message when it
#: is not the exception's own text (`{request}`: the request answered); a 422's message starts
#: "malformed request: ".
_ANSWERS: Final[dict[type[Exception], tuple[HTTPStatus, str, str | None]]] = {
    ValidationFailed: (HTTPStatus.BAD_REQUEST, "validation_failed", None),
    NotFound: (HTTPStatus.NOT_FOUND, "not_found", None),
    NotFoundError: (HTTPStatus.NOT_FOUND, "not_found", "no route for {request}; see /openapi.json"),
    MalformedBody: (MALFORMED, "malformed_request", None),
    BodyTooLarge: (HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "too_large", None),
    Conflict: (HTTPStatus.CONFLICT, "conflict", None),
    UnsupportedMediaType: (
        HTTPStatus.UNSUPPORTED_MEDIA_TYPE,
        "unsupported_media_type",
        "send the body as JSON with Content-Type: application/json",
    ),
    RecursionError: (MALFORMED, "malformed_request", TOO_DEEP),
    UnicodeDecodeError: (MALFORMED, "malformed_request", "the body is not UTF-8 text"),
    # The driver's text can name hosts and users: logged, answered in general terms.
    DatabaseUnavailable: (
        HTTPStatus.SERVICE_UNAVAILABLE,
        "database_unavailable",
        "the ledger database is unavailable; try again shortly",
    ),
}
#: The exceptions whose `errors` are the answer's details.
_DETAILED: Final = (ValidationFailed, MalformedBody, BodyTooLarge)


def error_response(exc: Exception, request: str) -> Response[Any]:
    """The answer to `exc`, raised while answering `request` (e.g. `GET /health`)."""
    if isinstance(exc, RequestValidationError):
        details = [field_error(error) for error in exc.errors()]
        message = "; ".join(f"{d.path}: {d.message}" for d in details)
        return _answer(MALFORMED, "malformed_request", f"malformed request: {message}", details)
    kind = next((kind for kind in _ANSWERS if isinstance(exc, kind)), None)
    if kind is None:
        if isinstance(exc, ResponseValidationError):
            log.error("%s: response does not match the OpenAPI document: %s", request, exc.errors())
        else:
            log.error("%s: unhandled error", request, exc_info=exc)
        return _answer(
            HTTPStatus.INTERNAL_SERVER_ERROR, "internal", "internal error; see the API's logs"
        )
    if kind is DatabaseUnavailable:
        log.warning("%s: database unavailable: %s", request, exc)
    status, code, template = _ANSWERS[kind]
    text = str(exc) if template is None else template.format(request=request)
    if status == MALFORMED:
        text = f"malformed request: {text}"
    return _answer(status, code, text, exc.errors if isinstance(exc, _DETAILED) else ())


def as_v2(response: Response[Any]) -> dict[str, Any]:
    """An answer made outside the resolver, as the v2 response the resolver's own are."""
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
    error = {"code": code, "message": message, "details": [d.as_dict() for d in details]}
    # ASCII-only JSON: nothing a caller sent can make the answer unencodable.
    return Response(
        status.value, content_types.APPLICATION_JSON, json.dumps({"error": error}), headers
    )
