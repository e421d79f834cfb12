"""The AWS target types against moto: each test reads back what the service received.

moto's Lambda without Docker answers an invoke by echoing the payload it was sent, so the
Lambda result is the envelope as the function received it. It answers every function name and
never reports a `FunctionError`, so those answers come from a local stand-in for the Lambda
API (tests/unit/fixtures_targets.py) that also records the request botocore sent.
Step Functions runs the state machine definitions for real (`execute_state_machine`).
"""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from moto import mock_aws

from cronledger.targets import run_target
from cronledger.targets.clients import AwsClients
from cronledger.targets.envelope import Envelope, build_envelope
from cronledger.targets.policy import TargetPolicy
from tests.unit.fixtures_targets import Answer, RecordingServer

OCCURRENCE = "0190a6c3-7e2f-7c41-8b3a-2d4e5f6a7b8c"

POLICY = TargetPolicy()  # AWS targets need nothing from the operator's policy


@pytest.fixture
def aws(aws_env: None) -> Iterator[AwsClients]:
    config: Any = {
        "lambda": {"use_docker": False},
        "stepfunctions": {"execute_state_machine": True},
    }
    with mock_aws(config=config):
        yield AwsClients()


def envelope(attempt: int = 1, **overrides: Any) -> Envelope:
    fields: dict[str, Any] = {
        "payload": {"report": "nightly"},
        "trigger": "cron",
        "occurrence_id": OCCURRENCE,
        "channel_id": "ch-1",
        "channel_name": "nightly",
        "scheduled_for": datetime(2026, 9, 1, 2, 15, tzinfo=UTC),
        "started_at": datetime(2026, 9, 1, 2, 15, 1, tzinfo=UTC),
        "timezone": "UTC",
        "attempt": attempt,
        "singleton_key": None,
        "fencing_token": None,
    }
    fields.update(overrides)
    return build_envelope(**fields)


# --- lambda -------------------------------------------------------------------------------


def create_function(name: str) -> str:
    role = boto3.client("iam").create_role(RoleName=f"{name}-role", AssumeRolePolicyDocument="{}")
    code = io.BytesIO()
    with zipfile.ZipFile(code, "w") as archive:
        archive.writestr("handler.py", "def handle(event, context):\n    return event\n")
    created = boto3.client("lambda").create_function(
        FunctionName=name,
        Runtime="python3.11",
        Role=role["Role"]["Arn"],
        Handler="handler.handle",
        Code={"ZipFile": code.getvalue()},
    )
    return created["FunctionArn"]


def test_a_lambda_target_is_invoked_synchronously_with_the_envelope(aws: AwsClients) -> None:
    arn = create_function("nightly-report")
    sent = envelope()

    outcome = run_target({"type": "lambda", "function_arn": arn}, sent, 5.0, aws, policy=POLICY)

    assert outcome.ok, outcome.error
    assert json.loads(outcome.result or "") == sent  # moto echoes what the function received


def test_a_missing_lambda_function_is_a_failure(aws_env: None) -> None:
    # moto's Docker-less Lambda answers any name, so the refusal comes from the stand-in.
    answer = Answer(
        status=404,
        body=b'{"Type": "User", "Message": "Function not found: no-such-function"}',
        headers={"X-Amzn-ErrorType": "ResourceNotFoundException"},
    )

    with RecordingServer(answer) as lambda_api:
        outcome = run_target(
            {"type": "lambda", "function_arn": "no-such-function"},
            envelope(),
            5.0,
            AwsClients(endpoint_url=lambda_api.url),
            policy=POLICY,
        )

    assert not outcome.ok
    assert outcome.error is not None
    assert outcome.error.startswith("ResourceNotFoundException: ")
    assert "Function not found: no-such-function" in outcome.error


def test_a_lambda_function_error_is_a_failure_with_the_functions_message(aws_env: None) -> None:
    error_document = {"errorMessage": "disk full", "errorType": "OSError"}
    answer = Answer(
        body=json.dumps(error_document).encode(),
        headers={"X-Amz-Function-Error": "Unhandled", "Content-Type": "application/json"},
    )
    sent = envelope()

    with RecordingServer(answer) as lambda_api:
        outcome = run_target(
            {"type": "lambda", "function_arn": "nightly-report", "qualifier": "live"},
            sent,
            5.0,
            AwsClients(endpoint_url=lambda_api.url),
            policy=POLICY,
        )

    assert (outcome.ok, outcome.error) == (False, "Unhandled function error: OSError: disk full")
    assert json.loads(outcome.result or "") == error_document
    (request,) = lambda_api.received
    assert request.path == "/2015-03-31/functions/nightly-report/invocations?Qualifier=live"
    assert request.headers["X-Amz-Invocation-Type"] == "RequestResponse"
    assert json.loads(request.body) == sent


