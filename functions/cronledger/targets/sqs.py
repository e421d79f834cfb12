"""SQS target: the envelope as one message, successful when the queue accepts it. On a FIFO
queue a message is grouped by channel (its messages keep their order) and deduplicated by
`<occurrence_id>-<attempt>`: the queue drops a redelivered attempt and still takes the next.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from cronledger.targets.envelope import delivery_id, envelope_json
from cronledger.targets.fields import TargetDocument, text
from cronledger.targets.interface import Delivery, TargetOutcome

_QUEUE_URL = re.compile(r"https?://[A-Za-z0-9.:-]+/\d{12}/[A-Za-z0-9_-]{1,80}(\.fifo)?")
_REGION = re.compile(r"https?://(?:sqs\.([a-z0-9-]+)\.amazonaws|([a-z0-9-]+)\.queue\.amazonaws)")


class SqsTarget(TargetDocument):
    ref_format: ClassVar[str] = "sqs:{queue_url}"

    type: Literal["sqs"]
    queue_url: text(  # type: ignore[valid-type]
        "https://sqs.eu-west-1.amazonaws.com/123456789012/nightly-jobs",
        1024,
        _QUEUE_URL,
        "must be a queue URL (https://<endpoint>/<account id>/<queue name>)",
    )

    @classmethod
    def run(cls, doc: Mapping[str, Any], delivery: Delivery) -> TargetOutcome:
        queue_url: str = doc["queue_url"]
        match = _REGION.match(queue_url)
        region = (match.group(1) or match.group(2)) if match else None
        message: dict[str, Any] = {
            "QueueUrl": queue_url,
            "MessageBody": envelope_json(delivery.envelope),
        }
        if queue_url.endswith(".fifo"):
            message["MessageGroupId"] = delivery.envelope["trigger"]["channel_id"]
            message["MessageDeduplicationId"] = delivery_id(delivery.envelope)
        response = delivery.clients.sqs(region, delivery.timeout_secs).send_message(**message)
        return TargetOutcome(ok=True, result=json.dumps({"MessageId": response["MessageId"]}))
