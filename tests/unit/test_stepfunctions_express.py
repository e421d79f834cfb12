"""Step Functions Express machines keep no execution history to poll, so a `wait` target on
one runs with StartSyncExecution and its outcome is the execution's; without `wait`, or on a
Standard machine, nothing changes (tests/unit/test_targets_aws.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from cronledger.targets import run_target
from cronledger.targets.clients import AwsClients
from cronledger.targets.envelope import build_envelope, envelope_json
from cronledger.targets.policy import TargetPolicy

MACHINE = "arn:aws:states:us-east-1:123456789012:stateMachine:quick"
ENVELOPE = build_envelope(
    payload={"report": "nightly"},
    trigger="cron",
    occurrence_id="0190a6c3-7e2f-7c41-8b3a-2d4e5f6a7b8c",
    channel_id="ch-1",
    channel_name="nightly",
    scheduled_for=datetime(2026, 9, 1, 2, 15, tzinfo=UTC),
    started_at=datetime(2026, 9, 1, 2, 15, 1, tzinfo=UTC),
    timezone="UTC",
    attempt=1,
    singleton_key=None,
    fencing_token=None,
)


class StubbedClients(AwsClients):
    """The Step Functions client of this test, answering what the stubber was told."""

    def __init__(self, client: Any) -> None:
        super().__init__()
        self.client = client

    def stepfunctions(self, region: str | None = None, timeout_secs: float | None = None) -> Any:
        return self.client


@pytest.fixture
def stepfunctions(monkeypatch: pytest.MonkeyPatch) -> Any:
    for name, value in {"AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x"}.items():
        monkeypatch.setenv(name, value)
    return boto3.client("stepfunctions", region_name="us-east-1")


def described(machine_type: str) -> dict[str, Any]:
    return {
        "stateMachineArn": MACHINE,
        "name": "quick",
        "definition": "{}",
        "roleArn": "arn:aws:iam::123456789012:role/sfn",
        "type": machine_type,
        "creationDate": datetime(2026, 1, 1, tzinfo=UTC),
    }


def ended(status: str, **extra: Any) -> dict[str, Any]:
    return {
        "executionArn": f"arn:aws:states:us-east-1:123456789012:express:quick:{status}:1",
        "startDate": datetime(2026, 9, 1, tzinfo=UTC),
        "stopDate": datetime(2026, 9, 1, tzinfo=UTC),
        "status": status,
        **extra,
    }


def test_an_express_machine_with_wait_runs_to_completion_synchronously(stepfunctions: Any) -> None:
    with Stubber(stepfunctions) as stub:
        stub.add_response(
            "describe_state_machine", described("EXPRESS"), {"stateMachineArn": MACHINE}
        )
        stub.add_response(
            "start_sync_execution",
            ended("SUCCEEDED", output='{"rows": 3}'),
            {
                "stateMachineArn": MACHINE,
                "name": "0190a6c3-7e2f-7c41-8b3a-2d4e5f6a7b8c-1",
                "input": envelope_json(ENVELOPE),
            },
        )
        outcome = run_target(
            {"type": "stepfunctions", "state_machine_arn": MACHINE},
            ENVELOPE,
            10.0,
            StubbedClients(stepfunctions),
            policy=TargetPolicy(),
        )
        stub.assert_no_pending_responses()

    assert outcome.ok and outcome.result == '{"rows": 3}'


def test_an_express_execution_that_fails_fails_the_attempt_with_its_error(
    stepfunctions: Any,
) -> None:
    with Stubber(stepfunctions) as stub:
        stub.add_response("describe_state_machine", described("EXPRESS"))
        stub.add_response("start_sync_execution", ended("FAILED", error="Boom", cause="no rows"))
        outcome = run_target(
            {"type": "stepfunctions", "state_machine_arn": f"{MACHINE}:live"},
            ENVELOPE,
            10.0,
            StubbedClients(stepfunctions),
            policy=TargetPolicy(),
        )

    assert not outcome.ok
    assert outcome.error is not None and "ended FAILED: Boom: no rows" in outcome.error


def test_without_wait_an_express_machine_is_only_started(stepfunctions: Any) -> None:
    with Stubber(stepfunctions) as stub:
        stub.add_response(
            "start_execution",
            {
                "executionArn": "arn:aws:states:us-east-1:123456789012:express:quick:x:1",
                "startDate": datetime(2026, 9, 1, tzinfo=UTC),
            },
        )
        outcome = run_target(
            {"type": "stepfunctions", "state_machine_arn": MACHINE, "wait": False},
            ENVELOPE,
            10.0,
            StubbedClients(stepfunctions),
            policy=TargetPolicy(),
        )
        stub.assert_no_pending_responses()

    assert outcome.ok
