"""Clients that misbehave on the wire, for the local servers' tests: requests written byte by
byte as sent (a bad `Content-Length`, a body that stops), and clients that go away before
their answer (the connection reset, as a process that gives up or dies resets it).

    answer = exchange(port, b"GET /health HTTP/1.1\\r\\nHost: ...\\r\\n\\r\\n")
    answer.status, answer.headers["content-type"], answer.json
"""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import threading
import time
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class RawAnswer:
    status: int
    headers: dict[str, str]  # names in lower case
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)


def request(method: str, path: str, port: int, body: bytes = b"", **headers: str) -> bytes:
    """The bytes of one request addressed to 127.0.0.1:`port`; headers as given (`_` for `-`),
    so a test can send a `Content-Length` that does not match the body."""
    lines = [f"{method} {path} HTTP/1.1", f"Host: 127.0.0.1:{port}"]
    lines += [f"{name.replace('_', '-')}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def exchange(port: int, raw: bytes, timeout: float = 10.0, half_close: bool = False) -> RawAnswer:
    """Send `raw` and read one answer (its body by its `Content-Length`). `half_close`: then
    say that nothing more comes (as a client whose body ended early does)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as connection:
        connection.sendall(raw)
        if half_close:
            connection.shutdown(socket.SHUT_WR)
        reader = connection.makefile("rb")
        status_line = reader.readline()
        assert status_line, "the server closed the connection without an answer"
        status = int(status_line.split()[1])
        headers: dict[str, str] = {}
        while (line := reader.readline()) not in (b"\r\n", b"\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        body = reader.read(int(headers.get("content-length", "0")))
        return RawAnswer(status, headers, body)


def give_up(port: int, raw: bytes, after_secs: float = 0.0, abort: bool = False) -> None:
    """Send `raw`, wait `after_secs`, and go away without reading a byte: closing the
    connection as a client that gave up does, or resetting it (`abort`) as one that died."""
    connection = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        connection.sendall(raw)
        if after_secs:
            connection.settimeout(after_secs)
            with contextlib.suppress(TimeoutError):
                connection.recv(1)  # an answer started: go away all the same
    finally:
        if abort:
            reset(connection)
        else:
            connection.close()


def reset(connection: socket.socket) -> None:
    """Close `connection` with a reset (RST) instead of an orderly close (FIN): the peer's
    next write fails at once rather than later."""
    connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    connection.close()


class HangUp:
    """A server on 127.0.0.1 that reads the start of each request and hangs up: it closes its
    side, then resets the connection, so a client still writing meets a broken pipe and one
    waiting for its answer meets a reset.

        with HangUp() as peer:
            url = f"http://127.0.0.1:{peer.port}/hook"
    """

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self.hung_up = 0
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> HangUp:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._listener.close()
        self._thread.join(timeout=5)

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self._listener.accept()
            except OSError:  # closed: the block ended
                return
            with contextlib.suppress(OSError):
                connection.settimeout(5)
                connection.recv(1024)
                connection.shutdown(socket.SHUT_WR)
                time.sleep(0.1)
            reset(connection)
            self.hung_up += 1
