"""Events onto the installation's EventBridge bus: `source` `cronledger.<installation>`,
`detail-type` the kind's readable form ("Occurrence Failed"), `detail` the event's document.

Each entry, not the call, says whether its event was accepted. A call that fails whole ends the
send: its events and those after it stay in the outbox for the sweep, so an unreachable bus
costs one short timeout, not one per batch. botocore is loaded by the first send, not before.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from cronledger.ledger import Event, Ledger
from cronledger.outbox import Sender, deliver, detail_type, event_json, in_sequence
from cronledger.targets.aws_sdk import entry_refusal
from cronledger.targets.clients import AwsClients, arn_region, default_clients

if TYPE_CHECKING:
    from mypy_boto3_events.type_defs import PutEventsRequestEntryTypeDef

log = logging.getLogger(__name__)

#: The most entries one PutEvents call takes.
PUT_EVENTS_BATCH = 10
#: One try of one call, short: the send after a commit holds up the function that made the
#: event (an executor at its deadline has only its margin); what misses it, the sweep sends.
SEND_TIMEOUT_SECS = 1.0


class EventBridgeSender:
    """A `Sender` to one bus (a name, or an ARN for a bus in another account or region)."""

    def __init__(self, bus: str, installation: str, *, clients: AwsClients | None = None) -> None:
        self.bus = bus
        self.source = f"cronledger.{installation}"
        self._clients = clients

    def send(self, events: Sequence[Event]) -> dict[str, str | None]:
        from botocore.exceptions import BotoCoreError, ClientError

        clients = self._clients or default_clients()
        client = clients.events(arn_region(self.bus), SEND_TIMEOUT_SECS, retried=False)
        ordered = in_sequence(events)
        answers: dict[str, str | None] = {}
        for start in range(0, len(ordered), PUT_EVENTS_BATCH):
            batch = ordered[start : start + PUT_EVENTS_BATCH]
            try:
                response = client.put_events(Entries=[self._entry(e) for e in batch])
            except (BotoCoreError, ClientError) as exc:
                reason = f"{type(exc).__name__}: {exc}"
                answers |= {e.event_id: reason for e in ordered[start:]}
                break
            # Entries answer in the order they were sent.
            for event, entry in zip(batch, response["Entries"], strict=False):
                answers[event.event_id] = entry_refusal(entry)
        return answers

    def _entry(self, event: Event) -> PutEventsRequestEntryTypeDef:
        return {
            "EventBusName": self.bus,
            "Source": self.source,
            "DetailType": detail_type(event.kind),
            "Detail": event_json(event),
            # When it happened (the database's clock), not when a sweep got to send it.
            "Time": event.at,
        }


def send_after_commit(ledger: Ledger, sender: Sender) -> Callable[[Sequence[Event]], None]:
    """An `EventStore.on_events` that sends a commit's events at once; it never raises (the
    change is committed already, and what is not delivered is left for the sweep)."""

    def send(events: Sequence[Event]) -> None:
        try:
            deliver(ledger, sender, events)
        except Exception as exc:
            log.warning("%d event(s) left for the sweep: %s", len(events), exc)

    return send
