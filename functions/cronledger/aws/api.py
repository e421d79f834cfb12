"""`api`: API Gateway HTTP API (payload v2) events, IAM-authorised by the gateway, answered by
the operator API's resolver (one per container). Each request logs one line, correlated by the
gateway's request id; one that made runs due now wakes `claim` (`cronledger.aws.wake`).
"""

from __future__ import annotations

import os
from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver
from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.utilities.typing import LambdaContext

from cronledger.api import create_app, handle_event
from cronledger.aws import runtime
from cronledger.aws.runtime import logger, tracer
from cronledger.aws.wake import CLAIM_FUNCTION_NAME, makes_due_runs, wake_claim


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
    method, path, status = http.get("method"), event.get("rawPath"), answer.get("statusCode")
    logger.info("request answered", extra={"method": method, "path": path, "status": status})
    claim = os.environ.get(CLAIM_FUNCTION_NAME, "").strip()
    if claim and makes_due_runs(method, path, status):
        wake_claim(claim)
    return answer
