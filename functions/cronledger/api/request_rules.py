"""What a request must be before any route sees it: one pass over the raw event.

A body must be declared JSON (else 415, which also keeps a web page's simple cross-site
request out), at most `MAX_BODY_BYTES` (413), a JSON object readable by Python and nested at
most `MAX_DEPTH` deep (422 naming where), holding no lone surrogate (400 naming each place).
A body-less request's `Content-Type` is dropped; `HEAD` is answered as `GET` without a body.
Text that is not JSON at all is left to the resolver's validation (422).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Iterator, Mapping
from itertools import islice
from typing import Any, Final

from cronledger.errors import FieldError, ValidationFailed
from cronledger.validation import child, json_type

JSON_MEDIA_TYPE = "application/json"
#: How many invalid-Unicode places one answer lists.
_MAX_REPORTED = 20
#: The largest body any route takes: room for a 256 KiB payload escaped and indented.
MAX_BODY_BYTES: Final = 1 << 20
#: How deeply a body's objects and arrays may nest (the body is the first level): far more
#: than any document needs, little enough that whatever is accepted can be stored and served.
MAX_DEPTH: Final = 64
TOO_DEEP: Final = (
    f"objects and arrays nest at most {MAX_DEPTH} levels deep (the body is the first); store "
    "deeper data elsewhere and pass a reference to it"
)


class UnsupportedMediaType(Exception):
    """A body that is not declared as JSON."""


class MalformedBody(Exception):
    """A body that is JSON but not an object (`type_mismatch`), or not UTF-8 text, or nested
    too deeply (`invalid`); its one error says where."""

    def __init__(self, message: str, code: str = "invalid", path: str = "body") -> None:
        super().__init__(message)
        self.errors = [FieldError(path, code, message)]


class BodyTooLarge(Exception):
    """A body over `MAX_BODY_BYTES`."""

    def __init__(self, size: int) -> None:
        message = f"the body is {size} bytes; at most {MAX_BODY_BYTES} are accepted"
        super().__init__(message)
        self.errors = [FieldError("body", "too_long", message)]


def screen(event: Mapping[str, Any]) -> dict[str, Any]:
    """The event as the resolver should see it (a `HEAD` as a `GET`), or one of the exceptions
    above (or `ValidationFailed` for invalid Unicode), which the error mapping answers."""
    screened = dict(event)
    http = dict(event.get("requestContext", {}).get("http", {}))
    if is_head(http):
        http["method"] = "GET"
        screened["requestContext"] = {**event.get("requestContext", {}), "http": http}
    body = _body_bytes(event)
    if len(body) > MAX_BODY_BYTES:
        raise BodyTooLarge(len(body))
    if body:
        headers = {str(k).lower(): v for k, v in (event.get("headers") or {}).items()}
        media_type = str(headers.get("content-type", "")).split(";", 1)[0].strip().lower()
        if media_type != JSON_MEDIA_TYPE:
            raise UnsupportedMediaType
        # The resolver's own check is case-sensitive; the media type is not (RFC 9110).
        screened["headers"] = {**headers, "content-type": JSON_MEDIA_TYPE}
        _check_document(body)
    elif event.get("headers"):
        # Nothing to label: a server's default (wsgiref says `text/plain`) must not make a
        # route whose body is optional refuse a request that sent none.
        screened["headers"] = {
            k: v for k, v in event["headers"].items() if str(k).lower() != "content-type"
        }
    return screened


def is_head(http: Mapping[str, Any]) -> bool:
    """Whether the request (its event's `requestContext.http`) is a `HEAD`, answered bodiless."""
    return str(http.get("method", "")).upper() == "HEAD"


def _body_bytes(event: Mapping[str, Any]) -> bytes:
    raw = event.get("body") or ""
    if not event.get("isBase64Encoded"):
        return str(raw).encode("utf-8", "surrogatepass")
    try:
        return base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError):
        raise MalformedBody("the body is not valid base64") from None


