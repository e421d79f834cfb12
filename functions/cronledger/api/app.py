"""The resolver: every route of docs/guarantees.md#api on one `APIGatewayHttpResolver`, validated both ways.

Before any route is chosen, a request passes the body rules every route shares (JSON objects
only, of bounded size and depth, valid Unicode, `HEAD` as `GET`: `request_rules.screen`). Requests are then checked
against the pydantic models before a route runs (a malformed one is a 422 in the error
envelope) and every response is checked against the same models, so `/openapi.json` describes
exactly what is served; a response that does not match is a bug and answers 500. A known path
asked with a method it does not answer is a 405 naming the ones it does. The Swagger UI's route
is added by its first request: Powertools' `enable_swagger` builds its OpenAPI document's
pydantic models as it is called, which no other route needs (as much work as an eighth of the
API's import, on a Lambda container's first request). The resolver holds no state of its own
besides the ledger it was given, so one instance serves a Lambda container or the local
runner's threads alike (through `handle_event`, which answers one request at a time).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from dataclasses import replace
from functools import cache
from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response, content_types
from aws_lambda_powertools.utilities.typing import LambdaContext

from cronledger import __version__, console
from cronledger.api import channel_runs, channels, events, occurrences, status
from cronledger.api.errors import as_v2, error_response, install_error_mapping
from cronledger.api.request_rules import (
    BodyTooLarge,
    MalformedBody,
    RouteMethods,
    UnsupportedMediaType,
    screen,
)
from cronledger.api.services import Services, serve
from cronledger.errors import ValidationFailed
from cronledger.ledger import Ledger
from cronledger.settings import Settings
from cronledger.targets import TargetPolicy
from cronledger.targets.clients import default_clients
from cronledger.targets.secrets import hosts_where_readable

TITLE = "cronledger"
DESCRIPTION = (
    "Operate a cronledger scheduler: channels (schedules), the occurrence ledger, manual and "
    "backfill runs, and health. Errors are "
    '`{"error": {"code", "message", "details": [{"path", "code", "message"}]}}`.'
)
SWAGGER = "/swagger"
#: Routes kept out of the OpenAPI document, for the method table.
_UNDOCUMENTED = {
    "/openapi.json": "GET",
    SWAGGER: "GET",
    console.PAGE: "GET",
    f"{console.PAGE}/{{name}}": "GET",
}
_one_request_at_a_time = threading.Lock()


class ScreenedResolver(APIGatewayHttpResolver):
    """Powertools' resolver with the request rules of `request_rules.screen` in front of it,
    the Swagger UI enabled by its first request (see the module header), and its `services`
    made what the routers' functions serve from (`services.serve`) for each request."""

    swagger_enabled = False

    def __init__(self, services: Services) -> None:
        super().__init__(enable_validation=True)
        self.services = services

    def resolve(self, event: Mapping[str, Any], context: LambdaContext | None) -> dict[str, Any]:
        http = event.get("requestContext", {}).get("http", {})
        try:
            request = screen(event)
        except (UnsupportedMediaType, BodyTooLarge, MalformedBody, ValidationFailed) as exc:
            return as_v2(error_response(exc, f"{http.get('method')} {event.get('rawPath')}"))
        if event.get("rawPath") == SWAGGER and not self.swagger_enabled:
            self.enable_swagger(
                path=SWAGGER, title=TITLE, version=__version__, description=DESCRIPTION
            )
            self.swagger_enabled = True
        serve(self.services)
        answer = super().resolve(request.event, context)  # type: ignore[arg-type]
        if request.head:
            answer["body"] = ""
        return answer


def create_app(ledger: Ledger, settings: Settings | None = None) -> APIGatewayHttpResolver:
    """The API over `ledger`. `settings` supplies the default `timeout_ms` of new versions and
    what targets may name (`TargetPolicy`)."""
    settings = settings or Settings()
    policy = TargetPolicy.from_settings(settings)
    if policy.secrets == "aws":
        # A secret bound to hosts is refused for another when a channel is saved, where this
        # process may read its tags; the executor checks again in any case.
        policy = replace(policy, secret_hosts=hosts_where_readable(default_clients()))
    app = ScreenedResolver(Services(ledger, settings, policy))
    install_error_mapping(app, lambda: routes())
    for module in (channels, channel_runs, events, occurrences, status, console):
        app.include_router(module.router)

    @cache
    def document() -> str:
        return app.get_openapi_json_schema(
            title=TITLE, version=__version__, description=DESCRIPTION
        )

    @app.get("/openapi.json", include_in_schema=False)
    def openapi() -> Response[str]:
        return Response(200, content_types.APPLICATION_JSON, document())

    @cache
    def routes() -> RouteMethods:
        return RouteMethods(json.loads(document()), _UNDOCUMENTED)

    return app


def handle_event(
    app: APIGatewayHttpResolver, event: Mapping[str, Any], context: LambdaContext | None = None
) -> dict[str, Any]:
    """Answer one API Gateway HTTP API (payload v2) event with its v2 response dict
    (`statusCode`, `headers`, `body`, `isBase64Encoded`, `cookies`).

    Safe to call from many threads: Powertools keeps the request being resolved in
    class-level state shared by every resolver, so requests are answered one at a time
    (a Lambda container only ever has one anyway)."""
    with _one_request_at_a_time:
        return app.resolve(event, context)  # type: ignore[arg-type]
