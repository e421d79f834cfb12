"""The operators' HTTP API: API Gateway (HTTP API) in front of the `api` function.

Every route is IAM-authorised (SigV4): whoever calls it needs `execute-api:Invoke` on this API,
granted in IAM like any other permission; there is no anonymous route, `/health` included.
The routes are the prefixes the application serves, so a request for anything else is answered
by API Gateway without waking the function. The one stage is throttled and access-logged:
one JSON object per request (`ACCESS_LOG`) naming the route it matched (`routeKey`) and the
caller's IAM identity (`callerArn`, with its account), so "who changed this channel?" is a
Logs Insights query away.
"""

from __future__ import annotations

import json

import jsii
from aws_cdk import (
    aws_apigateway as apigw,
    aws_apigatewayv2 as apigwv2,
    aws_apigatewayv2_authorizers as authorizers,
    aws_apigatewayv2_integrations as integrations,
    aws_lambda as lambda_,
    aws_logs as logs,
)
from constructs import Construct

#: The access log's fields: HTTP API context variables, every value a string, so a variable
#: that is empty for a request still leaves valid JSON.
ACCESS_LOG = {
    "requestId": "$context.requestId",
    "requestTime": "$context.requestTime",
    "routeKey": "$context.routeKey",
    "method": "$context.httpMethod",
    "path": "$context.path",
    "status": "$context.status",
    "callerArn": "$context.identity.userArn",
    "callerAccount": "$context.identity.accountId",
    "sourceIp": "$context.identity.sourceIp",
    "userAgent": "$context.identity.userAgent",
    "responseLength": "$context.responseLength",
    "latencyMs": "$context.responseLatency",
    "integrationLatencyMs": "$context.integrationLatency",
    "integrationError": "$context.integrationErrorMessage",
    "error": "$context.error.message",
}

ROUTES = (
    ("/api/v1/{proxy+}", apigwv2.HttpMethod.ANY),
    ("/health", apigwv2.HttpMethod.GET),
    ("/openapi.json", apigwv2.HttpMethod.GET),
    ("/swagger", apigwv2.HttpMethod.GET),
)


class Api(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        name: str,
        handler: lambda_.IFunction,
        throttle_rate: float,
        throttle_burst: int,
        log_retention: logs.RetentionDays,
    ) -> None:
        super().__init__(scope, construct_id)
        self.http_api = apigwv2.HttpApi(
            self,
            "HttpApi",
            api_name=name,
            description="cronledger operator API (IAM-authorised)",
            default_authorizer=authorizers.HttpIamAuthorizer(),
            create_default_stage=False,
        )
        integration = integrations.HttpLambdaIntegration("Handler", handler)
        for path, method in ROUTES:
            self.http_api.add_routes(path=path, methods=[method], integration=integration)

        self.stage = apigwv2.HttpStage(
            self,
            "DefaultStage",
            http_api=self.http_api,
            stage_name="$default",
            auto_deploy=True,
            throttle=apigwv2.ThrottleSettings(rate_limit=throttle_rate, burst_limit=throttle_burst),
            access_log_settings=_AccessLogs(
                apigwv2.LogGroupLogDestination(
                    logs.LogGroup(self, "AccessLogs", retention=log_retention)
                )
            ),
        )

    @property
    def url(self) -> str:
        return self.http_api.api_endpoint


@jsii.implements(apigwv2.IAccessLogSettings)
class _AccessLogs:
    """Access-log settings: `ACCESS_LOG` as JSON, to a log group."""

    def __init__(self, destination: apigwv2.IAccessLogDestination) -> None:
        self._destination = destination

    @property
    def destination(self) -> apigwv2.IAccessLogDestination:
        return self._destination

    @property
    def format(self) -> apigw.AccessLogFormat | None:
        return apigw.AccessLogFormat.custom(json.dumps(ACCESS_LOG, separators=(",", ":")))
