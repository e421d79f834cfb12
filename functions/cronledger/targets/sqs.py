"""SQS target: the envelope as one message, successful when the queue accepts it.

On a FIFO queue the message is grouped by channel (one channel's messages keep their order)
and deduplicated by `<occurrence_id>-<attempt>`, so a redelivered attempt is dropped by the
queue while the next attempt still gets through.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from cronledger.targets.clients import AwsClients
from cronledger.targets.envelope import Envelope, delivery_id, envelope_json
from cronledger.targets.fields import TargetDocument, text
from cronledger.targets.interface import TargetKind, TargetOutcome
from cronledger.targets.policy import TargetPolicy

_QUEUE_URL = re.compile(r"https?://[A-Za-z0-9.:-]+/\d{12}/[A-Za-z0-9_-]{1,80}(\.fifo)?")
_REGION = re.compile(r"https?://(?:sqs\.([a-z0-9-]+)\.amazonaws|([a-z0-9-]+)\.queue\.amazonaws)")


class SqsTarget(TargetDocument):
    type_name: ClassVar[str] = "sqs"

    type: Literal["sqs"]
    queue_url: text(  # type: ignore[valid-type]
        "https://sqs.eu-west-1.amazonaws.com/123456789012/nightly-jobs",
        1024,
        _QUEUE_URL,
        "must be a queue URL (https://<endpoint>/<account id>/<queue name>)",
    )


def ref(doc: Mapping[str, Any]) -> str:
    return f"sqs:{doc['queue_url']}"


def run(
    doc: Mapping[str, Any],
    envelope: Envelope,
    timeout_secs: float,
    clients: AwsClients,
    policy: TargetPolicy,
) -> TargetOutcome:
    queue_url: str = doc["queue_url"]
    match = _REGION.match(queue_url)
    region = (match.group(1) or match.group(2)) if match else None
    client = clients.sqs(region, timeout_secs)
    body = envelope_json(envelope)
    if queue_url.endswith(".fifo"):
        response = client.send_message(
            QueueUrl=queue_url,
            MessageBody=body,
            MessageGroupId=envelope["trigger"]["channel_id"],
            MessageDeduplicationId=delivery_id(envelope),
        )
    else:
        response = client.send_message(QueueUrl=queue_url, MessageBody=body)
    return TargetOutcome(ok=True, result=json.dumps({"MessageId": response["MessageId"]}))


KIND = TargetKind(model=SqsTarget, ref=ref, run=run)
