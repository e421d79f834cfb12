"""What Lambda hands a handler, built the way Lambda builds it, and what a handler leaves
behind, read back the way CloudWatch reads it: a context whose time runs out, the events of
EventBridge and of an HTTP API, EMF documents on stdout, and JSON log lines."""

from __future__ import annotations

import io
import json
import logging
import time
import uuid
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from cronledger.aws import runtime
from cronledger.ledger import Ledger

ACCOUNT = "123456789012"
REGION = "us-east-1"


class FakeContext:
    """A Lambda context with a real countdown: `get_remaining_time_in_millis` falls as the
    handler runs, as Lambda's does."""

    def __init__(self, function_name: str, remaining_ms: int) -> None:
        self.function_name = function_name
        self.function_version = "$LATEST"
        self.memory_limit_in_mb = 512
        self.invoked_function_arn = f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{function_name}"
        self.aws_request_id = str(uuid.uuid4())
        self.log_group_name = f"/aws/lambda/{function_name}"
        self.log_stream_name = "2026/01/01/[$LATEST]0123456789abcdef"
        self._ends_at = time.monotonic() + remaining_ms / 1000

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._ends_at - time.monotonic()) * 1000))


def scheduled_event(rule: str) -> dict[str, Any]:
    """What an EventBridge schedule rule delivers to its target."""
    return {
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": ACCOUNT,
        "time": "2026-01-01T00:00:00Z",
        "region": REGION,
        "resources": [f"arn:aws:events:{REGION}:{ACCOUNT}:rule/{rule}"],
        "detail": {},
    }


def http_api_event(method: str, path: str, body: Any = None) -> dict[str, Any]:
    """An HTTP API (payload v2) request as API Gateway delivers it after AWS_IAM
    authorisation: the caller's identity is in `requestContext.authorizer.iam`."""
    return {
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": path,
        "rawQueryString": "",
        "headers": {
            "host": "abc123.execute-api.us-east-1.amazonaws.com",
            "content-type": "application/json",
            "x-amz-date": "20260101T000000Z",
        },
        "requestContext": {
            "accountId": ACCOUNT,
            "apiId": "abc123",
            "authorizer": {
                "iam": {
                    "accessKey": "AKIAEXAMPLE",
                    "accountId": ACCOUNT,
                    "callerId": "AIDAEXAMPLE",
                    "principalOrgId": None,
                    "userArn": f"arn:aws:iam::{ACCOUNT}:user/operator",
                    "userId": "AIDAEXAMPLE",
                }
            },
            "domainName": "abc123.execute-api.us-east-1.amazonaws.com",
            "domainPrefix": "abc123",
            "http": {
                "method": method,
                "path": path,
                "protocol": "HTTP/1.1",
                "sourceIp": "192.0.2.10",
                "userAgent": "cronledger-cli",
            },
            "requestId": "JKJaXmPLvHcESHA=",
            "routeKey": "$default",
            "stage": "$default",
            "time": "01/Jan/2026:00:00:00 +0000",
            "timeEpoch": 1767225600000,
        },
        "body": None if body is None else json.dumps(body),
        "isBase64Encoded": False,
    }


def emf_documents(stdout: str) -> list[dict[str, Any]]:
    """Every EMF document printed, as CloudWatch Logs would find them."""
    documents = []
    for line in stdout.splitlines():
        if line.startswith("{"):
            document = json.loads(line)
            if "_aws" in document:
                documents.append(document)
    return documents


def metric_values(
    documents: list[dict[str, Any]], name: str, dimensions: dict[str, str]
) -> list[float]:
    """The values of `name` in documents whose one dimension set is exactly `dimensions`."""
    values: list[float] = []
    for document in documents:
        for directive in document["_aws"]["CloudWatchMetrics"]:
            names = [m["Name"] for m in directive["Metrics"]]
            dimension_sets = [sorted(keys) for keys in directive["Dimensions"]]
            if name not in names or dimension_sets != [sorted(dimensions)]:
                continue
            if {key: document[key] for key in dimensions} == dimensions:
                value = document[name]
                values.extend(value if isinstance(value, list) else [value])
    return values


@contextmanager
def log_lines() -> Iterator[list[dict[str, Any]]]:
    """The JSON lines the functions' logger writes during the block, with the keys its
    formatter holds (the list is filled when the block ends)."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(runtime.logger.registered_formatter)
    package = logging.getLogger(runtime.logger.name)
    package.addHandler(handler)
    lines: list[dict[str, Any]] = []
    try:
        yield lines
    finally:
        package.removeHandler(handler)
        lines.extend(json.loads(line) for line in stream.getvalue().splitlines() if line)


def moto_function(name: str) -> str:
    """A function named `name` in moto's Lambda (that does nothing), for a handler to invoke."""
    import boto3

    role = boto3.client("iam").create_role(RoleName=name, AssumeRolePolicyDocument="{}")
    code = io.BytesIO()
    with zipfile.ZipFile(code, "w") as archive:
        archive.writestr("handler.py", "def handle(event, context):\n    return None\n")
    boto3.client("lambda").create_function(
        FunctionName=name,
        Runtime="python3.13",
        Role=role["Role"]["Arn"],
        Handler="handler.handle",
        Code={"ZipFile": code.getvalue()},
    )
    return name


def forget_container() -> None:
    """Drop everything the container built so far, closing the ledger's connections, as a
    new container."""
    with runtime._building:
        built = list(runtime._built.values())
        runtime._built.clear()
    for thing in built:
        if isinstance(thing, Ledger):
            thing.dispose()
