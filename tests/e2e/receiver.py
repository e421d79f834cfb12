"""A webhook receiver on 127.0.0.1 that records every event POSTed to it, and can be down:
nothing listens on its port until `up()`, so a sender's connection is refused."""

from __future__ import annotations

import json
import socket
import threading
from collections import defaultdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from cronledger.local_http import serve_in_thread


class Receiver:
    def __init__(self) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port: int = probe.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/events"
        self.posts: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    def up(self) -> Receiver:
        posts, lock = self.posts, self._lock

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with lock:
                    posts.append(json.loads(body))
                self.send_response(204)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        serve_in_thread(self._server, "webhook-receiver")
        return self

    def down(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def events(self) -> dict[str, dict[str, Any]]:
        """Every event received, deduplicated by `event_id` (a redelivery is the same event)."""
        with self._lock:
            posts = list(self.posts)
        unique: dict[str, dict[str, Any]] = {}
        for post in posts:
            seen = unique.setdefault(post["event_id"], post)
            assert seen == post, "a redelivery carries the same event"
        return unique

    def sequences(self) -> dict[str, list[int]]:
        """Per channel, the sequence numbers received, in order."""
        found: dict[str, list[int]] = defaultdict(list)
        for event in self.events().values():
            found[event["channel_id"]].append(event["sequence"])
        return {channel: sorted(numbers) for channel, numbers in found.items()}
