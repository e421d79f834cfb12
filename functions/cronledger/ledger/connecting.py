"""Opening a PostgreSQL connection within a bound of its own, and within a deadline.

pg8000 has one timeout, its socket's, for connecting and for every read after. A server that
accepts the TCP connection and then says nothing (a proxy with no database behind it yet, a
failover's half-open socket) would hold the caller for the whole read timeout, which for
`migrate` is as long as the function may run. So pg8000 connects (TCP, TLS, startup and
authentication) with the shorter of the two, `connect_timeout_secs`, and only then does the
socket's timeout become the read timeout.

Inside `deadline(until)` (a monotonic instant) both bounds shrink to the time left, so a
connection opened there cannot outlive it: a handshake the deadline cut short raises
`DeadlineReached`, naming it, instead of `DatabaseUnavailable`, which would invite a retry.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from cronledger.ledger.models import DeadlineReached

#: How long opening a connection may take, handshake included: a few round trips to a proxy
#: that may first have to reach the database.
CONNECT_TIMEOUT_SECS = 15.0

_deadline: ContextVar[float | None] = ContextVar("cronledger_connect_deadline", default=None)


@contextmanager
def deadline(until: float) -> Iterator[None]:
    """Connections opened in this block (this thread) end their handshake and every later
    read by the monotonic `until`."""
    token = _deadline.set(until)
    try:
        yield
    finally:
        _deadline.reset(token)


class BoundedConnect:
    """A SQLAlchemy `do_connect` hook for pg8000 that opens the connection itself (see the
    module header), with a fresh `password()` each time when one is given."""

    def __init__(
        self,
        connect_timeout_secs: float = CONNECT_TIMEOUT_SECS,
        password: Callable[[], str] | None = None,
    ) -> None:
        self._connect_timeout = connect_timeout_secs
        self._password = password

    def __call__(self, dialect: Any, _record: Any, cargs: Any, cparams: dict[str, Any]) -> Any:
        params = dict(cparams)
        if self._password is not None:
            params["password"] = self._password()
        where = f"{params.get('host', 'localhost')}:{params.get('port', 5432)}"
        read_timeout: float | None = params.get("timeout")
        handshake = min(self._connect_timeout, read_timeout or self._connect_timeout)
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
            connection = dialect.loaded_dbapi.connect(*cargs, **{**params, "timeout": handshake})
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
        # pg8000 offers no public way to change its socket's timeout once connected.
        connection._usock.settimeout(read_timeout)
        return connection


def _timed_out(exc: BaseException) -> bool:
    """Whether `exc`, or what it was raised from, is a socket timeout."""
    current: BaseException | None = exc
    while current is not None:
        if isinstance(current, TimeoutError):
            return True
        current = current.__cause__ or current.__context__
    return False