def _check_document(body: bytes) -> None:
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise MalformedBody("the body is not UTF-8 text") from None
    try:
        document = json.loads(text)
    except json.JSONDecodeError:
        return  # not JSON: the resolver's validation says why
    except RecursionError:
        raise MalformedBody(TOO_DEEP) from None
    except ValueError:  # JSON, but an integer longer than Python reads (4300 digits)
        raise MalformedBody("the body holds a number too long to read (over 4300 digits)") from None
    if not isinstance(document, dict):
        raise MalformedBody(
            f"the body must be a JSON object, not {json_type(document)}", "type_mismatch"
        )
    deep = too_deep(document)
    if deep is not None:
        raise MalformedBody(TOO_DEEP, path=deep)
    if not _ESCAPED_SURROGATE.search(text):
        return  # JSON text that is UTF-8 can hold a lone surrogate only as a \ud8xx escape
    problems = [
        FieldError(
            path,
            "invalid",
            f"{'a key' if is_key else 'the text'} is not valid Unicode (it holds a lone "
            "surrogate); send UTF-8 text",
        )
        for path, is_key in islice(_invalid_text(document), _MAX_REPORTED)
    ]
    if problems:
        raise ValidationFailed(problems, "invalid text")


def walk(value: Any) -> Iterator[tuple[str, Any, Any, int]]:
    """Every place in `value` (itself the first level, at path "") in document order, as
    (path, key, item, depth); an object or array deeper than `MAX_DEPTH` is met, not entered.
    Found without recursion: JSON may nest deeper than Python's stack."""
    stack: list[tuple[str, Any, Any, int]] = [("", None, value, 1)]
    while stack:
        path, key, item, depth = stack.pop()
        yield path, key, item, depth
        if isinstance(item, Mapping | list) and depth <= MAX_DEPTH:
            pairs = item.items() if isinstance(item, Mapping) else enumerate(item)
            stack.extend(reversed([(_child(path, k), k, v, depth + 1) for k, v in pairs]))


def too_deep(value: Any) -> str | None:
    """The path of the first object or array nested more than `MAX_DEPTH` deep in `value`."""
    for path, _, item, depth in walk(value):
        if depth > MAX_DEPTH and isinstance(item, Mapping | list):
            return path or "body"
    return None


def _invalid_text(document: dict[str, Any]) -> Iterator[tuple[str, bool]]:
    """Every place (path, whether it is a key) holding a lone surrogate, in document order."""
    for path, key, item, _ in walk(document):
        if isinstance(key, str) and _has_surrogate(key):
            yield path, True
        if isinstance(item, str) and _has_surrogate(item):
            yield path, False


def _child(path: str, key: Any) -> str:
    return child(path, key if isinstance(key, int) else printable(key))


_SURROGATE = re.compile("[\ud800-\udfff]")
_ESCAPED_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]")


def _has_surrogate(text: str) -> bool:
    return not text.isascii() and _SURROGATE.search(text) is not None


def storable_text(text: str) -> bool:
    """Text PostgreSQL can store: no NUL, no lone surrogate."""
    return "\x00" not in text and not _has_surrogate(text)


def printable(text: str) -> str:
    """`text` with lone surrogates written as `\\udxxx`, so it can be shown and encoded."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


#: A path parameter as the Powertools resolver matches it: a wider pattern would take a path no
#: route matches (an id holding `"`, say) for a wrong method, a 405, where it is a 404.
_PARAMETER = r"[-._~()'!*:@,;=+&$%<> \[\]{}|^\w]+"


class RouteMethods:
    """Which methods each path of the API answers, from its OpenAPI document."""

    def __init__(self, document: Mapping[str, Any], extra: Mapping[str, str] = {}) -> None:
        self._routes: list[tuple[re.Pattern[str], frozenset[str]]] = []
        paths = {path: {m.upper() for m in item} for path, item in document["paths"].items()}
        for path, method in extra.items():
            paths.setdefault(path, set()).add(method)
        for path, methods in paths.items():
            pattern = re.sub(r"\\\{[^/]+?\\\}", lambda _: _PARAMETER, re.escape(path))
            allowed = methods | ({"HEAD"} if "GET" in methods else set())
            self._routes.append((re.compile(pattern), frozenset(allowed)))

    def allowed(self, path: str) -> frozenset[str]:
        """The methods `path` answers; empty when no route has that path."""
        return frozenset().union(*(m for pattern, m in self._routes if pattern.fullmatch(path)))
