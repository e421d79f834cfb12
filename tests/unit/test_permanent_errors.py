"""Permanent target errors: a deleted AWS target, or a target the operator's policy no longer
allows, fails the occurrence at once, saying so, instead of spending its retries on the same
refusal; a transient error is still retried."""

from __future__ import annotations

import boto3
import pytest

from cronledger.cron.compiled import RetryPolicy
from cronledger.execute import ending
from cronledger.ledger import FAILED
from cronledger.targets import run_target
from cronledger.targets.clients import AwsClients
from cronledger.targets.interface import TargetOutcome
from cronledger.targets.policy import TargetPolicy
from tests.unit.test_targets_aws import POLICY, aws, envelope

__all__ = ["aws"]  # the moto fixture

THREE_ATTEMPTS = RetryPolicy(max_attempts=3)


def test_a_deleted_queue_is_a_permanent_failure_not_retried(aws: AwsClients) -> None:
    # Given a queue deleted after its channel was saved
    sqs = boto3.client("sqs")
    queue_url = sqs.create_queue(QueueName="nightly")["QueueUrl"]
    sqs.delete_queue(QueueUrl=queue_url)

    # When an attempt sends to it, and the end is decided on attempt 1 of 3
    doc = {"type": "sqs", "queue_url": queue_url}
    outcome = run_target(doc, envelope(), 5.0, aws, policy=POLICY)
    end = ending(outcome, 1, THREE_ATTEMPTS)

    # Then it failed permanently: settled failed now, no retry, saying why
    assert (outcome.ok, outcome.permanent) == (False, True)
    assert (end.status, end.retry_in) == (FAILED, None)
    assert end.error is not None and end.error.endswith("(a permanent error: not retried)")


def test_a_python_callable_no_longer_allowed_is_a_permanent_failure() -> None:
    # Given a python target whose module the operator has since removed from the allow-list
    narrowed = TargetPolicy(python_modules=("cronledger.demo",))
    doc = {"type": "python", "callable": "tests.e2e.targets:record"}

    # When an attempt runs it
    outcome = run_target(doc, envelope(), 5.0, policy=narrowed)
    end = ending(outcome, 1, THREE_ATTEMPTS)

    # Then it fails at once, naming the policy, without a retry
    assert (outcome.ok, outcome.permanent) == (False, True)
    assert "CRONLEDGER_PYTHON_TARGETS" in (outcome.error or "")
    assert end.retry_in is None and "not retried" in (end.error or "")


@pytest.mark.parametrize("attempt", [1, 2])
def test_a_transient_failure_is_still_retried_while_attempts_remain(attempt: int) -> None:
    end = ending(TargetOutcome(ok=False, error="HTTP 503"), attempt, THREE_ATTEMPTS)

    assert (end.status, end.error, end.retry_in is not None) == (FAILED, "HTTP 503", True)
