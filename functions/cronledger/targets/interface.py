"""The one interface every target type implements, and the outcome every run reports.

A target type is four things: the keys its document may hold, a check that lists every problem
with a document, a short reference for the ledger, and a run. A run never raises for anything
the target did: failures, timeouts and refusals come back as a `TargetOutcome`, so the executor
always has something to settle with.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from cronledger.errors import FieldError
from cronledger.targets.clients import AwsClients
from cronledger.targets.envelope import Envelope

RESULT_EXCERPT_BYTES = 64 * 1024
_TRUNCATION_MARK = "…[truncated]"


@dataclass(frozen=True, slots=True)
class TargetOutcome:
    """`ok` per the success rule of the target type; `result` is an excerpt of what the target
    answered (already truncated), `error` says why it failed."""

    ok: bool
    result: str | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class TargetKind:
    type: str
    keys: frozenset[str]
    errors: Callable[[Mapping[str, Any]], list[FieldError]]
    ref: Callable[[Mapping[str, Any]], str]
    run: Callable[[Mapping[str, Any], Envelope, float, AwsClients], TargetOutcome]


def truncate_excerpt(text: str | None, limit_bytes: int = RESULT_EXCERPT_BYTES) -> str | None:
    """`text` cut to at most `limit_bytes` of UTF-8, never inside a character, with a visible
    mark when something was cut so nobody mistakes an excerpt for the whole answer."""
    if text is None:
        return None
    encoded = text.encode("utf-8")
    if len(encoded) <= limit_bytes:
        return text
    room = limit_bytes - len(_TRUNCATION_MARK.encode("utf-8"))
    return encoded[:room].decode("utf-8", errors="ignore") + _TRUNCATION_MARK


def timed_out(timeout_secs: float, detail: str | None = None) -> TargetOutcome:
    """The outcome of a target that used its whole budget (SPEC §5: `timed out after N ms`)."""
    message = f"timed out after {round(max(timeout_secs, 0.0) * 1000)} ms"
    return TargetOutcome(ok=False, error=f"{message} ({detail})" if detail else message)
