"""Secret references on AWS (moto): a Secrets Manager secret and an SSM SecureString are read
when an attempt runs, cached briefly, and sent to the endpoint; an unreadable one fails the
attempt naming the reference only; one bound to hosts by its tag goes to those hosts only."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from ipaddress import ip_address, ip_network

import boto3
import pytest
from moto import mock_aws

from cronledger.targets import run_target
from cronledger.targets.clients import AwsClients
from cronledger.targets.policy import TargetPolicy
from cronledger.targets.secrets import (
    HOSTS_TAG,
    SecretUnavailable,
    resolve_secret,
)
from tests.unit.fixtures_targets import RecordingServer, forget_cached_secrets
from tests.unit.test_targets_aws import envelope

AWS = TargetPolicy(secrets="aws", http_allow_networks=(ip_network("127.0.0.0/8"),))


@pytest.fixture
def aws(aws_env: None) -> Iterator[AwsClients]:
    forget_cached_secrets()
    with mock_aws():
        yield AwsClients()
    forget_cached_secrets()


def test_a_secrets_manager_secret_and_an_ssm_securestring_reach_the_endpoint(
    aws: AwsClients,
) -> None:
    arn = boto3.client("secretsmanager").create_secret(Name="hook", SecretString="Bearer sm-1")[
        "ARN"
    ]
    boto3.client("ssm").put_parameter(
        Name="/cronledger/hook-key", Value="ssm-2", Type="SecureString"
    )

    with RecordingServer() as server:
        doc = {
            "type": "http",
            "url": server.url,
            "secret_headers": {"Authorization": arn, "X-Hook-Key": "/cronledger/hook-key"},
        }
        outcome = run_target(doc, envelope(), 30.0, aws, policy=AWS)

    assert (outcome.ok, outcome.error) == (True, None)
    (request,) = server.received
    assert (request.headers["Authorization"], request.headers["X-Hook-Key"]) == (
        "Bearer sm-1",
        "ssm-2",
    )


def test_a_secret_is_cached_briefly_so_a_burst_reads_it_once(aws: AwsClients) -> None:
    client = boto3.client("secretsmanager")
    arn = client.create_secret(Name="hook", SecretString="first")["ARN"]

    first = resolve_secret(arn, AWS, aws)
    client.put_secret_value(SecretId=arn, SecretString="rotated")
    cached = resolve_secret(arn, AWS, aws)
    forget_cached_secrets()
    fresh = resolve_secret(arn, AWS, aws)

    assert (first, cached, fresh) == ("first", "first", "rotated")


def test_a_parameter_named_by_arn_is_read_by_its_name(aws: AwsClients) -> None:
    boto3.client("ssm").put_parameter(Name="hook-key", Value="plain-name", Type="SecureString")
    boto3.client("ssm").put_parameter(Name="/a/b", Value="path-name", Type="SecureString")
    prefix = "arn:aws:ssm:us-east-1:123456789012:parameter"

    assert resolve_secret(f"{prefix}/hook-key", AWS, aws) == "plain-name"
    assert resolve_secret(f"{prefix}/a/b", AWS, aws) == "path-name"


def test_an_unreadable_secret_fails_the_attempt_naming_the_reference(aws: AwsClients) -> None:
    missing = "arn:aws:secretsmanager:us-east-1:123456789012:secret:gone-AbCdEf"

    with RecordingServer() as server:
        doc = {"type": "http", "url": server.url, "secret_headers": {"Authorization": missing}}
        outcome = run_target(doc, envelope(), 5.0, aws, policy=AWS)

    assert not outcome.ok
    assert outcome.error is not None
    assert outcome.error.startswith(f"secret {missing} could not be read: ")
    assert server.received == []


def test_an_env_reference_is_not_read_when_the_source_is_aws(aws: AwsClients) -> None:
    with pytest.raises(SecretUnavailable) as refused:
        resolve_secret("env:CRONLEDGER_SECRET_X", AWS, aws)

    assert str(refused.value).startswith("secret env:CRONLEDGER_SECRET_X: a secret reference is")


REPORTS = "reports.example.com"
BOUND_TO_REPORTS = [{"Key": HOSTS_TAG, "Value": f" Reports.Example.com , {'status.example.com'}"}]


def test_a_secret_bound_to_another_host_is_never_sent_and_the_attempt_says_why(
    aws: AwsClients,
) -> None:
    # Given a secret its tag binds to the reports host
    arn = boto3.client("secretsmanager").create_secret(
        Name="hook", SecretString="Bearer bound-1", Tags=BOUND_TO_REPORTS
    )["ARN"]

    # When a channel's attempt would send it to another host
    with RecordingServer() as server:
        doc = {"type": "http", "url": server.url, "secret_headers": {"Authorization": arn}}
        outcome = run_target(doc, envelope(), 5.0, aws, policy=AWS)

    # Then the attempt failed naming the binding, and nothing reached the endpoint
    assert not outcome.ok
    assert outcome.error == (
        f"refused: secret {arn} may be sent only to reports.example.com, status.example.com "
        "(its tag cronledger:secret-hosts), not to 127.0.0.1"
    )
    assert server.received == []


def test_a_parameter_bound_to_another_host_is_refused_as_a_secret_is(aws: AwsClients) -> None:
    boto3.client("ssm").put_parameter(
        Name="/cronledger/bound", Value="key-2", Type="SecureString", Tags=BOUND_TO_REPORTS
    )

    with RecordingServer() as server:
        doc = {"type": "http", "url": server.url, "secret_headers": {"X-Key": "/cronledger/bound"}}
        outcome = run_target(doc, envelope(), 5.0, aws, policy=AWS)

    assert not outcome.ok and outcome.error is not None
    assert outcome.error.startswith("refused: secret /cronledger/bound may be sent only to ")
    assert server.received == []


def test_a_secret_bound_to_a_host_reaches_that_host(aws: AwsClients) -> None:
    # Given a secret bound to the reports host, which (here) resolves to a local endpoint
    arn = boto3.client("secretsmanager").create_secret(
        Name="hook", SecretString="Bearer bound-3", Tags=BOUND_TO_REPORTS
    )["ARN"]
    to_local = replace(AWS, resolver=lambda _host, _port: [ip_address("127.0.0.1")])

    # When an attempt sends it to that host (its name spelt in another case)
    with RecordingServer() as server:
        url = f"http://Reports.Example.COM:{server.port}/hook"
        doc = {"type": "http", "url": url, "secret_headers": {"Authorization": arn}}
        outcome = run_target(doc, envelope(), 5.0, aws, policy=to_local)

    # Then it arrived
    assert (outcome.ok, outcome.error) == (True, None)
    (request,) = server.received
    assert request.headers["Authorization"] == "Bearer bound-3"
    assert request.headers["Host"] == f"Reports.Example.COM:{server.port}"
