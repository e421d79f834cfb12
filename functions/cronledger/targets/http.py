"""HTTP target: the envelope as a JSON request body, successful on a 2xx answer.

What a URL may reach is the operator's choice (`addresses`): a literal address is judged when
the channel is saved, every host again after resolution at each attempt, and the request goes
to the address judged (`pinned_http`). A URL is printable ASCII: one spelling stored, shown and
sent. Documents are stored in plain text, so a credential goes in `secret_headers`, by
reference, sent to no host its binding excludes and scrubbed from what the endpoint echoes.
GET and HEAD send the run's identity in `X-Cronledger-*` headers instead of a body. Redirects
are not followed: a 3xx fails, naming where to.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping
from typing import Annotated, Any, Literal
from urllib.parse import SplitResult, parse_qsl, urlsplit

from pydantic import BeforeValidator, Field, ValidationError, ValidationInfo, field_validator
from pydantic_core import InitErrorDetails

from cronledger import __version__
from cronledger.targets import pinned_http
from cronledger.targets.addresses import Address, literal_address, refusal
from cronledger.targets.envelope import Envelope, envelope_json
from cronledger.targets.fields import TargetDocument, policy_of, text
from cronledger.targets.interface import Delivery, TargetOutcome, timed_out
from cronledger.targets.policy import HTTP_ALLOW_NETWORKS, TargetPolicy
from cronledger.targets.secret_looking import looks_secret
from cronledger.targets.secrets import (
    EXAMPLES,
    SecretUnavailable,
    host_refusal,
    reference_problem,
    resolve_secret,
    scrub,
    secret_hosts,
)
from cronledger.validation import refused

METHODS = ("POST", "PUT", "PATCH", "GET", "HEAD")
#: Methods sent without a body: the trigger's identity travels in headers.
BODYLESS = ("GET", "HEAD")
_MAX_HEADERS = 50
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
#: A header value: printable ASCII and tabs (RFC 9110 field-content without obs-text).
_HEADER_VALUE = re.compile(r"[\t\x20-\x7e]*")
_SET_BY_CRONLEDGER = {"host", "content-length", "content-type", "transfer-encoding", "connection"}
_CREDENTIAL_HINT = (
    "target settings are stored in plain text, so give it as a secret_headers reference "
    f"(e.g. {EXAMPLES['env']!r})"
)


def _mapping(example: str) -> Any:
    def check(value: Any, info: ValidationInfo) -> Any:
        if not isinstance(value, Mapping):
            raise refused("type_mismatch", f"{info.field_name} must be an object, e.g. {example}")
        return dict(value)

    return Annotated[dict[str, Any], BeforeValidator(check)]


_SECRET_EXAMPLE = f'{{"Authorization": "{EXAMPLES["env"]}"}}'


class HttpTarget(TargetDocument):
    type: Literal["http"]
    url: text("https://example.com/hooks/nightly", 2048)  # type: ignore[valid-type]
    method: text("POST", 16) = Field(None, description=", ".join(METHODS))  # type: ignore[valid-type]
    headers: _mapping('{"X-Team": "ops"}') = Field(default_factory=dict)  # type: ignore[valid-type]
    secret_headers: _mapping(_SECRET_EXAMPLE) = Field(default_factory=dict)  # type: ignore[valid-type]

    @field_validator("url")
    @classmethod
    def _reachable(cls, url: str, info: ValidationInfo) -> str:
        _raise_all(("", ("invalid", problem)) for problem in _url_problems(url, policy_of(info)))
        return url

    @field_validator("method")
    @classmethod
    def _known(cls, method: str | None) -> str | None:
        if method is not None and method.upper() not in METHODS:
            raise refused(
                "invalid",
                f"method must be one of {', '.join(METHODS)} (GET and HEAD send the run's "
                "identity in X-Cronledger-* headers instead of the envelope)",
            )
        return method

    @field_validator("headers")
    @classmethod
    def _plain(cls, headers: dict[str, Any]) -> dict[str, Any]:
        _raise_all(
            (name, problem)
            for name, value in headers.items()
            if (problem := _header_name_problem(name) or _plain_problem(name, value))
        )
        return headers

    @field_validator("secret_headers")
    @classmethod
    def _references(cls, secrets: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        headers, url = info.data.get("headers", {}), info.data.get("url")
        plain = {str(name).lower() for name in headers}
        host = urlsplit(url).hostname if url else None  # a url in `info.data` passed its checks
        found: list[tuple[str, tuple[str, ...]]] = [
            (name, problem)
            for name, reference in secrets.items()
            if (problem := _secret_problem(name, reference, plain, host, policy_of(info)))
        ]
        if len(headers) + len(secrets) > _MAX_HEADERS:
            found.insert(0, ("", ("too_long", f"at most {_MAX_HEADERS} headers in all", "headers")))
        _raise_all(found)
        return secrets

    @classmethod
    def ref(cls, doc: Mapping[str, Any]) -> str:
        return f"http:{_method(doc)} {_endpoint(urlsplit(doc['url']))}"

    @classmethod
    def run(cls, doc: Mapping[str, Any], delivery: Delivery) -> TargetOutcome:
        parts, policy, clients = urlsplit(doc["url"]), delivery.policy, delivery.clients
        references: dict[str, str] = doc.get("secret_headers") or {}
        try:
            secrets = {name: resolve_secret(r, policy, clients) for name, r in references.items()}
            refusals = [
                refusal
                for r in references.values()
                if policy.secrets == "aws"
                and (refusal := host_refusal(r, parts.hostname or "", secret_hosts(r, clients)))
            ]
        except SecretUnavailable as exc:
            return TargetOutcome(ok=False, error=str(exc))
        if refusals:
            return TargetOutcome(ok=False, error=f"refused: {'; '.join(refusals)}")
        unsendable = [name for name, value in secrets.items() if not _HEADER_VALUE.fullmatch(value)]
        if unsendable:
            return TargetOutcome(
                ok=False,
                error=f"the secret for {', '.join(unsendable)} is not one line of printable ASCII",
            )
        if _method(doc) in BODYLESS:
            body, sent = None, identity_headers(delivery.envelope)
        else:
            body, sent = envelope_json(delivery.envelope).encode("utf-8"), {"Content-Type": JSON}
        headers = {**secrets, **sent}
        outcome = post(doc, body, delivery.timeout_secs, delivery.deadline, headers, policy)
        values = list(secrets.values())
        result, error = scrub(outcome.result, values), scrub(outcome.error, values)
        return dataclasses.replace(outcome, result=result, error=error)


def _raise_all(problems: Iterable[tuple[str, tuple[str, ...]]]) -> None:
    """Raise each `(key, problem)`, a problem being `refused`'s arguments, at its key of the
    mapping being checked ("" for itself)."""
    found: list[InitErrorDetails] = [
        {"type": refused(*problem), "loc": (key,) if key else (), "input": None}
        for key, problem in problems
    ]
    if found:
        raise ValidationError.from_exception_data("headers", found)


def _url_problems(url: str, policy: TargetPolicy) -> list[str]:
    if any(ord(c) < 0x21 or ord(c) == 0x7F for c in url):
        return ["url must not contain spaces or control characters"]
    if not url.isascii():
        return [
            "url must be ASCII: percent-encode other characters and write an international "
            "domain name in its xn-- form"
        ]
    try:
        parts = urlsplit(url)
        hostname = parts.hostname
    except ValueError as exc:  # an unclosed `[`, or a bracketed host that is no IPv6 address
        return [f"url cannot be read ({exc}); write an IPv6 host as [::1]"]
    if parts.scheme not in ("http", "https") or not hostname:
        return ["url must be an absolute http:// or https:// URL"]
    if parts.username is not None or parts.password is not None:
        return ["url must not carry a user name or password"]
    try:
        port = parts.port  # raises for a port that is not a number in 0..65535
    except ValueError:
        port = 0
    if port == 0:
        return ["url's port must be a number from 1 to 65535"]
    problems = []
    address = literal_address(hostname)
    refused_address = None if address is None else refusal(address, policy.http_allow_networks)
    if refused_address is not None:
        problems.append(_refused_address(hostname, *refused_address))
    problems.extend(
        f"query parameter {name!r} looks like a credential; target settings are stored in "
        "plain text, so send it as a secret_headers header instead"
        for name, value in parse_qsl(parts.query, keep_blank_values=True)
        if looks_secret(name, value)
    )
    return problems


def _refused_address(host: str, address: Address, reason: str) -> str:
    named = host if host == str(address) else f"{host} ({address})"
    return (
        f"{named} is {reason}; http targets reach only public addresses unless "
        f"{HTTP_ALLOW_NETWORKS} lists the network"
    )


def _header_name_problem(name: Any) -> tuple[str, str] | None:
    if not isinstance(name, str) or not _TOKEN.fullmatch(name) or len(name) > 256:
        return "invalid", "a header name is letters, digits and -_.!#$%&'*+^`|~"
    if name.lower() in _SET_BY_CRONLEDGER:
        return "invalid", f"{name} is set by cronledger; remove it"
    return None


def _plain_problem(name: str, value: Any) -> tuple[str, str] | None:
    if not isinstance(value, str):
        return "type_mismatch", f"header {name} must be a string"
    if len(value) > 4096:
        return "too_long", f"header {name} must be at most 4096 characters"
    if not _HEADER_VALUE.fullmatch(value):
        return (
            "invalid",
            f"header {name} must be one line of printable ASCII (no control characters)",
        )
    if looks_secret(name, value):
        return "invalid", f"header {name} looks like a credential; {_CREDENTIAL_HINT}"
    return None


def _secret_problem(
    name: Any, reference: Any, plain: set[str], host: str | None, policy: TargetPolicy
) -> tuple[str, str] | None:
    if problem := _header_name_problem(name):
        return problem
    if name.lower() in plain:
        return "invalid", f"{name} is also in headers; give it in one place"
    if not isinstance(reference, str):
        return "type_mismatch", f"the reference for {name} must be a string"
    if len(reference) > 2048:
        return "too_long", "a secret reference is at most 2048 characters"
    if refusal := reference_problem(reference, policy):
        return "invalid", f"{refusal}, e.g. {EXAMPLES[policy.secrets]!r}"
    if policy.secret_hosts is not None and host:
        refusal = host_refusal(reference, host, policy.secret_hosts(reference))
        return None if refusal is None else ("invalid", refusal)
    return None


def _endpoint(parts: SplitResult) -> str:
    """The URL without its query, which is for the endpoint, not for the ledger or a log."""
    return f"{parts.scheme}://{parts.netloc}{parts.path}"


JSON = "application/json"


def identity_headers(envelope: Envelope) -> dict[str, str]:
    """What a bodyless request says of the run: the idempotency key and the attempt."""
    trigger = envelope["trigger"]
    return {
        "X-Cronledger-Occurrence-Id": trigger["occurrence_id"],
        "X-Cronledger-Scheduled-For": trigger["scheduled_for"],
        "X-Cronledger-Attempt": str(trigger["attempt"]),
        "X-Cronledger-Trigger": trigger["type"],
    }


def _method(doc: Mapping[str, Any]) -> str:
    return str(doc.get("method") or "POST").upper()


#: Answers that say the endpoint itself does not exist: another attempt would be told the same.
GONE_STATUSES = frozenset({404, 410})


def post(
    doc: Mapping[str, Any],
    body: bytes | None,
    timeout_secs: float,
    deadline: float,
    headers: Mapping[str, str],
    policy: TargetPolicy,
) -> TargetOutcome:
    """Send `body` (None: a bodyless GET or HEAD) to the document's URL with the document's
    headers and then `headers` (secrets, and the body's type or the run's identity), at an
    address the policy allows, the connection pinned to it; 2xx is success."""
    parts = urlsplit(doc["url"])
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        addresses = policy.resolver(host, port)
    except OSError as exc:
        return TargetOutcome(ok=False, error=f"could not resolve {host}: {exc}")
    for address in addresses:
        if (refused := refusal(address, policy.http_allow_networks)) is not None:
            judged, reason = refused
            if judged != address:
                reason = f"{reason} ({judged})"
            return TargetOutcome(
                ok=False,
                error=f"refused: {_refused_address(host, address, reason)}",
                permanent=True,
            )
    try:
        answer = pinned_http.send(
            scheme=parts.scheme,
            host=host,
            port=port,
            addresses=addresses,
            method=_method(doc),
            target=(parts.path or "/") + (f"?{parts.query}" if parts.query else ""),
            headers={
                **(doc.get("headers") or {}),
                **headers,
                "Host": parts.netloc,
                "User-Agent": f"cronledger/{__version__}",
            },
            body=body,
            deadline=deadline,
        )
    except pinned_http.TimedOut:
        return timed_out(timeout_secs)
    except Exception as exc:  # no address answered, TLS or protocol failures: the endpoint failed
        return TargetOutcome(ok=False, error=f"could not reach {_endpoint(parts)}: {exc}")
    if 200 <= answer.status < 300:
        return TargetOutcome(ok=True, result=answer.body)
    error = f"HTTP {answer.status} {answer.reason}".rstrip()
    if answer.location:
        error += f" (redirects are not followed; it points to {answer.location})"
    gone = answer.status in GONE_STATUSES
    return TargetOutcome(ok=False, result=answer.body, error=error, permanent=gone)
