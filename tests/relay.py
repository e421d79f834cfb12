"""A TCP relay on 127.0.0.1 in front of the test PostgreSQL, to play a database that misbehaves
on the network: one that refuses connections until it is opened (nothing listens on its port
yet), and one that goes silent (it keeps every connection open but stops passing bytes, like
a half-open connection after a failover). `SilentServer` plays an address that accepts
connections and never answers at all (a proxy with nothing behind it).

    with Relay(pg_url) as relay:        # refusing until relay.open()
        relay.open()
        url = relay.url                 # the database URL, through the relay
        relay.freeze(10)                # for 10 s nothing passes, nothing closes
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
from types import TracebackType

import sqlalchemy as sa

_CHUNK = 65536


class Relay:
    def __init__(self, database_url: str) -> None:
        self._target = sa.make_url(database_url)
        # A port nothing listens on until `open`: connecting is refused.
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.url = self._target.set(host="127.0.0.1", port=self.port).render_as_string(
            hide_password=False
        )
        self._frozen = threading.Event()
        self._stopped = threading.Event()
        self._listener: socket.socket | None = None
        self._threads: list[threading.Thread] = []
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()

    def open(self) -> None:
        """Start accepting (and passing bytes both ways)."""
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen()
        listener.settimeout(0.1)
        self._listener = listener
        self._start(self._accept)

    def open_after(self, seconds: float) -> None:
        timer = threading.Timer(seconds, self.open)
        timer.daemon = True
        timer.start()

    def freeze(self, seconds: float) -> None:
        """Pass no bytes on any connection for `seconds`, without closing any (bounded, so a
        client that waited it out would succeed after all, and a test expecting it to give
        up would fail rather than hang)."""
        self._frozen.set()
        thaw = threading.Timer(seconds, self._frozen.clear)
        thaw.daemon = True
        thaw.start()

    def close(self) -> None:
        self._stopped.set()
        for thread in self._threads:
            thread.join(timeout=5)
        with self._lock:
            for sock in self._sockets:
                sock.close()
        if self._listener is not None:
            self._listener.close()

    def __enter__(self) -> Relay:
        return self

    def __exit__(
        self,
        _type: type[BaseException] | None,
        _value: BaseException | None,
        _traceback: TracebackType | None,
    ) -> None:
        self.close()

    def _start(self, target: object, *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)  # type: ignore[arg-type]
        self._threads.append(thread)
        thread.start()

    def _accept(self) -> None:
        assert self._listener is not None
        while not self._stopped.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            server = socket.create_connection((self._target.host, self._target.port or 5432))
            with self._lock:
                self._sockets += [client, server]
            self._start(self._pump, client, server)

    def _pump(self, client: socket.socket, server: socket.socket) -> None:
        peers = {client: server, server: client}
        with selectors.DefaultSelector() as selector:
            for sock in peers:
                selector.register(sock, selectors.EVENT_READ)
            while not self._stopped.is_set():
                for key, _ in selector.select(timeout=0.1):
                    if self._frozen.is_set():
                        continue  # silent: read nothing, pass nothing, close nothing
                    sock = key.fileobj
                    assert isinstance(sock, socket.socket)
                    try:
                        data = sock.recv(_CHUNK)
                    except OSError:
                        data = b""
                    if not data:
                        for peer in peers:
                            peer.close()
                        return
                    peers[sock].sendall(data)
                if self._frozen.is_set():
                    self._stopped.wait(0.1)


class SilentServer:
    """A TCP port that accepts connections and never says a word (a proxy with nothing behind
    it), counting the connections it was offered."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self.accepted: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):  # closed
            while True:
                self.accepted.append(self._listener.accept()[0])

    def url(self, database_url: str) -> str:
        """`database_url`, pointed at this server instead."""
        moved = sa.make_url(database_url).set(host="127.0.0.1", port=self.port)
        return moved.render_as_string(hide_password=False)

    def close(self) -> None:
        self._listener.close()
        for conn in self.accepted:
            conn.close()
