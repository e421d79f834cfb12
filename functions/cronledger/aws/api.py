"""`api`: API Gateway HTTP API (payload v2) events, already IAM-authorised by the gateway,
answered by the operator API's resolver. The resolver is built once per container over the
container's ledger. Each request leaves one line (method, path, status), its correlation id
the gateway's request id.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver
from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.utilities.typing import LambdaContext

from cronledger.api import create_app, handle_event
from cronledger.aws import runtime
from cronledger.aws.runtime import logger, tracer


@runtime.per_container
def app() -> APIGatewayHttpResolver:
    return create_app(runtime.ledger(), runtime.settings())


@logger.inject_lambda_context(
    correlation_id_path=correlation_paths.API_GATEWAY_HTTP, clear_state=True
)
@tracer.capture_lambda_handler
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    answer = handle_event(app(), event, context)
    http = event.get("requestContext", {}).get("http", {})
    logger.info(
        "request answered",
        extra={
            "method": http.get("method"),
            "path": event.get("rawPath"),
            "status": answer.get("statusCode"),
        },
    )
    return answer
