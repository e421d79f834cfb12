"""An operator's choices are refused at synth when they would make an unsafe deployment.

These need no synthesis: the props object validates itself, and reads CDK context values
(strings from `cdk -c`) into typed fields. (`infra/` is on the import path: see conftest.)
"""

from __future__ import annotations

import pytest

from cronledger_infra.props import CronledgerProps


def test_an_executor_event_age_not_under_the_claim_lease_is_refused():
    with pytest.raises(ValueError, match="execute_max_event_age_secs < claim_lease_secs"):
        CronledgerProps(claim_lease_secs=60, execute_max_event_age_secs=60)


def test_context_strings_become_typed_props_and_an_unknown_key_is_refused():
    props = CronledgerProps.from_context(
        {
            "cronledger:nat_gateways": "0",
            "cronledger:deletion_protection": "false",
            "cronledger:min_capacity_acu": "0",
            "cronledger:target_arns": "arn:aws:sqs:eu-west-1:111111111111:a, arn:aws:sqs:eu-west-1:111111111111:b",
            "cronledger:claim_batch_size": "50",
            "@aws-cdk/core:checkSecretUsage": True,
        }
    )

    assert (props.nat_gateways, props.deletion_protection, props.min_capacity_acu) == (
        0,
        False,
        0.0,
    )
    assert props.target_arns == (
        "arn:aws:sqs:eu-west-1:111111111111:a",
        "arn:aws:sqs:eu-west-1:111111111111:b",
    )
    assert props.scheduler_environment() == {
        "CRONLEDGER_CLAIM_LEASE_SECS": "120",
        "CRONLEDGER_CLAIM_BATCH_SIZE": "50",
        "CRONLEDGER_LOOKAHEAD_SECS": "150",
        "CRONLEDGER_SECRETS": "aws",
        "CRONLEDGER_RECONCILE_MAX_SHARDS": "4",
    }
    with pytest.raises(ValueError, match="cronledger:nat_gatways"):
        CronledgerProps.from_context({"cronledger:nat_gatways": "0"})
    # (the tests' source-only asset is a Python argument, never a context value)
    with pytest.raises(ValueError, match="cronledger:bundle_dependencies"):
        CronledgerProps.from_context({"cronledger:bundle_dependencies": "false"})


def test_what_targets_may_name_is_empty_unless_listed_and_reaches_the_functions():
    default = CronledgerProps()
    chosen = CronledgerProps.from_context(
        {
            "cronledger:python_targets": "reports.jobs,billing",
            "cronledger:http_allow_networks": '["10.20.0.0/16", "fd12:3456::/48"]',
        }
    )

    assert (default.python_targets, default.http_allow_networks) == ((), ())
    assert "CRONLEDGER_PYTHON_TARGETS" not in default.scheduler_environment()
    assert "CRONLEDGER_HTTP_ALLOW_NETWORKS" not in default.scheduler_environment()
    environment = chosen.scheduler_environment()
    assert environment["CRONLEDGER_PYTHON_TARGETS"] == "reports.jobs,billing"
    assert environment["CRONLEDGER_HTTP_ALLOW_NETWORKS"] == "10.20.0.0/16,fd12:3456::/48"


@pytest.mark.parametrize(
    ("key", "value", "problem"),
    [
        ("python_targets", "os.path:join", "python_targets: 'os.path:join' is not a module name"),
        ("http_allow_networks", "10.0.0.1/8", "http_allow_networks: '10.0.0.1/8' is not a network"),
    ],
)
def test_a_bad_target_allow_list_is_refused_at_synth(key: str, value: str, problem: str):
    with pytest.raises(ValueError, match=problem):
        CronledgerProps.from_context({f"cronledger:{key}": value})


@pytest.mark.parametrize(
    ("key", "value", "problem"),
    [
        ("alert_topic_arn", "pager", "alert_topic_arn: 'pager' is not an SNS topic ARN"),
        (
            "alert_topic_arn",
            "arn:aws:sqs:eu-west-1:111111111111:pager",
            "is not an SNS topic ARN",
        ),
        ("event_bus", "ops bus", "event_bus: 'ops bus' is not an event bus name or ARN"),
        ("undelivered_event_age_threshold_secs", "0", "must be positive"),
    ],
)
def test_a_bad_event_destination_is_refused_at_synth_naming_its_field(
    key: str, value: str, problem: str
) -> None:
    with pytest.raises(ValueError, match=problem):
        CronledgerProps.from_context({f"cronledger:{key}": value})
