"""HTTP target: the envelope as a JSON request body, successful on a 2xx answer.

Target documents are stored and listed in plain text, so anything that looks like a credential
(an `Authorization` header, a token-named header or query parameter, a bearer value, a password
in the URL) is refused when the channel is saved: put the secret behind the endpoint instead.
Only methods that carry a body are allowed, because every target receives the envelope.
Redirects are not followed: a 3xx is a failure that names where the endpoint moved, so the
envelope never goes to a host nobody configured.
"""

from __future__ import annotations

import re
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from http.client import HTTPResponse
from typing import IO, Any
from urllib.parse import parse_qsl, urlsplit

from cronledger import __version__
from cronledger.errors import FieldError
from cronledger.excerpts import RESULT_EXCERPT_BYTES
from cronledger.targets.clients import AwsClients
from cronledger.targets.envelope import Envelope, envelope_json
from cronledger.targets.fields import DocumentChecks
from cronledger.targets.interface import TargetKind, TargetOutcome, timed_out

METHODS = ("POST", "PUT", "PATCH")
_MAX_HEADERS = 50
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_SET_BY_CRONLEDGER = {"host", "content-length", "content-type", "transfer-encoding", "connection"}
_SECRET_WORDS = {
    "authorization", "auth", "token", "secret", "password", "passwd", "pwd", "apikey",
    "cookie", "credential", "credentials", "signature", "session", "sig",
}  # fmt: skip
_SECRET_VALUE = re.compile(
    r"(?i)^\s*(bearer|basic|digest|negotiate|token)\s+\S"  # an authorization scheme
    r"|^eyJ[\w-]+\.eyJ[\w-]+\."  # a JWT
    r"|(AKIA|ASIA)[0-9A-Z]{16}"  # an AWS access key id
    r"|-----BEGIN [A-Z ]+-----"  # a PEM block
)


def errors(doc: Mapping[str, Any]) -> list[FieldError]:
    checks = DocumentChecks(doc)
    url = checks.string("url", example="https://example.com/hooks/nightly", max_len=2048)
    if url is not None:
        _check_url(checks, url)
    method = checks.string("method", example="POST", max_len=16, required=False)
    if method is not None and method.upper() not in METHODS:
        checks.fail(
            "method",
            "invalid",
            f"method must be one of {', '.join(METHODS)}: the envelope is sent as the body",
        )
    headers = doc.get("headers")
    if headers is not None:
        _check_headers(checks, headers)
    return checks.errors


def _check_url(checks: DocumentChecks, url: str) -> None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        checks.fail("url", "invalid", "url must be an absolute http:// or https:// URL")
    elif parts.username or parts.password:
        checks.fail("url", "invalid", "url must not carry a user name or password")
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if _looks_secret(name, value):
            checks.fail(
                "url",
                "invalid",
                f"query parameter {name!r} looks like a credential; target settings are stored "
                "in plain text, so authenticate the endpoint another way",
            )


def _check_headers(checks: DocumentChecks, headers: Any) -> None:
    if not isinstance(headers, Mapping):
        checks.fail("headers", "type_mismatch", 'headers must be an object, e.g. {"X-Team": "ops"}')
        return
    if len(headers) > _MAX_HEADERS:
        checks.fail("headers", "too_long", f"at most {_MAX_HEADERS} headers")
    for name, value in headers.items():
        key = f"headers.{name}"
        if not isinstance(name, str) or not _TOKEN.fullmatch(name) or len(name) > 256:
            checks.fail(key, "invalid", "a header name is letters, digits and -_.!#$%&'*+^`|~")
        elif name.lower() in _SET_BY_CRONLEDGER:
            checks.fail(key, "invalid", f"{name} is set by cronledger; remove it")
        elif not isinstance(value, str):
            checks.fail(key, "type_mismatch", f"header {name} must be a string")
        elif len(value) > 4096:
            checks.fail(key, "too_long", f"header {name} must be at most 4096 characters")
        elif any(c in value for c in "\r\n\0"):
            checks.fail(key, "invalid", f"header {name} must be one line")
        elif _looks_secret(name, value):
            checks.fail(
                key,
                "invalid",
                f"header {name} looks like a credential; target settings are stored in plain "
                "text, so authenticate the endpoint another way (e.g. an IAM-authorised URL)",
            )


def _looks_secret(name: str, value: str) -> bool:
    words = [w for w in re.split(r"[-_.\s]+", name.lower()) if w]
    named_secret = bool(_SECRET_WORDS.intersection(words)) or "".join(words[-2:]) == "apikey"
    return named_secret or bool(_SECRET_VALUE.search(value))


def ref(doc: Mapping[str, Any]) -> str:
    return f"http:{_method(doc)} {_endpoint(doc)}"


def _endpoint(doc: Mapping[str, Any]) -> str:
    """The URL without its query, which is for the endpoint, not for the ledger or a log."""
    parts = urlsplit(doc["url"])
    return f"{parts.scheme}://{parts.netloc}{parts.path}"


def _method(doc: Mapping[str, Any]) -> str:
    return str(doc.get("method") or "POST").upper()


class _RefuseRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_opener = urllib.request.build_opener(_RefuseRedirects)


def run(
    doc: Mapping[str, Any], envelope: Envelope, timeout_secs: float, clients: AwsClients
) -> TargetOutcome:
    deadline = time.monotonic() + timeout_secs
    request = urllib.request.Request(
        doc["url"],
        data=envelope_json(envelope).encode("utf-8"),
        method=_method(doc),
        headers={
            **(doc.get("headers") or {}),
            "Content-Type": "application/json",
            "User-Agent": f"cronledger/{__version__}",
        },
    )
    try:
        try:
            response: HTTPResponse = _opener.open(request, timeout=max(timeout_secs, 0.001))
        except urllib.error.HTTPError as refused:
            # Not 2xx: the answer still has a body worth keeping as the excerpt.
            with refused:
                body = _read_excerpt(refused, deadline)
                moved = refused.headers.get("Location")
            error = f"HTTP {refused.code} {refused.reason}"
            if moved:
                error += f" (redirects are not followed; it points to {moved})"
            return TargetOutcome(ok=False, result=body, error=error)
        with response:
            return TargetOutcome(ok=True, result=_read_excerpt(response, deadline))
    except TimeoutError:
        return timed_out(timeout_secs)
    except urllib.error.URLError as unreachable:
        if isinstance(unreachable.reason, TimeoutError):
            return timed_out(timeout_secs)
        return TargetOutcome(
            ok=False, error=f"could not reach {_endpoint(doc)}: {unreachable.reason}"
        )


def _read_excerpt(body: IO[bytes], deadline: float) -> str:
    """Read no more of the answer than the excerpt keeps, and no longer than the budget."""
    chunks: list[bytes] = []
    kept = 0
    while kept <= RESULT_EXCERPT_BYTES:
        if time.monotonic() > deadline:
            raise TimeoutError
        chunk = body.read(16 * 1024)
        if not chunk:
            break
        chunks.append(chunk)
        kept += len(chunk)
    return b"".join(chunks).decode("utf-8", errors="replace")


KIND = TargetKind(
    type="http",
    keys=frozenset({"type", "url", "method", "headers"}),
    errors=errors,
    ref=ref,
    run=run,
)