def test_a_lambda_slower_than_the_budget_times_out_and_is_not_invoked_again(aws_env: None) -> None:
    with RecordingServer(Answer(delay_secs=1.5)) as lambda_api:
        outcome = run_target(
            {"type": "lambda", "function_arn": "nightly-report"},
            envelope(),
            0.3,
            AwsClients(endpoint_url=lambda_api.url),
            policy=POLICY,
        )
        received = len(lambda_api.received)

    assert (outcome.ok, outcome.error) == (False, "timed out after 300 ms")
    assert received == 1  # a retried synchronous invoke would run the function twice


# --- step functions -----------------------------------------------------------------------


def create_machine(name: str, states: dict[str, Any]) -> str:
    definition = {"StartAt": next(iter(states)), "States": states}
    return boto3.client("stepfunctions").create_state_machine(
        name=name,
        definition=json.dumps(definition),
        roleArn="arn:aws:iam::123456789012:role/sfn",
    )["stateMachineArn"]


def executions(machine: str) -> list[Any]:
    sfn = boto3.client("stepfunctions")
    listed = sfn.list_executions(stateMachineArn=machine)["executions"]
    return [sfn.describe_execution(executionArn=e["executionArn"]) for e in listed]


def test_a_step_functions_target_waits_for_success_of_an_execution_named_after_the_attempt(
    aws: AwsClients,
) -> None:
    machine = create_machine("nightly", {"Done": {"Type": "Pass", "End": True}})
    sent = envelope(attempt=2)

    outcome = run_target(
        {"type": "stepfunctions", "state_machine_arn": machine}, sent, 10.0, aws, policy=POLICY
    )

    assert outcome.ok, outcome.error
    assert json.loads(outcome.result or "") == sent  # a Pass state's output is its input
    (execution,) = executions(machine)
    assert execution["name"] == f"{OCCURRENCE}-2"
    assert execution["status"] == "SUCCEEDED"
    assert json.loads(execution["input"]) == sent


def test_a_failed_execution_is_a_failure_with_its_error_and_cause(aws: AwsClients) -> None:
    machine = create_machine(
        "breaks", {"Boom": {"Type": "Fail", "Error": "ReportError", "Cause": "no data"}}
    )

    outcome = run_target(
        {"type": "stepfunctions", "state_machine_arn": machine},
        envelope(),
        10.0,
        aws,
        policy=POLICY,
    )

    assert not outcome.ok
    assert outcome.error is not None
    assert outcome.error.endswith("ended FAILED: ReportError: no data")
    assert f":execution:breaks:{OCCURRENCE}-1" in outcome.error


def test_an_execution_still_running_when_the_budget_ends_is_a_timeout(aws: AwsClients) -> None:
    machine = create_machine("slow", {"Nap": {"Type": "Wait", "Seconds": 60, "End": True}})

    outcome = run_target(
        {"type": "stepfunctions", "state_machine_arn": machine}, envelope(), 0.5, aws, policy=POLICY
    )

    assert not outcome.ok
    assert outcome.error is not None
    assert outcome.error.startswith("timed out after 500 ms (execution arn:aws:states:")
    assert [e["status"] for e in executions(machine)] == ["RUNNING"]


def test_without_wait_a_started_execution_is_success(aws: AwsClients) -> None:
    machine = create_machine("fire", {"Nap": {"Type": "Wait", "Seconds": 60, "End": True}})

    outcome = run_target(
        {"type": "stepfunctions", "state_machine_arn": machine, "wait": False},
        envelope(),
        5.0,
        aws,
        policy=POLICY,
    )

    assert outcome.ok
    (execution,) = executions(machine)
    assert json.loads(outcome.result or "") == {"executionArn": execution["executionArn"]}


def test_redelivering_one_attempt_starts_one_execution_and_the_next_attempt_another(
    aws: AwsClients,
) -> None:
    machine = create_machine("once", {"Done": {"Type": "Pass", "End": True}})
    doc = {"type": "stepfunctions", "state_machine_arn": machine}

    first = run_target(doc, envelope(attempt=1), 30.0, aws, policy=POLICY)
    again = run_target(doc, envelope(attempt=1), 30.0, aws, policy=POLICY)
    retry = run_target(doc, envelope(attempt=2), 30.0, aws, policy=POLICY)

    assert (first.ok, again.ok, retry.ok) == (True, True, True)
    assert sorted(e["name"] for e in executions(machine)) == [f"{OCCURRENCE}-1", f"{OCCURRENCE}-2"]


