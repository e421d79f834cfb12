"""EventBridge target: the envelope as the `detail` of one event, successful when the bus
accepts the entry (`FailedEntryCount` 0). A refused entry arrives as an HTTP 200 with an error
code on the entry, so the entry, not the call, is the answer."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from pydantic import field_validator

from cronledger.targets.clients import AwsClients, arn_region
from cronledger.targets.envelope import Envelope, envelope_json
from cronledger.targets.fields import TargetDocument, text
from cronledger.targets.interface import TargetKind, TargetOutcome
from cronledger.targets.policy import TargetPolicy
from cronledger.validation import refused

DEFAULT_BUS = "default"
_BUS = re.compile(r"(arn:aws[a-z-]*:events:[a-z0-9-]+:\d{12}:event-bus/)?[/.\-_A-Za-z0-9]{1,256}")


class EventBridgeTarget(TargetDocument):
    type_name: ClassVar[str] = "eventbridge"

    type: Literal["eventbridge"]
    event_bus_name: text(  # type: ignore[valid-type]
        "ops-events", 1600, _BUS, "must be an event bus name or ARN"
    ) = None
    source: text("com.example.reports", 256)  # type: ignore[valid-type]
    detail_type: text("nightly-report-due", 128)  # type: ignore[valid-type]

    @field_validator("source")
    @classmethod
    def _not_reserved(cls, source: str) -> str:
        if source.startswith("aws."):
            raise refused("invalid", "sources starting with 'aws.' are reserved for AWS")
        if source.startswith("cronledger."):
            # The executor may put on the installation's own bus: a target must not pass for
            # the scheduler telling of a failure.
            raise refused(
                "invalid", "sources starting with 'cronledger.' are the scheduler's events"
            )
        return source


def ref(doc: Mapping[str, Any]) -> str:
    return f"eventbridge:{doc.get('event_bus_name') or DEFAULT_BUS}:{doc['source']}"


def run(
    doc: Mapping[str, Any],
    envelope: Envelope,
    timeout_secs: float,
    clients: AwsClients,
    policy: TargetPolicy,
) -> TargetOutcome:
    bus: str = doc.get("event_bus_name") or DEFAULT_BUS
    region = arn_region(bus)
    response = clients.events(region, timeout_secs).put_events(
        Entries=[
            {
                "EventBusName": bus,
                "Source": doc["source"],
                "DetailType": doc["detail_type"],
                "Detail": envelope_json(envelope),
            }
        ]
    )
    entry = response["Entries"][0]
    if response.get("FailedEntryCount", 0) or "ErrorCode" in entry:
        return TargetOutcome(
            ok=False,
            error=f"entry refused by {bus}: {entry.get('ErrorCode')}: {entry.get('ErrorMessage')}",
        )
    return TargetOutcome(ok=True, result=json.dumps({"EventId": entry.get("EventId")}))


KIND = TargetKind(model=EventBridgeTarget, ref=ref, run=run)
