"""Opening a PostgreSQL connection within a bound of its own, and within a deadline.

The socket is opened here and handed to pg8000, so the whole handshake, TLS included, is bounded
by `connect_timeout_secs`: a server that accepts TCP and then says nothing (a proxy with no
database yet) cannot hold the caller for the read timeout, which applies only once connected.
Nagle's algorithm is off, as in libpq. Inside `deadline(until)` (monotonic) both bounds shrink
to the time left; a handshake the deadline cut short raises `DeadlineReached`.
"""

from __future__ import annotations

import socket
import ssl
import struct
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cronledger.ledger.models import DeadlineReached

if TYPE_CHECKING:
    from cronledger.ledger.driver import Connection

SSL_REQUEST = struct.pack("!ii", 8, 80877103)  # its length, then its code
#: How long opening a connection may take (a proxy may first have to reach the database).
CONNECT_TIMEOUT_SECS = 15.0

_deadline: ContextVar[float | None] = ContextVar("cronledger_connect_deadline", default=None)


@contextmanager
def deadline(until: float) -> Iterator[None]:
    """Connections opened in this block (this context) end their handshake and every later
    read by the monotonic `until`."""
    token = _deadline.set(until)
    try:
        yield
    finally:
        _deadline.reset(token)


@dataclass(frozen=True)
class BoundedConnect:
    """A SQLAlchemy `do_connect` hook that opens the connection itself, with a fresh
    `password()` each time when one is given (an IAM token)."""

    connect_timeout: float
    password: Callable[[], str] | None
    prepared_statements: bool

    def __call__(self, dialect: Any, _record: Any, cargs: Any, cparams: dict[str, Any]) -> Any:
        params = dict(cparams)
        if self.password is not None:
            params["password"] = self.password()
        where = f"{params.get('host', 'localhost')}:{params.get('port', 5432)}"
        read_timeout: float | None = params.pop("timeout", None)
        handshake = min(self.connect_timeout, read_timeout or self.connect_timeout)
        until = _deadline.get()
        cut_by_deadline = False
        if until is not None:
            left = until - time.monotonic()
            if left <= 0:
                raise DeadlineReached(f"no connection to {where} opened: the deadline passed")
            cut_by_deadline = left < handshake
            handshake = min(handshake, left)
            read_timeout = left if read_timeout is None else min(read_timeout, left)
        try:
            connection = open_connection(
                *cargs, timeout=handshake, prepared_statements=self.prepared_statements, **params
            )
        except (OSError, dialect.loaded_dbapi.InterfaceError) as exc:
            if not _timed_out(exc):
                raise
            if cut_by_deadline:
                raise DeadlineReached(
                    f"{where} did not answer before the deadline, {handshake:.1f} s away when "
                    "connecting began"
                ) from exc
            raise TimeoutError(
                f"{where} did not complete the connection within the {handshake:g} s connect "
                "timeout"
            ) from exc
        connection.socket.settimeout(read_timeout)
        return connection


def open_connection(
    *args: Any,
    timeout: float | None,
    prepared_statements: bool,
    host: str = "localhost",
    port: int = 5432,
    unix_sock: str | None = None,
    source_address: Any = None,
    tcp_keepalive: bool = True,
    ssl_context: ssl.SSLContext | bool | None = None,
    **params: Any,
) -> Connection:
    """A `Connection` (pg8000's parameters) on a socket opened here, the handshake bounded
    by `timeout`."""
    from pg8000.exceptions import InterfaceError  # the driver is loaded with the engine

    from cronledger.ledger.driver import Connection

    try:
        if unix_sock is not None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(timeout)
            sock.connect(unix_sock)
        else:
            sock = socket.create_connection((host, port), timeout, source_address)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except OSError as exc:
        raise InterfaceError(f"cannot connect to {unix_sock or f'{host}:{port}'}: {exc}") from exc
    try:
        if tcp_keepalive:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        sock = _secured(sock, host, ssl_context)
        return Connection(
            *args,
            host=host,
            port=port,
            sock=sock,
            ssl_context=False,
            prepared_statements=prepared_statements,
            **params,
        )
    except BaseException:
        sock.close()
        raise


def _secured(sock: socket.socket, host: str, tls: ssl.SSLContext | bool | None) -> socket.socket:
    """`sock` inside TLS as pg8000's `ssl_context` means it: False, none; None, unverified if
    the server offers it; True, unverified but required; a context, required as it says."""
    if tls is False:
        return sock
    sock.sendall(SSL_REQUEST)
    if sock.recv(1) != b"S":
        if tls is None:
            return sock
        raise ConnectionRefusedError("the server refuses TLS")
    if not isinstance(tls, ssl.SSLContext):
        tls = ssl.create_default_context()
        tls.check_hostname = False
        tls.verify_mode = ssl.CERT_NONE
    return tls.wrap_socket(sock, server_hostname=host)


def _timed_out(exc: BaseException | None) -> bool:
    """Whether `exc`, or what it was raised from, is a socket timeout."""
    while exc is not None and not isinstance(exc, TimeoutError):
        exc = exc.__cause__ or exc.__context__
    return exc is not None
