"""`cronledger console`: a local proxy that serves the console and signs (SigV4) its API
requests with the operator's credentials, since a browser cannot sign for the IAM-only API.

A signing proxy is a key any web page could try to turn, so it answers only its own page:
`Host` names this proxy (no DNS rebinding), `Origin`/`Sec-Fetch-Site` say same-origin, a body
is JSON, and only the API's paths are passed on.
"""

from __future__ import annotations

import signal
from http.server import ThreadingHTTPServer
from typing import Final

from cronledger.api_client import PREFIX, ApiClient, Unreachable
from cronledger.cli.output import Out
from cronledger.console import HEADERS, PAGE, asset
from cronledger.local_http import (
    READ_TIMEOUT_SECS,
    JsonRequestHandler,
    PeerSafeServer,
    serve_in_thread,
)
from cronledger.pacing import wait_for_interrupt

LOOPBACK: Final = "127.0.0.1"
_PASSED_ON: Final = (f"{PREFIX}/", "/health", "/openapi.json")
_ANSWER_HEADERS: Final = ("content-type", "allow", "retry-after")
#: The methods passed on to the API (which answers a wrong one for a path with its own 405),
#: and those the proxy's own pages answer.
_PASSED_METHODS: Final = ("DELETE", "GET", "HEAD", "PATCH", "POST", "PUT")
_PAGE_METHODS: Final = ("GET", "HEAD")
#: The API's own cap on a body (`cronledger.api.request_rules.MAX_BODY_BYTES`): a larger one
#: is refused here, before a byte of it is read.
MAX_BODY: Final = 1 << 20


def start_proxy(
    api: ApiClient, port: int, read_timeout_secs: float = READ_TIMEOUT_SECS
) -> ThreadingHTTPServer:
    """The proxy, serving on 127.0.0.1:`port` (0: any free port) on a thread of its own. A
    client that misbehaves or goes away fails only its own request (`cronledger.local_http`)."""
    handler = type("Handler", (_Proxy,), {"api": api, "timeout": read_timeout_secs})
    server = PeerSafeServer((LOOPBACK, port), handler)
    serve_in_thread(server, "cronledger-console")
    return server


def serve_console(api: ApiClient, port: int, out: Out) -> None:
    """`cronledger console`: serve until Ctrl-C."""
    try:
        server = start_proxy(api, port)
    except OSError as exc:
        raise OSError(f"cannot listen on {LOOPBACK}:{port} ({exc.strerror}); pass --port") from exc
    # Ctrl-C, or SIGTERM from a process manager, stops it cleanly, even when it was started
    # with SIGINT ignored (a shell script's background job), where Python installs no handler.
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _interrupt)
    url = f"http://{LOOPBACK}:{server.server_port}{PAGE}"
    out.say(f"cronledger console: {url}  (API: {api.base_url})")
    out.say("Ctrl-C to stop.")
    try:
        wait_for_interrupt()
    except KeyboardInterrupt:
        out.say("stopped")
    finally:
        server.shutdown()
        server.server_close()


def _interrupt(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt


class _Proxy(JsonRequestHandler):
    """One request to the proxy: a page of the console, or an API request passed on."""

    api: ApiClient  # the proxy's, set by `start_proxy`
    max_body = MAX_BODY

    def handle_body(self, body: bytes) -> None:
        refusal = self._refusal(body)
        if refusal is not None:
            return self.answer_error(403, "refused", refusal)
        path = self.path.split("?", 1)[0]
        if path.startswith(_PASSED_ON):
            if self.command not in _PASSED_METHODS:
                return self._not_allowed(_PASSED_METHODS)
            return self._pass_on(body or None)
        found = asset(path)
        if found is None and path != "/":
            return self.answer_error(404, "refused", "no such path")
        if self.command not in _PAGE_METHODS:
            return self._not_allowed(_PAGE_METHODS)
        if found is None:
            return self.answer(302, {"location": PAGE}, b"")
        page, content_type = found
        self.answer(200, {**HEADERS, "content-type": content_type}, page)

    def _pass_on(self, body: bytes | None) -> None:
        try:
            status, headers, answer = self.api.exchange(self.command, self.path, body)
        except Unreachable as exc:
            return self.answer_error(502, "refused", str(exc))
        kept = {k.lower(): v for k, v in headers.items() if k.lower() in _ANSWER_HEADERS}
        self.answer(status, kept, answer)

    def _not_allowed(self, allowed: tuple[str, ...]) -> None:
        listed = ", ".join(allowed)
        message = f"{self.path.split('?', 1)[0]} answers {listed}, not {self.command}"
        self.answer_error(405, "method_not_allowed", message, allow=listed)

    def _refusal(self, body: bytes) -> str | None:
        port = self.server.server_port  # type: ignore[attr-defined]
        own = {f"{LOOPBACK}:{port}", f"localhost:{port}"}
        if self.headers.get("host") not in own:
            return "the console proxy answers only requests addressed to it"
        origin = self.headers.get("origin")
        if origin is not None and origin.removeprefix("http://") not in own:
            return "requests from another site's page are refused"
        if self.headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none"):
            return "requests from another site's page are refused"
        content_type = self.headers.get("content-type", "")
        if body and not content_type.startswith("application/json"):
            return "send the body as JSON with Content-Type: application/json"
        return None
