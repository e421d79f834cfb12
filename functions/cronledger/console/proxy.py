"""`cronledger console`: the web console for an API a browser cannot call itself.

On AWS the API is IAM-only, so a browser cannot sign its requests. This proxy listens on
127.0.0.1 only, serves the page from this package, and passes every API request on through
the command line's `ApiClient`, which signs it (SigV4) with the operator's credentials, as
`kubectl proxy` does.

A signing proxy on localhost is a key any web page could try to turn, so it answers only
requests that are plainly its own page's: the `Host` must be this proxy (no DNS rebinding), an
`Origin` or `Sec-Fetch-Site` must say same-origin (no other site's page), and a body must be
JSON (no simple cross-site form). Only the API's own paths are passed on.
"""

from __future__ import annotations

import json
import logging
import signal
import threading
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Final

from cronledger.cli.client import PREFIX, ApiClient, Unreachable
from cronledger.cli.output import Out
from cronledger.console import HEADERS, PAGE, asset
from cronledger.pacing import wait_for_interrupt

log = logging.getLogger(__name__)

LOOPBACK: Final = "127.0.0.1"
_PASSED_ON: Final = (f"{PREFIX}/", "/health", "/openapi.json")
_ANSWER_HEADERS: Final = ("content-type", "allow", "retry-after")
MAX_BODY: Final = 1 << 20  # far above any channel document the API takes


def start_proxy(api: ApiClient, port: int) -> ThreadingHTTPServer:
    """The proxy, serving on 127.0.0.1:`port` (0: any free port) on a thread of its own."""
    server = ThreadingHTTPServer((LOOPBACK, port), _handler(api))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="cronledger-console", daemon=True).start()
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


def _handler(api: ApiClient) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        body: bytes | None = None

        def _handle(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            if length > MAX_BODY:
                self.close_connection = True
                return self._answer(413, {"content-type": "application/json"}, _error("too large"))
            self.body = self.rfile.read(length) if length else None
            refusal = self._refusal()
            if refusal is not None:
                return self._answer(403, {"content-type": "application/json"}, _error(refusal))
            path = self.path.split("?", 1)[0]
            found = asset(path) if self.command in ("GET", "HEAD") else None
            if found is not None:
                body, content_type = found
                return self._answer(200, {**HEADERS, "content-type": content_type}, body)
            if path == "/":
                return self._answer(302, {"location": PAGE}, b"")
            if not path.startswith(_PASSED_ON):
                return self._answer(
                    404, {"content-type": "application/json"}, _error("no such path")
                )
            self._pass_on()

        def _pass_on(self) -> None:
            try:
                status, headers, body = api.exchange(self.command, self.path, self.body)
            except Unreachable as exc:
                return self._answer(502, {"content-type": "application/json"}, _error(str(exc)))
            kept = {k.lower(): v for k, v in headers.items() if k.lower() in _ANSWER_HEADERS}
            self._answer(status, kept, body)

        def _refusal(self) -> str | None:
            port = self.server.server_port  # type: ignore[attr-defined]
            own = {f"{LOOPBACK}:{port}", f"localhost:{port}"}
            if self.headers.get("host") not in own:
                return "the console proxy answers only requests addressed to it"
            origin = self.headers.get("origin")
            if origin is not None and origin.removeprefix("http://") not in own:
                return "requests from another site's page are refused"
            if self.headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none"):
                return "requests from another site's page are refused"
            has_body = bool(self.body)
            content_type = self.headers.get("content-type", "")
            if has_body and not content_type.startswith("application/json"):
                return "send the body as JSON with Content-Type: application/json"
            return None

        def _answer(self, status: int, headers: Mapping[str, str], body: bytes) -> None:
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _handle

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("%s - " + format, self.address_string(), *args)

    return Handler


def _error(message: str) -> bytes:
    return json.dumps({"error": {"code": "refused", "message": message, "details": []}}).encode()
