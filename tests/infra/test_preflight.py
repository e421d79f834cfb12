"""`make deploy`'s preflight: an account whose Lambda concurrency cannot hold the installation's
reservations is refused before CloudFormation starts, with the fix named, and a machine without
the tools a deploy needs is told which."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from cronledger_infra.bundling import BundlingError
from cronledger_infra.preflight import (
    PreflightRefused,
    check_concurrency,
    main,
    missing_tools,
)
from cronledger_infra.props import CronledgerProps


def _settings(limit: int) -> dict[str, Any]:
    return {
        "AccountLimit": {
            "TotalCodeSize": 80530636800,
            "CodeSizeUnzipped": 262144000,
            "CodeSizeZipped": 52428800,
            "ConcurrentExecutions": limit,
            "UnreservedConcurrentExecutions": limit,
        },
        "AccountUsage": {"TotalCodeSize": 0, "FunctionCount": 0},
    }


@pytest.fixture
def account() -> Iterator[tuple[Any, Stubber]]:
    """A Lambda client whose answers the test gives, with no network and no credentials."""
    client = boto3.client(
        "lambda",
        region_name="eu-west-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    with Stubber(client) as stubber:
        yield client, stubber
        stubber.assert_no_pending_responses()


def test_an_account_limited_to_ten_is_refused_with_the_fix_in_the_message(account):
    client, stubber = account
    stubber.add_response("get_account_settings", _settings(10), {})

    with pytest.raises(PreflightRefused) as refused:
        check_concurrency(CronledgerProps(), client)

    message = str(refused.value)
    assert "limit is 10" in message
    # reconcile 2 ticks x 4 shards + claim 2 + api 10 + execute 200
    assert "220" in message and "320 are needed" in message
    assert "request a quota increase" in message
    assert "lower the reserved concurrency" in message
    assert "reserve_concurrency=false" in message


def test_an_account_that_holds_the_reservations_and_a_hundred_more_passes(account):
    client, stubber = account
    stubber.add_response("get_account_settings", _settings(320), {})

    assert "holds" in check_concurrency(CronledgerProps(), client)


def test_lower_reservations_fit_a_smaller_account(account):
    client, stubber = account
    stubber.add_response("get_account_settings", _settings(120), {})
    props = CronledgerProps(
        max_in_flight=10, api_concurrency=4, reconcile_shards=1, database_max_connections=200
    )

    assert "holds" in check_concurrency(props, client)


def test_without_reservations_the_account_is_not_asked(account):
    client, _ = account

    assert "nothing to check" in check_concurrency(
        CronledgerProps(reserve_concurrency=False), client
    )


def test_the_command_exits_non_zero_and_says_why_on_a_small_account(account, capsys):
    client, stubber = account
    stubber.add_response("get_account_settings", _settings(10), {})

    code = main(["--skip-tools", "-c", "cronledger:claim_concurrency=3"], lambda_client=client)

    err = capsys.readouterr().err
    assert code == 1
    assert "refused" in err
    assert "claim 3" in err  # the reservations checked are the deploy's own


def test_each_missing_tool_is_named():
    def no_python() -> str:
        raise BundlingError("no Python 3.13 was found")

    missing = missing_tools(python=no_python, node_version=lambda: "v20.20.2")

    assert len(missing) == 2
    assert missing[0].startswith("Python 3.13")
    assert missing[1].startswith("Node.js 22 or newer (found v20.20.2)")
    assert missing_tools(python=lambda: "/usr/bin/python3.13", node_version=lambda: None) == [
        "Node.js 22 or newer (found none on PATH): the CDK CLI runs on it; install a current "
        "LTS release"
    ]
    assert missing_tools(python=lambda: "python3.13", node_version=lambda: "v22.11.0") == []
