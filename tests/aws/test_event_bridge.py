"""Events onto the installation's EventBridge bus (moto): what a rule on the bus forwards is
the event as the ledger wrote it, and only what the bus accepted leaves the outbox."""

from __future__ import annotations

from dataclasses import replace

import pytest

from cronledger.aws.events import EventBridgeSender
from cronledger.ledger import Event, Ledger
from cronledger.outbox import Delivery, deliver
from cronledger.targets.clients import AwsClients
from tests.aws.bus import (
    BUS,
    INSTALLATION,
    SOURCE,
    bus_to_queue,
    failed_on_its_last_attempt,
    received as received_by,
)


@pytest.fixture
def made(ledger: Ledger, monkeypatch: pytest.MonkeyPatch) -> list[Event]:
    """The events the ledger's commits announce, as the function that made them gets them."""
    announced: list[Event] = []
    monkeypatch.setattr(ledger.events, "on_events", announced.extend)
    return announced


def test_a_failed_occurrence_reaches_the_bus_as_its_document_and_leaves_the_outbox(
    aws: None, ledger: Ledger, made: list[Event]
) -> None:
    # Given the installation's bus, forwarding its events to a queue, and an occurrence
    # that failed on its last attempt
    queue = bus_to_queue()
    occurrence = failed_on_its_last_attempt(ledger, "invoices")
    (event,) = made

    # When the function that made the event sends it
    delivery = deliver(ledger, EventBridgeSender(BUS, INSTALLATION), made)

    # Then the receiver gets it under the installation's source, as a readable detail-type,
    # with the ledger's document as its detail
    (message,) = received_by(queue)
    assert message["source"] == SOURCE
    assert message["detail-type"] == "Occurrence Failed"
    assert message["detail"] == event.document
    assert message["detail"]["occurrence_id"] == occurrence.id
    assert message["detail"]["channel_name"] == "invoices"
    assert message["detail"]["error"] == "HTTP 503 from billing"

    # And the event is delivered: nothing is left for the sweep
    assert delivery == Delivery(delivered=1)
    assert ledger.events.outbox().undelivered == 0
    (listed,) = ledger.events.list_events().data
    assert listed.delivered_at is not None and listed.last_error is None


def test_more_events_than_one_call_takes_all_arrive_and_all_are_marked_delivered(
    aws: None, ledger: Ledger, made: list[Event]
) -> None:
    # Given twelve channels whose occurrences failed (PutEvents takes ten entries a call)
    queue = bus_to_queue()
    for n in range(12):
        failed_on_its_last_attempt(ledger, f"ledger-{n:02}")

    # When they are sent together
    delivery = deliver(ledger, EventBridgeSender(BUS, INSTALLATION), made)

    # Then every one arrived, once, and none waits in the outbox
    assert len(made) == 12
    assert sorted(m["detail"]["event_id"] for m in received_by(queue)) == sorted(
        e.event_id for e in made
    )
    assert delivery == Delivery(delivered=12)
    assert ledger.events.outbox().undelivered == 0


def test_an_entry_the_bus_refuses_stays_in_the_outbox_with_its_error_and_the_rest_are_delivered(
    aws: None, ledger: Ledger, made: list[Event]
) -> None:
    # Given two failed occurrences, one of whose entries the bus refuses (it has no
    # detail-type): PutEvents answers the call, and the refusal on that entry alone
    queue = bus_to_queue()
    failed_on_its_last_attempt(ledger, "invoices")
    failed_on_its_last_attempt(ledger, "payroll")
    accepted, refused = made
    sent = [accepted, replace(refused, kind="")]

    # When they are sent
    delivery = deliver(ledger, EventBridgeSender(BUS, INSTALLATION), sent)

    # Then the accepted one arrived and left the outbox; the refused one waits with the
    # bus's reason
    assert [m["detail"]["event_id"] for m in received_by(queue)] == [accepted.event_id]
    assert delivery == Delivery(delivered=1, failed=1)
    assert ledger.events.outbox().undelivered == 1
    rows = {e.event_id: e for e in ledger.events.list_events().data}
    assert rows[accepted.event_id].delivered_at is not None
    assert rows[refused.event_id].delivered_at is None
    assert (rows[refused.event_id].last_error or "").startswith("InvalidArgument")


def test_a_bus_that_cannot_be_reached_leaves_every_event_in_the_outbox_for_the_sweep(
    aws: None, ledger: Ledger, made: list[Event]
) -> None:
    # Given failed occurrences, and an EventBridge endpoint nothing listens on
    failed_on_its_last_attempt(ledger, "invoices")
    failed_on_its_last_attempt(ledger, "payroll")
    unreachable = AwsClients(endpoint_url="http://127.0.0.1:9")

    # When they are sent
    delivery = deliver(ledger, EventBridgeSender(BUS, INSTALLATION, clients=unreachable), made)

    # Then neither is delivered, and each waits with why
    assert delivery == Delivery(failed=2)
    assert ledger.events.outbox().undelivered == 2
    assert all(
        e.delivered_at is None and "EndpointConnectionError" in (e.last_error or "")
        for e in ledger.events.list_events().data
    )
