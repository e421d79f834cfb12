"""Step Functions target: start an execution named after the attempt, and with `wait` (the
default) poll it until it ends or the budget runs out.

The execution name is `<occurrence_id>-<attempt>`: a second delivery of one attempt cannot
start a second execution, because Step Functions refuses a reused name; it follows the one
already started instead. Running out of budget does not stop the execution (that would need
another permission and is rarely what a long workflow wants); the error names it.

An Express state machine keeps no execution history to poll (`DescribeExecution` does not know
its executions), so with `wait` one runs with `StartSyncExecution` instead, which answers when
the execution ends (Express executions last at most five minutes), its wait bounded by the
attempt's budget. The machine's type is asked for (`DescribeStateMachine`) before starting.
Without `wait` both types start the same way.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from pydantic import Field

from cronledger.targets.clients import AwsClients, arn_region
from cronledger.targets.envelope import Envelope, delivery_id, envelope_json
from cronledger.targets.fields import Boolean, TargetDocument, text
from cronledger.targets.interface import TargetKind, TargetOutcome, timed_out
from cronledger.targets.policy import TargetPolicy

_ARN = re.compile(
    r"arn:aws[a-z-]*:states:[a-z0-9-]+:\d{12}:stateMachine:[A-Za-z0-9_-]{1,80}(:[A-Za-z0-9_-]{1,80})?"
)
_FIRST_POLL_SECS = 0.2
_MAX_POLL_SECS = 2.0


class StepFunctionsTarget(TargetDocument):
    type_name: ClassVar[str] = "stepfunctions"

    type: Literal["stepfunctions"]
    state_machine_arn: text(  # type: ignore[valid-type]
        "arn:aws:states:eu-west-1:123456789012:stateMachine:nightly",
        256,
        _ARN,
        "must be a state machine ARN",
    )
    wait: Boolean = Field(True, description="wait for the execution to end")


def ref(doc: Mapping[str, Any]) -> str:
    return f"stepfunctions:{doc['state_machine_arn']}"


def execution_name(envelope: Envelope) -> str:
    """Step Functions allows 80 characters of `[A-Za-z0-9_-]` in a name."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", delivery_id(envelope))[:80]


def run(
    doc: Mapping[str, Any],
    envelope: Envelope,
    timeout_secs: float,
    clients: AwsClients,
    policy: TargetPolicy,
) -> TargetOutcome:
    deadline = time.monotonic() + timeout_secs
    machine: str = doc["state_machine_arn"]
    client = clients.stepfunctions(arn_region(machine), timeout_secs)
    name = execution_name(envelope)
    if doc.get("wait") is not False and _is_express(client, machine):
        return _run_to_completion(client, machine, name, envelope)
    try:
        execution = client.start_execution(
            stateMachineArn=machine, name=name, input=envelope_json(envelope)
        )["executionArn"]
    except client.exceptions.ExecutionAlreadyExists:
        execution = _execution_arn(machine, name)
    if doc.get("wait") is False:
        return TargetOutcome(ok=True, result=json.dumps({"executionArn": execution}))

    pause = _FIRST_POLL_SECS
    while True:
        described = client.describe_execution(executionArn=execution)
        status = described["status"]
        if status == "SUCCEEDED":
            return TargetOutcome(ok=True, result=described.get("output"))
        if status not in ("RUNNING", "PENDING_REDRIVE"):
            reason = ": ".join(filter(None, (described.get("error"), described.get("cause"))))
            return TargetOutcome(
                ok=False,
                result=described.get("output"),
                error=f"execution {execution} ended {status}" + (f": {reason}" if reason else ""),
            )
        left = deadline - time.monotonic()
        if left <= 0:
            return timed_out(timeout_secs, f"execution {execution} still running")
        time.sleep(min(pause, left))
        pause = min(pause * 2, _MAX_POLL_SECS)


def _is_express(client: Any, machine: str) -> bool:
    unqualified = ":".join(machine.split(":")[:7])  # a version or alias has its machine's type
    return bool(client.describe_state_machine(stateMachineArn=unqualified)["type"] == "EXPRESS")


def _run_to_completion(client: Any, machine: str, name: str, envelope: Envelope) -> TargetOutcome:
    ended = client.start_sync_execution(
        stateMachineArn=machine, name=name, input=envelope_json(envelope)
    )
    status = ended["status"]
    if status == "SUCCEEDED":
        return TargetOutcome(ok=True, result=ended.get("output"))
    reason = ": ".join(filter(None, (ended.get("error"), ended.get("cause"))))
    execution = ended.get("executionArn", name)
    return TargetOutcome(
        ok=False,
        result=ended.get("output"),
        error=f"express execution {execution} ended {status}" + (f": {reason}" if reason else ""),
    )


def _execution_arn(machine: str, name: str) -> str:
    # arn:aws:states:<region>:<account>:stateMachine:<machine>[:<version or alias>]
    partition, service, region, account, _, machine_name = machine.split(":")[1:7]
    return f"arn:{partition}:{service}:{region}:{account}:execution:{machine_name}:{name}"


KIND = TargetKind(model=StepFunctionsTarget, ref=ref, run=run)
