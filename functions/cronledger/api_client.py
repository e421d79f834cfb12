"""The HTTP client the command line, the console proxy and a deploy's channels talk to the API
through: they tell exactly what the API tells, never reading the database. An API Gateway
endpoint (`*.execute-api.<region>.amazonaws.com`) is IAM-authorised, so each request to
one is SigV4-signed for `execute-api` in the region the host names, with botocore's default
credential chain.
"""

from __future__ import annotations

import http.client
import json
import re
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import quote, urlencode, urlsplit

from cronledger import __version__

DEFAULT_API_URL: Final = "http://127.0.0.1:8080"
PREFIX: Final = "/api/v1/admin"
"""Where every admin route lives; `/health` and `/openapi.json` sit at the root."""
_EXECUTE_API: Final = re.compile(r"[a-z0-9]+\.execute-api\.([a-z0-9-]+)\.amazonaws\.com(\.cn)?")


class ApiError(Exception):
    """The API answered with an error: its status, code, message and field details."""

    def __init__(self, status: int, body: Any) -> None:
        error = body.get("error") if isinstance(body, dict) else None
        if isinstance(error, dict):
            self.code = str(error.get("code", "error"))
            self.details: list[dict[str, Any]] = list(error.get("details") or [])
            # The API's message ends with its details; the CLI prints them one a line instead.
            self.listed = "; ".join(f"{d.get('path')}: {d.get('message')}" for d in self.details)
            self.message = str(error.get("message", "")).removesuffix(f": {self.listed}")
        else:
            # Not our envelope: API Gateway itself (e.g. 403 for a bad signature) or a proxy.
            self.code = "http_error"
            self.message = str(body.get("message", body) if isinstance(body, dict) else body)
            self.details, self.listed = [], ""
        self.status = status
        self.body = body
        super().__init__(f"{status} {self.code}: {self.message}")


class Unreachable(Exception):
    """No answer at all: nothing listening, DNS, a timeout, or no credentials to sign with."""


#: Sends a prepared request and returns `(status, headers, body)`; replaceable in tests.
Send = Callable[[urllib.request.Request, float], tuple[int, Mapping[str, str], bytes]]


def _urlopen(
    request: urllib.request.Request, timeout: float
) -> tuple[int, Mapping[str, str], bytes]:
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return int(response.status), dict(response.headers.items()), bytes(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers.items()), exc.read()


def segment(value: str) -> str:
    """`value` as one path segment."""
    return quote(value, safe="")


def check_api_url(url: str) -> str:
    """The URL without a trailing slash, or ValueError saying what an API URL looks like."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{url!r} is not an http:// or https:// URL, e.g. {DEFAULT_API_URL}")
    return url.rstrip("/")


@dataclass
class ApiClient:
    base_url: str
    send: Send = _urlopen
    timeout: float = 30.0

    def __post_init__(self) -> None:
        self.base_url = self.base_url.rstrip("/")

    def call(
        self, method: str, path: str, query: Mapping[str, Any] | None = None, body: Any = None
    ) -> Any:
        """The decoded JSON answer (None for 204); `ApiError` or `Unreachable` otherwise."""
        given = {k: v for k, v in (query or {}).items() if v is not None}
        target = path + (f"?{urlencode(given, doseq=True)}" if given else "")
        data = None if body is None else json.dumps(body).encode()
        status, _headers, raw = self.exchange(method, target, data)
        try:
            answer = json.loads(raw) if raw else None
        except ValueError:
            answer = raw.decode("utf-8", "replace").strip()
        if status >= 400:
            raise ApiError(status, answer)
        return answer

    def exchange(
        self, method: str, target: str, data: bytes | None
    ) -> tuple[int, Mapping[str, str], bytes]:
        """Send `method target` (a path with its query string) with a JSON body, signed when
        the endpoint is API Gateway; the raw answer. `Unreachable` when nothing answers."""
        url = self.base_url + target
        headers = {"Accept": "application/json", "User-Agent": f"cronledger/{__version__}"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        gateway = _EXECUTE_API.fullmatch(urlsplit(url).hostname or "")
        if gateway is not None:
            headers = self._signed(method, url, data, headers, gateway.group(1))
        request = urllib.request.Request(url, data=data, headers=headers, method=method)
        try:
            return self.send(request, self.timeout)
        except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
            # HTTPException: an answer that is no HTTP (a peer that hung up mid-answer, say).
            reason = getattr(exc, "reason", exc)
            raise Unreachable(
                f"cannot reach the cronledger API at {self.base_url}: {reason}. Is it running "
                "(`cronledger dev`)? Point --api-url or CRONLEDGER_API_URL at it."
            ) from None

    def _signed(
        self, method: str, url: str, data: bytes | None, headers: dict[str, str], region: str
    ) -> dict[str, str]:
        import botocore.session
        from botocore.auth import SigV4Auth
        from botocore.awsrequest import AWSRequest

        credentials = botocore.session.get_session().get_credentials()
        if credentials is None:
            raise Unreachable(
                f"{self.base_url} is an IAM-authorised API Gateway endpoint and no AWS "
                "credentials were found (environment, ~/.aws, SSO or an instance role)"
            )
        request = AWSRequest(method=method, url=url, data=data, headers=headers)
        SigV4Auth(credentials, "execute-api", region).add_auth(request)
        return dict(request.headers.items())
