"""One HTTP request sent to an address that was checked, under the URL's own host name.
Resolving again to connect would let a name change its answer in between (DNS rebinding), so
the connection goes to the checked address while the `Host` header, TLS SNI and certificate
check keep the URL's host. No redirects, no proxy, no retries.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import urllib3
from urllib3.exceptions import (
    ConnectTimeoutError,
    NewConnectionError,
    TimeoutError as Urllib3Timeout,
)

from cronledger.excerpts import RESULT_EXCERPT_BYTES
from cronledger.targets.addresses import Address

#: Connecting gets at most this long of the budget, so one dead address leaves time for the next.
CONNECT_SECS = 5.0


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    reason: str
    body: str
    location: str | None


class Unreachable(Exception):
    """No address accepted a connection (the message says why for the last one)."""


class TimedOut(Exception):
    """The budget ran out."""


def send(
    *,
    scheme: str,
    host: str,
    port: int,
    addresses: Sequence[Address],
    method: str,
    target: str,
    headers: Mapping[str, str],
    body: bytes | None,
    deadline: float,
) -> Answer:
    """Send the request to the first of `addresses` that accepts a connection."""
    last: Exception | None = None
    for address in addresses:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimedOut
        timeout = urllib3.Timeout(connect=min(CONNECT_SECS, left), read=left)
        pool = _pool(scheme, host, address, port, timeout)
        with pool:
            try:
                response = pool.urlopen(
                    method,
                    target,
                    body=body,
                    headers=dict(headers),
                    redirect=False,
                    retries=False,
                    assert_same_host=False,
                    preload_content=False,
                )
            except (NewConnectionError, ConnectTimeoutError) as exc:
                last = exc
                continue
            except Urllib3Timeout:
                raise TimedOut from None
            try:
                text = _read_excerpt(response, deadline)
            finally:
                response.release_conn()
            return Answer(
                response.status, response.reason or "", text, response.headers.get("Location")
            )
    raise Unreachable(_reason(last))


def _pool(
    scheme: str, host: str, address: Address, port: int, timeout: urllib3.Timeout
) -> urllib3.HTTPConnectionPool:
    if scheme == "https":
        return urllib3.HTTPSConnectionPool(
            str(address),
            port,
            timeout=timeout,
            retries=False,
            server_hostname=host,
            assert_hostname=host,
            cert_reqs="CERT_REQUIRED",
        )
    return urllib3.HTTPConnectionPool(str(address), port, timeout=timeout, retries=False)


def _reason(exc: Exception | None) -> str:
    if exc is None:
        return "the host has no address"
    # urllib3 derives NewConnectionError (refused, unreachable…) from ConnectTimeoutError.
    if isinstance(exc, ConnectTimeoutError) and not isinstance(exc, NewConnectionError):
        return "the connection timed out"
    # urllib3's message starts with the connection object's repr; the cause is what matters.
    cause = exc.__cause__ or exc.__context__
    return str(cause) if cause is not None else str(exc)


def _read_excerpt(response: urllib3.BaseHTTPResponse, deadline: float) -> str:
    """Read no more of the answer than the excerpt keeps, and no longer than the budget."""
    chunks: list[bytes] = []
    kept = 0
    try:
        while kept <= RESULT_EXCERPT_BYTES:
            if time.monotonic() > deadline:
                raise TimedOut
            chunk = response.read(16 * 1024)
            if not chunk:
                break
            chunks.append(chunk)
            kept += len(chunk)
    except Urllib3Timeout:
        raise TimedOut from None
    return b"".join(chunks).decode("utf-8", errors="replace")
