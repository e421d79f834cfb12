"""The one interface every target type implements, and the outcome every run reports.

A target type is three things: its document's model (the keys it may hold, and a check that
lists every problem with a document), a short reference for the ledger, and a run. The check and the run both get the
operator's `TargetPolicy`, the only source of what a document may reach beyond its target. A run
never raises for anything the target did: failures, timeouts and refusals come back as a
`TargetOutcome`, so the executor always has something to settle with.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from cronledger.targets.clients import AwsClients
from cronledger.targets.envelope import Envelope
from cronledger.targets.fields import TargetDocument
from cronledger.targets.policy import TargetPolicy


@dataclass(frozen=True, slots=True)
class TargetOutcome:
    """`ok` per the success rule of the target type; `result` is an excerpt of what the target
    answered (already truncated), `error` says why it failed."""

    ok: bool
    result: str | None = None
    error: str | None = None
    #: Where it failed, when the target can say: a Python target's last traceback frames.
    detail: str | None = None
    #: Another attempt would fail the same way (the target is gone, or the operator's policy
    #: no longer allows it): the occurrence fails at once, without its retries.
    permanent: bool = False


@dataclass(frozen=True, slots=True)
class TargetKind:
    #: The document's model: its keys, its checks (`targets.fields`).
    model: type[TargetDocument]
    ref: Callable[[Mapping[str, Any]], str]
    run: Callable[[Mapping[str, Any], Envelope, float, AwsClients, TargetPolicy], TargetOutcome]

    @property
    def type(self) -> str:
        return self.model.type_name


def timed_out(timeout_secs: float, detail: str | None = None) -> TargetOutcome:
    """The outcome of a target that used its whole budget (docs/guarantees.md#attempt: `timed out after N ms`)."""
    message = f"timed out after {round(max(timeout_secs, 0.0) * 1000)} ms"
    return TargetOutcome(ok=False, error=f"{message} ({detail})" if detail else message)
