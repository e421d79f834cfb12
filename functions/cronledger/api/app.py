"""The resolver: every route on one `APIGatewayHttpResolver`, validated both ways.

A request passes the body rules (`request_rules.screen`), then the models (malformed: 422);
every response is checked against the same models, so `/openapi.json` describes what is
served (a mismatch is a bug: 500). The Swagger UI is built on its first request.
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
from cronledger.api.request_rules import RouteMethods, is_head, screen
from cronledger.api.services import Services, serve
from cronledger.ledger import Ledger
from cronledger.settings import Settings
from cronledger.targets.clients import default_clients
from cronledger.targets.policy import TargetPolicy
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
    """Powertools' resolver behind `request_rules.screen`, serving its routers from its own
    `services`, with the Swagger UI built by its first request."""

    swagger_enabled = False

    def __init__(self, services: Services) -> None:
        super().__init__(enable_validation=True)
        self.configure_openapi(title=TITLE, version=__version__, description=DESCRIPTION)
        self.services = services

    def resolve(self, event: Mapping[str, Any], context: LambdaContext | None) -> dict[str, Any]:
        http = event.get("requestContext", {}).get("http", {})
        try:
            screened = screen(event)
        except Exception as exc:  # a refusal, answered as any route's error is
            return as_v2(error_response(exc, f"{http.get('method')} {event.get('rawPath')}"))
        if event.get("rawPath") == SWAGGER and not self.swagger_enabled:
            self.enable_swagger(path=SWAGGER)
            self.swagger_enabled = True
        serve(self.services)
        answer = super().resolve(screened, context)  # type: ignore[arg-type]
        if is_head(http):
            answer["body"] = ""
        return answer


def create_app(ledger: Ledger, settings: Settings | None = None) -> APIGatewayHttpResolver:
    """The API over `ledger`; `settings` give new versions' default `timeout_ms` and what
    targets may name."""
    settings = settings or Settings()
    policy = TargetPolicy.from_settings(settings)
    if policy.secrets == "aws":
        # A secret bound to hosts is refused for another on save; the executor checks again.
        policy = replace(policy, secret_hosts=hosts_where_readable(default_clients()))
    app = ScreenedResolver(Services(ledger, settings, policy))
    install_error_mapping(app, lambda: routes())
    for module in (channels, channel_runs, events, occurrences, status, console):
        app.include_router(module.router)

    @cache
    def document() -> str:
        return app.get_openapi_json_schema()

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
    """One API Gateway HTTP API (payload v2) event's v2 response. Safe from many threads:
    Powertools keeps the request in class-level state, so requests go one at a time."""
    with _one_request_at_a_time:
        return app.resolve(event, context)  # type: ignore[arg-type]
