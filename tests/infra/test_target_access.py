"""The executor's grant on Step Functions executions matches the execution ARNs the
stepfunctions target polls, for a plain and for a version- or alias-qualified machine."""

from __future__ import annotations

import pytest

from cronledger.targets.aws_sdk import _execution_arn
from cronledger_infra.target_access import executions_of

MACHINE = "arn:aws:states:eu-west-1:111111111111:stateMachine:month-end"


@pytest.mark.parametrize("qualifier", ["", ":live", ":7"])
def test_the_grant_covers_the_executions_the_target_describes(qualifier: str) -> None:
    granted = executions_of(MACHINE + qualifier)

    assert granted == "arn:aws:states:eu-west-1:111111111111:execution:month-end:*"
    assert _execution_arn(MACHINE + qualifier, "*") == granted
