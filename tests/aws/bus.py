"""An installation's bus in moto with a rule that forwards its events to a queue, read back as
the messages a receiver gets; and ledger events made the way the scheduler makes them."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import boto3
import sqlalchemy as sa

from cronledger.ledger import FAILED, Ledger, NewOccurrence, Occurrence
from cronledger.ledger.tables import events
from tests.ledger.helpers import LEASE, active_channel, settle, start

INSTALLATION = "acme-prod"
SOURCE = f"cronledger.{INSTALLATION}"
BUS = f"{INSTALLATION}-events"


def bus_to_queue(bus: str = BUS, pattern: dict[str, Any] | None = None) -> str:
    """Create `bus` and a queue its rule (every event from `SOURCE`, or `pattern`) forwards
    to; answers the queue's URL."""
    eventbridge, sqs = boto3.client("events"), boto3.client("sqs")
    eventbridge.create_event_bus(Name=bus)
    queue = sqs.create_queue(QueueName=f"{bus}-received")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])
    eventbridge.put_rule(
        Name="to-queue",
        EventBusName=bus,
        EventPattern=json.dumps(pattern or {"source": [SOURCE]}),
    )
    eventbridge.put_targets(
        Rule="to-queue",
        EventBusName=bus,
        Targets=[{"Id": "queue", "Arn": arn["Attributes"]["QueueArn"]}],
    )
    return queue


def received(queue: str) -> list[dict[str, Any]]:
    """Every EventBridge event the queue holds, as its receiver reads them."""
    sqs = boto3.client("sqs")
    found: list[dict[str, Any]] = []
    while batch := sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10).get("Messages"):
        found.extend(json.loads(message["Body"]) for message in batch)
        sqs.delete_message_batch(
            QueueUrl=queue,
            Entries=[
                {"Id": str(n), "ReceiptHandle": m["ReceiptHandle"]} for n, m in enumerate(batch)
            ],
        )
    return found


def failed_on_its_last_attempt(
    ledger: Ledger, name: str = "invoices", error: str = "HTTP 503 from billing"
) -> Occurrence:
    """An occurrence of an active channel `name` that was claimed, started and settled failed
    on its one allowed attempt (its `occurrence.failed` is in the outbox)."""
    channel = active_channel(ledger, name)
    new = NewOccurrence(
        channel.channel_id,
        channel.name,
        channel.version,
        ledger.db_now() - timedelta(seconds=30),
        max_attempts=1,
    )
    assert ledger.occurrences.insert_occurrence(new)
    (claimed,) = ledger.attempts.claim("claim-e1", 1, LEASE).leased
    started = start(ledger, claimed, "claim-e1")
    assert settle(
        ledger,
        claimed.id,
        "claim-e1",
        FAILED,
        fencing_token=started.fencing_token,
        error_message=error,
    )
    return ledger.occurrences.get_occurrence(claimed.id)


def lapse_send_leases(ledger: Ledger) -> None:
    """Every undelivered event's send lease ran out an hour ago: the sweep may take them, as
    if the function that made them never sent them."""
    with ledger.engine.begin() as conn:
        conn.execute(
            sa.update(events)
            .where(events.c.delivered_at.is_(None), events.c.send_after.is_not(None))
            .values(send_after=ledger.db_now() - timedelta(hours=1))
        )
