"""Step Functions target: start an execution named `<occurrence_id>-<attempt>` and, with `wait`
(the default), poll it until it ends or the budget runs out (which does not stop it; the error
names it). Step Functions refuses a reused name, so a second delivery of one attempt follows the
execution already started. An Express machine keeps no history to poll, so with `wait` one runs
by `StartSyncExecution`, which answers when it ends.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from pydantic import Field

from cronledger.targets.clients import arn_region
from cronledger.targets.envelope import delivery_id, envelope_json
from cronledger.targets.fields import Boolean, TargetDocument, text
from cronledger.targets.interface import Delivery, TargetOutcome, timed_out

_ARN = re.compile(
    r"arn:aws[a-z-]*:states:[a-z0-9-]+:\d{12}:stateMachine:[A-Za-z0-9_-]{1,80}(:[A-Za-z0-9_-]{1,80})?"
)
_FIRST_POLL_SECS = 0.2
_MAX_POLL_SECS = 2.0


class StepFunctionsTarget(TargetDocument):
    ref_format: ClassVar[str] = "stepfunctions:{state_machine_arn}"

    type: Literal["stepfunctions"]
    state_machine_arn: text(  # type: ignore[valid-type]
        "arn:aws:states:eu-west-1:123456789012:stateMachine:nightly",
        256,
        _ARN,
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
