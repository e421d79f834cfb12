"""`cronledger dev`'s stand-in for API Gateway: an HTTP request becomes a payload v2 event
and the resolver's answer the response. The API's tests use this very adapter. With no
authentication, a request a foreign web page may have sent is refused (`foreign_request`),
and listening beyond this machine must be asked for, and is said (`exposure_warning`).
"""

from __future__ import annotations

import base64
import ipaddress
import logging
import time
from collections.abc import Callable, Mapping
from http.server import ThreadingHTTPServer
from typing import Any, cast
from urllib.parse import parse_qsl, urlsplit

from cronledger.local_http import (
    READ_TIMEOUT_SECS,
    JsonRequestHandler,
    PeerSafeServer,
    error_body,
    serve_in_thread,
)

log = logging.getLogger(__name__)

#: Answers one v2 event (and a Lambda context) with a v2 response dict, as the resolver does.
Resolve = Callable[[dict[str, Any], Any], dict[str, Any]]


def v2_event(
    method: str, target: str, headers: Mapping[str, str] | None = None, body: bytes = b""
) -> dict[str, Any]:
    """The payload v2 event API Gateway makes of a request to `target` (path and query, still
    encoded): repeated parameters joined by commas, a body that is not UTF-8 as base64."""
    headers = {k.lower(): v for k, v in (headers or {}).items()}
    parts = urlsplit(target)
    query: dict[str, str] = {}
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        query[key] = f"{query[key]},{value}" if key in query else value
    try:
        text, encoded = body.decode("utf-8"), False
    except UnicodeDecodeError:
        text, encoded = base64.b64encode(body).decode("ascii"), True
    return {
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": parts.path or "/",
        "rawQueryString": parts.query,
        "headers": headers,
        "queryStringParameters": query or None,
        "requestContext": {
            "http": {"method": method, "path": parts.path or "/", "sourceIp": "127.0.0.1"},
            "requestId": f"local-{time.time_ns()}",
            "routeKey": "$default",
            "stage": "$default",
        },
        "body": text or None,
        "isBase64Encoded": encoded,
    }


def exchange(
    resolve: Resolve, method: str, target: str, headers: Mapping[str, str], body: bytes
) -> tuple[int, dict[str, str], bytes]:
    """One request answered through `resolve`: status, headers, body; an error the resolver
    did not map is a logged 500 in the API's error shape."""
    try:
        response = resolve(v2_event(method, target, headers, body), None)
    except Exception:  # the resolver maps errors; this is the last line of defence
        log.exception("unhandled error answering %s %s", method, target)
        return 500, {"content-type": "application/json"}, error_body("internal", "internal error")
    return http_answer(response)


def http_answer(response: Mapping[str, Any]) -> tuple[int, dict[str, str], bytes]:
    """A v2 response dict as the status, headers and body bytes an HTTP server sends."""
    raw = response.get("body") or ""
    # "replace": a lone surrogate in an answer must not cost the client its connection.
    payload = (
        base64.b64decode(raw) if response.get("isBase64Encoded") else raw.encode("utf-8", "replace")
    )
    headers = {name: str(value) for name, value in (response.get("headers") or {}).items()}
    return int(response.get("statusCode", 200)), headers, payload


def serve_api(
    resolve: Resolve, host: str, port: int, read_timeout_secs: float = READ_TIMEOUT_SECS
) -> ThreadingHTTPServer:
    """An HTTP server on `host:port`, on its own thread, answering through `resolve`, except
    a request a web page of another site may have sent (`foreign_request`): 403."""
    from cronledger.api.request_rules import MAX_BODY_BYTES  # Powertools: only when serving

    class Handler(JsonRequestHandler):
        timeout = read_timeout_secs
        max_body = MAX_BODY_BYTES

        def handle_body(self, body: bytes) -> None:
            # Every method goes to the resolver, which answers a wrong one with a 405.
            served_port = cast(ThreadingHTTPServer, self.server).server_port
            refusal = foreign_request(
                self.headers.get("host"), self.headers.get("origin"), host, served_port
            )
            if refusal is not None:
                return self.answer_error(403, "forbidden", refusal)
            self.answer(
                *exchange(resolve, self.command, self.path, dict(self.headers.items()), body)
            )

    server = PeerSafeServer((host, port), Handler)
    serve_in_thread(server, "cronledger-http")
    return server


def foreign_request(
    host_header: str | None, origin: str | None, served_host: str, served_port: int
) -> str | None:
    """Why a request may come from a web page of another site, or None. A browser names the
    page's site in `Origin` (only this server's own pages pass; other clients send none), and
    `Host` must name this server by address, `localhost` or its own name (no DNS rebinding)."""
    if not host_header:
        return "a request must say which host it is for (Host)"
    try:
        parts = urlsplit(f"//{host_header}")
        name = (parts.hostname or "").rstrip(".")
        port = parts.port or 80
    except ValueError:  # an unclosed `[`, a bracketed name, a port that is no number
        name, port = "", -1
    if port != served_port or not (name in ("localhost", served_host.lower()) or _is_address(name)):
        return (
            f"Host {host_header!r} does not name this server; use "
            f"http://127.0.0.1:{served_port} or http://localhost:{served_port}"
        )
    if origin is not None and origin.lower() != f"http://{host_header.lower()}":
        return (
            f"requests from the web page of another site ({origin}) are refused: the local API "
            "has no authentication"
        )
    return None


def _is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def exposure_warning(host: str, allow_remote: bool) -> str | None:
    """What `cronledger dev` says before listening on `host` (None for a loopback one, only
    reachable from this machine); ValueError for any other without `allow_remote`."""
    if host.lower() == "localhost" or (
        _is_address(host) and ipaddress.ip_address(host).is_loopback
    ):
        return None
    if not allow_remote:
        raise ValueError(
            f"refusing to serve the API on {host}: it has no authentication, so anyone who can "
            "reach it can run what your targets allow; pass --allow-remote to do it anyway"
        )
    return (
        f"WARNING: the API listens on {host}, beyond this machine, with no authentication: "
        "anyone who can reach it can create channels and run what your targets allow."
    )
