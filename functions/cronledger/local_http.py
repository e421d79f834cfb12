"""The HTTP server under `cronledger dev` and `cronledger console`: a peer can fail its own
request, never the server.

A body is read whole, only with one decimal `Content-Length` within the cap; anything else
(chunked, short, silent for `READ_TIMEOUT_SECS`, over the cap) is refused in the API's error
shape and the connection closed. A client going away costs one log line. The standard
library's own refusals leave as JSON too, and every method reaches `handle_method`.
"""

from __future__ import annotations

import json
import logging
import socketserver
import sys
import threading
from collections.abc import Mapping
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any, Final

log = logging.getLogger(__name__)

#: How long a client may stay silent in the middle of a request, or idle between two on one
#: connection, before the server gives its connection up.
READ_TIMEOUT_SECS: Final = 30.0
#: How often a serving thread checks whether it was told to stop, which bounds `shutdown`.
STOP_POLL_SECS: Final = 0.02
#: The error codes of the refusals made here, in the API's vocabulary where it has one.
_CODES: Final = {
    HTTPStatus.BAD_REQUEST: "malformed_request",
    HTTPStatus.METHOD_NOT_ALLOWED: "method_not_allowed",
    HTTPStatus.REQUEST_TIMEOUT: "request_timeout",
    HTTPStatus.LENGTH_REQUIRED: "length_required",
    HTTPStatus.REQUEST_ENTITY_TOO_LARGE: "too_large",
    HTTPStatus.REQUEST_URI_TOO_LONG: "too_large",
    HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE: "too_large",
}


def error_body(code: str, message: str) -> bytes:
    """`{"error": {"code", "message", "details": []}}`, ASCII-only whatever `message` holds."""
    return json.dumps({"error": {"code": code, "message": message, "details": []}}).encode()


def serve_in_thread(server: socketserver.BaseServer, name: str) -> threading.Thread:
    """Serve on a daemon thread until `server.shutdown()` (within `STOP_POLL_SECS`)."""
    thread = threading.Thread(
        target=server.serve_forever, args=(STOP_POLL_SECS,), name=name, daemon=True
    )
    thread.start()
    return thread


class PeerSafeServer(ThreadingHTTPServer):
    """A threading HTTP server that logs a client going away as one line, not a traceback."""

    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, ConnectionError | TimeoutError):
            log.warning("client %s went away mid-request: %s", client_address[0], exc)
        else:
            log.error("error serving client %s", client_address[0], exc_info=exc)


class JsonRequestHandler(BaseHTTPRequestHandler):
    """Every method's request, its body read whole, goes to `handle_body`, which answers with
    `answer`; refusals (of the body here) are JSON in the error shape."""

    protocol_version = "HTTP/1.1"
    timeout = READ_TIMEOUT_SECS
    #: The largest body accepted, in bytes; a larger one is a 413 before a byte of it is read.
    max_body: int = 1 << 20

    def handle_body(self, body: bytes) -> None:
        raise NotImplementedError

    if not TYPE_CHECKING:  # kept from the type checker: every attribute would be Any

        def __getattr__(self, name: str) -> Any:
            # The standard library answers `do_<METHOD>`; any method, known or not, is
            # `handle_body`'s to answer (a 405 naming those it takes, not an HTML 501).
            if name.startswith("do_"):
                return self._handle_method
            raise AttributeError(name)

    def _handle_method(self) -> None:
        body = self._body()
        if isinstance(body, bytes):
            self.handle_body(body)
        else:
            self.refuse(*body)  # the connection closes: the rest of the body is not read

    def _body(self) -> bytes | tuple[HTTPStatus, str]:
        """The body, or the status and message it is refused with."""
        if self.headers.get("transfer-encoding") is not None:
            return HTTPStatus.LENGTH_REQUIRED, "send the body with a Content-Length, not in chunks"
        values = {value.strip() for value in self.headers.get_all("content-length") or ()}
        if len(values) > 1:
            return HTTPStatus.BAD_REQUEST, "Content-Length is given more than once, differently"
        value = values.pop() if values else "0"
        if not (value.isascii() and value.isdigit()):
            message = f"Content-Length must be a number of bytes, not {value[:40]!r}"
            return HTTPStatus.BAD_REQUEST, message
        if len(value) > len(str(self.max_body)) or int(value) > self.max_body:
            message = f"the body is {value[:40]} bytes; at most {self.max_body} are accepted"
            return HTTPStatus.REQUEST_ENTITY_TOO_LARGE, message
        length = int(value)
        try:
            body = self.rfile.read(length) if length else b""
        except TimeoutError:
            return HTTPStatus.REQUEST_TIMEOUT, f"the body did not arrive within {self.timeout:g} s"
        if len(body) < length:
            message = f"the body ended after {len(body)} of its {length} bytes (Content-Length)"
            return HTTPStatus.BAD_REQUEST, message
        return body

    def refuse(self, status: HTTPStatus, message: str) -> None:
        """Answer `status` in the error shape and close the connection."""
        self.close_connection = True
        self.answer_error(status, _CODES.get(status, "malformed_request"), message)

    def answer_error(self, status: int, code: str, message: str, **headers: str) -> None:
        """Answer `status` in the API's error shape, with any other `headers`."""
        body = error_body(code, message)
        self.answer(status, {"content-type": "application/json", **headers}, body)

    def answer(self, status: int, headers: Mapping[str, str], body: bytes) -> None:
        """Send one answer; its length (and whether the connection closes) is set here."""
        self.send_response(status)
        for name, value in headers.items():
            if name.lower() not in ("content-length", "connection"):
                self.send_header(name, value)
        if self.close_connection:
            self.send_header("connection", "close")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """The standard library's own refusals, in the error shape instead of an HTML page."""
        self.log_error("code %d, message %s", code, message)
        if self.request_version == "HTTP/0.9":
            # A request line too malformed to name its version still gets a status line.
            self.request_version = "HTTP/1.0"
        status = HTTPStatus(code)
        self.refuse(status, message or status.phrase)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s - " + format, self.address_string(), *args)
