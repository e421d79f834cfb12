"""Test doubles that sit on the far side of a target: callables for the python target, and an
HTTP server on 127.0.0.1 that records what it received and answers as it is told (it stands in
for an HTTP endpoint, or for the Lambda API where moto cannot produce an answer)."""

from __future__ import annotations

import ssl
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from cronledger.local_http import serve_in_thread
from cronledger.targets import secrets

received_envelopes: list[dict[str, Any]] = []


def record_envelope(envelope: dict[str, Any]) -> dict[str, Any]:
    received_envelopes.append(envelope)
    return {"seen": envelope["trigger"]["occurrence_id"]}


def explode(envelope: dict[str, Any]) -> None:
    raise RuntimeError(f"report for {envelope['trigger']['scheduled_for']} failed")


def huge_answer(envelope: dict[str, Any]) -> str:
    return "x" * 200_000


not_callable = 42


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    #: When it arrived (`time.monotonic`).
    at: float = field(default_factory=time.monotonic)


@dataclass
class Answer:
    status: int = 200
    body: bytes = b'{"ok": true}'
    headers: dict[str, str] = field(default_factory=dict)
    delay_secs: float = 0.0


class RecordingServer:
    """`with RecordingServer() as server:` serves on `server.url` until the block ends; with
    `tls`, over TLS, recording the name each client asked for (SNI) in `server_names`."""

    def __init__(self, answer: Answer | None = None, tls: ssl.SSLContext | None = None) -> None:
        self.answer = answer or Answer()
        self.received: list[Received] = []
        self.server_names: list[str | None] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        if tls is not None:
            tls.sni_callback = lambda _socket, name, _context: self.server_names.append(name)
            self._server.socket = tls.wrap_socket(self._server.socket, server_side=True)
            self.url = f"https://127.0.0.1:{self.port}"

    def __enter__(self) -> RecordingServer:
        serve_in_thread(self._server, "recording-server")
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                server.received.append(
                    Received(
                        self.command, self.path, dict(self.headers.items()), self.rfile.read(length)
                    )
                )
                answer = server.answer
                time.sleep(answer.delay_secs)
                try:
                    self.send_response(answer.status)
                    for name, value in answer.headers.items():
                        self.send_header(name, value)
                    self.send_header("Content-Length", str(len(answer.body)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(answer.body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up waiting, which is what a timeout test wants

            do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = _serve

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler


def forget_cached_secrets() -> None:
    """Drop every secret value and host binding the targets cached, so a test reads afresh."""
    with secrets._providers_lock:
        secrets._providers.clear()
        secrets._hosts.clear()
