"""Reaching the resolver the way API Gateway does: each request becomes an HTTP API (payload
v2) event and the v2 answer becomes the response.

`call` does it in-process; `wsgi_app` does it for a WSGI server, which is how the command line
tests and the schemathesis run reach the API over real HTTP on 127.0.0.1.
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver

from cronledger.api import handle_event


def v2_event(
    method: str,
    path: str,
    raw_query: str = "",
    headers: Mapping[str, str] | None = None,
    body: bytes = b"",
) -> dict[str, Any]:
    params: dict[str, str] = {}
    for key, value in parse_qsl(raw_query, keep_blank_values=True):
        # API Gateway joins repeated parameters with a comma.
        params[key] = f"{params[key]},{value}" if key in params else value
    try:
        text, encoded = body.decode("utf-8"), False
    except UnicodeDecodeError:
        text, encoded = base64.b64encode(body).decode("ascii"), True
    return {
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": path,
        "rawQueryString": raw_query,
        "queryStringParameters": params or None,
        "headers": {k.lower(): v for k, v in (headers or {}).items()},
        "body": text or None,
        "isBase64Encoded": encoded,
        "requestContext": {
            "accountId": "123456789012",
            "apiId": "local",
            "domainName": "127.0.0.1",
            "domainPrefix": "local",
            "http": {
                "method": method,
                "path": path,
                "protocol": "HTTP/1.1",
                "sourceIp": "127.0.0.1",
                "userAgent": "tests",
            },
            "requestId": "test",
            "routeKey": "$default",
            "stage": "$default",
            "time": "01/Jan/2026:00:00:00 +0000",
            "timeEpoch": 0,
        },
    }


@dataclass
class Answer:
    status: int
    body: Any
    headers: dict[str, str]

    @property
    def data(self) -> Any:
        assert "data" in self.body, self.body
        return self.body["data"]

    @property
    def error(self) -> dict[str, Any]:
        assert "error" in self.body, self.body
        error: dict[str, Any] = self.body["error"]
        return error


def call(
    app: APIGatewayHttpResolver,
    method: str,
    path: str,
    query: Mapping[str, Any] | None = None,
    body: Any = None,
    raw_body: bytes | None = None,
    headers: Mapping[str, str] | None = None,
    json_default: bool = True,
) -> Answer:
    """One request through the resolver, as API Gateway would deliver it. A body goes as JSON
    unless `headers` say otherwise (or, without `json_default`, with no content type)."""
    payload = (
        raw_body if raw_body is not None else b"" if body is None else json.dumps(body).encode()
    )
    sent = {"content-type": "application/json"} if payload and json_default else {}
    event = v2_event(method, path, urlencode(query or {}), {**sent, **(headers or {})}, payload)
    result = handle_event(app, event)
    text = result.get("body") or ""
    return Answer(
        status=int(result["statusCode"]),
        body=json.loads(text) if text else None,
        headers=result.get("headers") or {},
    )


def wsgi_app(app: APIGatewayHttpResolver) -> Callable[..., Iterable[bytes]]:
    def application(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length else b""
        headers = {
            key[5:].replace("_", "-").lower(): value
            for key, value in environ.items()
            if key.startswith("HTTP_")
        }
        if environ.get("CONTENT_TYPE"):
            headers["content-type"] = environ["CONTENT_TYPE"]
        # WSGI hands over the path decoded as latin-1; API Gateway passes it on still encoded.
        raw_path = quote(environ.get("PATH_INFO", "/").encode("latin-1"), safe="/")
        event = v2_event(
            environ["REQUEST_METHOD"], raw_path, environ.get("QUERY_STRING", ""), headers, body
        )
        result = handle_event(app, event)
        text = result.get("body") or ""
        payload = base64.b64decode(text) if result.get("isBase64Encoded") else text.encode()
        status = int(result["statusCode"])
        response_headers = [(k, str(v)) for k, v in (result.get("headers") or {}).items()]
        start_response(f"{status} {_reason(status)}", response_headers)
        return [payload]

    return application


def _reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Unknown"


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def serving(app: APIGatewayHttpResolver) -> Iterator[str]:
    """The API on a real HTTP server on 127.0.0.1 (an ephemeral port); yields its base URL."""
    server: WSGIServer = make_server("127.0.0.1", 0, wsgi_app(app), handler_class=_QuietHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