# --- sqs ----------------------------------------------------------------------------------


def receive_all(queue_url: str) -> list[Any]:
    answer = boto3.client("sqs").receive_message(
        QueueUrl=queue_url, MaxNumberOfMessages=10, MessageSystemAttributeNames=["All"]
    )
    return answer.get("Messages", [])


def test_an_sqs_target_sends_the_envelope_as_the_message_body(aws: AwsClients) -> None:
    queue_url = boto3.client("sqs").create_queue(QueueName="nightly")["QueueUrl"]
    sent = envelope()

    outcome = run_target({"type": "sqs", "queue_url": queue_url}, sent, 5.0, aws, policy=POLICY)

    assert outcome.ok, outcome.error
    (message,) = receive_all(queue_url)
    assert json.loads(message["Body"]) == sent
    assert json.loads(outcome.result or "") == {"MessageId": message["MessageId"]}


def test_a_fifo_queue_drops_a_redelivered_attempt_but_accepts_the_next_attempt(
    aws: AwsClients,
) -> None:
    queue_url = boto3.client("sqs").create_queue(
        QueueName="nightly.fifo", Attributes={"FifoQueue": "true"}
    )["QueueUrl"]
    doc = {"type": "sqs", "queue_url": queue_url}

    outcomes = [run_target(doc, envelope(attempt=a), 5.0, aws, policy=POLICY) for a in (1, 1, 2)]

    assert all(o.ok for o in outcomes)
    messages = receive_all(queue_url)
    assert [json.loads(m["Body"])["trigger"]["attempt"] for m in messages] == [1, 2]
    assert [m["Attributes"]["MessageDeduplicationId"] for m in messages] == [
        f"{OCCURRENCE}-1",
        f"{OCCURRENCE}-2",
    ]
    assert {m["Attributes"]["MessageGroupId"] for m in messages} == {"ch-1"}


def test_sending_to_a_missing_queue_is_a_failure(aws: AwsClients) -> None:
    missing = "https://sqs.us-east-1.amazonaws.com/123456789012/does-not-exist"

    outcome = run_target({"type": "sqs", "queue_url": missing}, envelope(), 5.0, aws, policy=POLICY)

    assert not outcome.ok
    assert outcome.error is not None and "QueueDoesNotExist" in outcome.error


# --- eventbridge --------------------------------------------------------------------------


def route_bus_to_queue(bus: str) -> str:
    """A rule on `bus` that forwards every reports.test event to a new queue."""
    sqs, events = boto3.client("sqs"), boto3.client("events")
    queue_url = sqs.create_queue(QueueName=f"{bus}-events")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])
    if bus != "default":
        events.create_event_bus(Name=bus)
    pattern = json.dumps({"source": ["reports.test"]})
    events.put_rule(Name=f"{bus}-all", EventBusName=bus, EventPattern=pattern)
    events.put_targets(
        Rule=f"{bus}-all",
        EventBusName=bus,
        Targets=[{"Id": "queue", "Arn": queue_arn["Attributes"]["QueueArn"]}],
    )
    return queue_url


@pytest.mark.parametrize("bus", ["ops", None])
def test_an_eventbridge_target_puts_the_envelope_as_the_event_detail(
    aws: AwsClients, bus: str | None
) -> None:
    queue_url = route_bus_to_queue(bus or "default")
    doc: dict[str, Any] = {"type": "eventbridge", "source": "reports.test", "detail_type": "due"}
    if bus:
        doc["event_bus_name"] = bus
    sent = envelope()

    outcome = run_target(doc, sent, 5.0, aws, policy=POLICY)

    assert outcome.ok, outcome.error
    (message,) = receive_all(queue_url)
    event = json.loads(message["Body"])
    assert (event["source"], event["detail-type"], event["detail"]) == (
        "reports.test",
        "due",
        sent,
    )
    assert json.loads(outcome.result or "") == {"EventId": event["id"]}


def test_putting_to_a_missing_bus_is_a_failure(aws: AwsClients) -> None:
    doc = {"type": "eventbridge", "event_bus_name": "nope", "source": "s", "detail_type": "d"}

    outcome = run_target(doc, envelope(), 5.0, aws, policy=POLICY)

    assert not outcome.ok
    assert outcome.error is not None and "ResourceNotFoundException" in outcome.error
