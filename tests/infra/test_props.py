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
    }
    with pytest.raises(ValueError, match="cronledger:nat_gatways"):
        CronledgerProps.from_context({"cronledger:nat_gatways": "0"})
