"""EventBridge target: the envelope as the `detail` of one event, successful when the bus
accepts the entry. A refused entry comes back in an HTTP 200 with an error code on the entry,
so the entry, not the call, is the answer (`entry_refusal`, which the events' sender shares)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

from pydantic import field_validator

from cronledger.targets.clients import arn_region
from cronledger.targets.envelope import envelope_json
from cronledger.targets.fields import TargetDocument, text
from cronledger.targets.interface import Delivery, TargetOutcome
from cronledger.validation import refused

if TYPE_CHECKING:
    from mypy_boto3_events.type_defs import PutEventsRequestEntryTypeDef

DEFAULT_BUS = "default"
_BUS = re.compile(r"(arn:aws[a-z-]*:events:[a-z0-9-]+:\d{12}:event-bus/)?[/.\-_A-Za-z0-9]{1,256}")


class EventBridgeTarget(TargetDocument):
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

    @classmethod
    def ref(cls, doc: Mapping[str, Any]) -> str:
        return f"eventbridge:{doc.get('event_bus_name') or DEFAULT_BUS}:{doc['source']}"

    @classmethod
    def run(cls, doc: Mapping[str, Any], delivery: Delivery) -> TargetOutcome:
        bus: str = doc.get("event_bus_name") or DEFAULT_BUS
        entry: PutEventsRequestEntryTypeDef = {
            "EventBusName": bus,
            "Source": doc["source"],
            "DetailType": doc["detail_type"],
            "Detail": envelope_json(delivery.envelope),
        }
        client = delivery.clients.events(arn_region(bus), delivery.timeout_secs)
        answer = client.put_events(Entries=[entry])["Entries"][0]
        refusal = entry_refusal(answer)
        if refusal is not None:
            return TargetOutcome(ok=False, error=f"entry refused by {bus}: {refusal}")
        return TargetOutcome(ok=True, result=json.dumps({"EventId": answer.get("EventId")}))


def entry_refusal(entry: Mapping[str, Any]) -> str | None:
    """Why the bus refused one `PutEvents` entry, or None if it took it."""
    if entry.get("EventId") and not entry.get("ErrorCode"):
        return None
    return f"{entry.get('ErrorCode', 'refused')}: {entry.get('ErrorMessage', 'no message')}"
