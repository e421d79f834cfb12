"""Targets that are calls of an AWS service (Lambda, Step Functions, SQS, EventBridge), each
with a client for the region its ARN or queue URL names."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field, ValidationInfo, field_validator

from cronledger.targets.clients import arn_region
from cronledger.targets.envelope import delivery_id, envelope_json
from cronledger.targets.fields import Boolean, TargetDocument, text
from cronledger.targets.interface import Delivery, TargetOutcome, timed_out
from cronledger.validation import refused

if TYPE_CHECKING:
    from mypy_boto3_events.type_defs import PutEventsRequestEntryTypeDef

_FUNCTION_ARN = r"arn:aws[a-z-]*:lambda:[a-z0-9-]+:\d{12}:function:"
_QUALIFIER = r"\$LATEST|[A-Za-z0-9_-]{1,128}"
_FUNCTION = re.compile(rf"({_FUNCTION_ARN})?[A-Za-z0-9_-]{{1,64}}(:({_QUALIFIER}))?")


# Lambda: a synchronous invoke, successful when it returns without `FunctionError`. The budget is
# the client's read timeout, never retried (a retry runs the function twice). A timeout does not
# stop the function; the envelope's `fencing_token` tells such a straggler it was superseded.
class LambdaTarget(TargetDocument):
    type: Literal["lambda"]
    function_arn: text(  # type: ignore[valid-type]
        "arn:aws:lambda:eu-west-1:123456789012:function:nightly-report",
        170,
        _FUNCTION,
        "must be a function name or a function ARN",
    )
    qualifier: text(  # type: ignore[valid-type]
        "live", 128, re.compile(_QUALIFIER), "must be a version number, an alias name or $LATEST"
    ) = None

    @field_validator("qualifier")
    @classmethod
    def _in_one_place(cls, qualifier: str | None, info: ValidationInfo) -> str | None:
        function = info.data.get("function_arn")
        if function and qualifier and _inline_qualifier(function):
            raise refused(
                "invalid",
                "function_arn already ends with a qualifier; give the version or alias in one "
                "place",
            )
        return qualifier

    @classmethod
    def ref(cls, doc: Mapping[str, Any]) -> str:
        qualifier = doc.get("qualifier")
        return f"lambda:{doc['function_arn']}" + (f":{qualifier}" if qualifier else "")

    @classmethod
    def run(cls, doc: Mapping[str, Any], delivery: Delivery) -> TargetOutcome:
        function = doc["function_arn"]
        client = delivery.clients.lambda_(arn_region(function), delivery.timeout_secs)
        options = {"Qualifier": doc["qualifier"]} if doc.get("qualifier") else {}
        response = client.invoke(
            FunctionName=function,
            InvocationType="RequestResponse",
            Payload=envelope_json(delivery.envelope).encode("utf-8"),
            **options,
        )
        answer = response["Payload"].read().decode("utf-8", errors="replace")
        function_error = response.get("FunctionError")
        if function_error:
            error = f"{function_error} function error: {_reason(answer)}"
            return TargetOutcome(ok=False, result=answer, error=error)
        return TargetOutcome(ok=True, result=answer)


def _inline_qualifier(function: str) -> bool:
    parts = function.split(":")
    return len(parts) == 8 if function.startswith("arn:") else len(parts) == 2


def _reason(answer: str) -> str:
    """`errorType: errorMessage` from Lambda's error document, or the raw answer's start."""
    try:
        document = json.loads(answer)
    except ValueError:
        return answer[:500]
    if isinstance(document, dict) and "errorMessage" in document:
        kind = document.get("errorType")
        return f"{kind}: {document['errorMessage']}" if kind else str(document["errorMessage"])
    return answer[:500]


_MACHINE = re.compile(
    r"arn:aws[a-z-]*:states:[a-z0-9-]+:\d{12}:stateMachine:[A-Za-z0-9_-]{1,80}(:[A-Za-z0-9_-]{1,80})?"
)
_FIRST_POLL_SECS = 0.2
_MAX_POLL_SECS = 2.0


# Step Functions: start an execution named `<occurrence_id>-<attempt>` and, with `wait` (the
# default), poll it until it ends or the budget runs out (which does not stop it; the error names
# it). Step Functions refuses a reused name, so a second delivery of one attempt follows the
# execution already started. An Express machine keeps no history to poll, so with `wait` one runs by
# `StartSyncExecution`, which answers when it ends.
class StepFunctionsTarget(TargetDocument):
    ref_format: ClassVar[str] = "stepfunctions:{state_machine_arn}"

    type: Literal["stepfunctions"]
    state_machine_arn: text(  # type: ignore[valid-type]
        "arn:aws:states:eu-west-1:123456789012:stateMachine:nightly",
        256,
        _MACHINE,
        "must be a state machine ARN",
    )
    wait: Boolean = Field(True, description="wait for the execution to end")

    @classmethod
    def run(cls, doc: Mapping[str, Any], delivery: Delivery) -> TargetOutcome:
        machine: str = doc["state_machine_arn"]
        client = delivery.clients.stepfunctions(arn_region(machine), delivery.timeout_secs)
        # Step Functions allows 80 characters of `[A-Za-z0-9_-]` in a name.
        name = re.sub(r"[^A-Za-z0-9_-]", "_", delivery_id(delivery.envelope))[:80]
        given = envelope_json(delivery.envelope)
        if doc.get("wait") is not False and _is_express(client, machine):
            ended = client.start_sync_execution(stateMachineArn=machine, name=name, input=given)
            return _ended(ended, f"express execution {ended.get('executionArn', name)}")
        try:
            started = client.start_execution(stateMachineArn=machine, name=name, input=given)
            execution = started["executionArn"]
        except client.exceptions.ExecutionAlreadyExists:
            execution = _execution_arn(machine, name)
        if doc.get("wait") is False:
            return TargetOutcome(ok=True, result=json.dumps({"executionArn": execution}))
        pause = _FIRST_POLL_SECS
        while (described := client.describe_execution(executionArn=execution))["status"] in (
            "RUNNING",
            "PENDING_REDRIVE",
        ):
            left = delivery.deadline - time.monotonic()
            if left <= 0:
                return timed_out(delivery.timeout_secs, f"execution {execution} still running")
            time.sleep(min(pause, left))
            pause = min(pause * 2, _MAX_POLL_SECS)
        return _ended(described, f"execution {execution}")


def _is_express(client: Any, machine: str) -> bool:
    unqualified = ":".join(machine.split(":")[:7])  # a version or alias has its machine's type
    return bool(client.describe_state_machine(stateMachineArn=unqualified)["type"] == "EXPRESS")


def _ended(ended: Mapping[str, Any], execution: str) -> TargetOutcome:
    """The outcome of an execution that ended: its output, and why when it did not succeed."""
    if ended["status"] == "SUCCEEDED":
        return TargetOutcome(ok=True, result=ended.get("output"))
    reason = ": ".join(filter(None, (ended.get("error"), ended.get("cause"))))
    error = f"{execution} ended {ended['status']}"
    return TargetOutcome(
        ok=False, result=ended.get("output"), error=error + (f": {reason}" if reason else "")
    )


def _execution_arn(machine: str, name: str) -> str:
    # arn:aws:states:<region>:<account>:stateMachine:<machine>[:<version or alias>]
    partition, service, region, account, _, machine_name = machine.split(":")[1:7]
    return f"arn:{partition}:{service}:{region}:{account}:execution:{machine_name}:{name}"


_QUEUE_URL = re.compile(r"https?://[A-Za-z0-9.:-]+/\d{12}/[A-Za-z0-9_-]{1,80}(\.fifo)?")
_REGION = re.compile(r"https?://(?:sqs\.([a-z0-9-]+)\.amazonaws|([a-z0-9-]+)\.queue\.amazonaws)")


# SQS: the envelope as one message, successful when the queue accepts it. On a FIFO queue a message
# is grouped by channel (its messages keep their order) and deduplicated by
# `<occurrence_id>-<attempt>`: the queue drops a redelivered attempt and still takes the next.
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


DEFAULT_BUS = "default"
_BUS = re.compile(r"(arn:aws[a-z-]*:events:[a-z0-9-]+:\d{12}:event-bus/)?[/.\-_A-Za-z0-9]{1,256}")


# EventBridge: the envelope as the `detail` of one event, successful when the bus accepts the entry.
# A refused entry comes back in an HTTP 200 with an error code on the entry, so the entry, not the
# call, is the answer (`entry_refusal`, which the events' sender shares).
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
