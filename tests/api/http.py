"""Reaching the resolver through the adapter `cronledger dev` serves (`local_gateway`): each
request becomes an HTTP API (payload v2) event and the v2 answer becomes the response.

`call` does it in-process; `serving` does it over real HTTP on 127.0.0.1, with the very server
`cronledger dev` runs, which is how the command line, the console proxy and the schemathesis
run reach the API.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver

from cronledger.api import handle_event
from cronledger.local_gateway import Resolve, exchange, serve_api, v2_event

__all__ = ["Answer", "call", "serving", "v2_event"]


def resolver(app: APIGatewayHttpResolver) -> Resolve:
    return lambda event, context: handle_event(app, event, context)


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
    target = f"{path}?{urlencode(query)}" if query else path
    status, answer_headers, text = exchange(
        resolver(app), method, target, {**sent, **(headers or {})}, payload
    )
    return Answer(status, json.loads(text) if text else None, answer_headers)


@contextmanager
def serving(
    app: APIGatewayHttpResolver, answered: Callable[[dict[str, Any]], None] | None = None
) -> Iterator[str]:
    """The API as `cronledger dev` serves it, on 127.0.0.1 (an ephemeral port); yields its
    base URL, and stops the server when the block ends. `answered(event)` runs as each request
    has been answered, before the client receives the answer: a test's signal of how far a
    client has got, and a moment to change what its next request will find."""
    resolve = resolver(app)

    def resolve_then_tell(event: dict[str, Any], context: Any) -> dict[str, Any]:
        response = resolve(event, context)
        if answered is not None:
            answered(event)
        return response

    server = serve_api(resolve_then_tell, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
