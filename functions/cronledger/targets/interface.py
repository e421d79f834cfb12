"""What a target run reports, and what one delivery is given. A run never raises for anything
the target did: failures, timeouts and refusals come back as a `TargetOutcome`, so the executor
always has something to settle the occurrence with."""

from __future__ import annotations

from dataclasses import dataclass

from cronledger.targets.clients import AwsClients
from cronledger.targets.envelope import Envelope
from cronledger.targets.policy import TargetPolicy


@dataclass(frozen=True, slots=True)
class TargetOutcome:
    """`ok` per the success rule of the target type; `result` is an excerpt of what the target
    answered, `error` says why it failed, `detail` where (a Python target's last frames).
    `permanent`: another attempt would fail the same way, so the occurrence fails at once."""

    ok: bool
    result: str | None = None
    error: str | None = None
    detail: str | None = None
    permanent: bool = False


@dataclass(frozen=True, slots=True)
class Delivery:
    """One attempt's delivery: the envelope, its time budget (and the monotonic deadline it
    ends at), the AWS clients and the operator's policy (it may have narrowed since the save)."""

    envelope: Envelope
    timeout_secs: float
    deadline: float
    clients: AwsClients
    policy: TargetPolicy


def timed_out(timeout_secs: float, detail: str | None = None) -> TargetOutcome:
    """The outcome of a target that used its whole budget: `timed out after N ms`."""
    message = f"timed out after {round(max(timeout_secs, 0.0) * 1000)} ms"
    return TargetOutcome(ok=False, error=f"{message} ({detail})" if detail else message)
