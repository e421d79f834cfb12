"""The stack's side of SPEC §10, read from the synthesized template: what each function may
connect to, which database user it connects as, and which tagged resources and secrets the
executor may use."""

from __future__ import annotations

from typing import Any

import pytest

from cronledger_infra.database import APP_USER, DB_USER
from tests.infra.synthesis import Synthesized

pytestmark = pytest.mark.xdist_group(name="infra")

INSTALLATION = "Cronledger"  # the default name the session's synthesis uses


def _function(synthesized: Synthesized, entry: str) -> dict[str, Any]:
    logical_id = synthesized.functions()[f"cronledger.aws.{entry}.handler"]
    return synthesized.resources("AWS::Lambda::Function")[logical_id]


def _getatt(value: Any) -> str | None:
    return value["Fn::GetAtt"][0] if isinstance(value, dict) and "Fn::GetAtt" in value else None


def _egress(synthesized: Synthesized, entry: str) -> list[tuple[str, int, int, str]]:
    """Every outbound rule of the function's security groups: (protocol, from, to, where)."""
    groups = {_getatt(g) for g in _function(synthesized, entry)["VpcConfig"]["SecurityGroupIds"]}
    rules: list[tuple[str, int, int, str]] = []
    for logical_id, group in synthesized.resources("AWS::EC2::SecurityGroup").items():
        if logical_id in groups:
            for rule in group.get("SecurityGroupEgress", []):
                where = rule.get("CidrIp") or _getatt(rule.get("DestinationSecurityGroupId"))
                rules.append(
                    (
                        rule["IpProtocol"],
                        rule.get("FromPort", -1),
                        rule.get("ToPort", -1),
                        str(where),
                    )
                )
    for rule in synthesized.resources("AWS::EC2::SecurityGroupEgress").values():
        if _getatt(rule["GroupId"]) in groups:
            where = rule.get("CidrIp") or _getatt(rule.get("DestinationSecurityGroupId"))
            rules.append((rule["IpProtocol"], rule["FromPort"], rule["ToPort"], str(where)))
    return sorted(rules)


def _proxy_group(synthesized: Synthesized) -> str:
    (proxy,) = synthesized.resources("AWS::RDS::DBProxy").values()
    (group,) = proxy["VpcSecurityGroupIds"]
    return str(_getatt(group))


def _statements(synthesized: Synthesized, entry: str) -> list[dict[str, Any]]:
    role = _getatt(_function(synthesized, entry)["Role"])
    return [
        statement
        for policy in synthesized.resources("AWS::IAM::Policy").values()
        if {"Ref": role} in policy["Roles"]
        for statement in policy["PolicyDocument"]["Statement"]
    ]


def _db_user(resource: Any) -> str:
    """The database user an `rds-db:connect` grant names: its ARN ends `/<user>`."""
    return str(resource["Fn::Join"][1][-1]).rsplit("/", 1)[-1]


def _actions(statement: dict[str, Any]) -> set[str]:
    action = statement["Action"]
    return set(action if isinstance(action, list) else [action])


def test_the_executor_may_connect_out_only_to_web_ports_and_the_database(
    synthesized: Synthesized,
) -> None:
    assert _egress(synthesized, "execute") == sorted(
        [
            ("tcp", 443, 443, "0.0.0.0/0"),
            ("tcp", 80, 80, "0.0.0.0/0"),
            ("tcp", 5432, 5432, _proxy_group(synthesized)),
        ]
    )


@pytest.mark.parametrize("entry", ["reconcile", "claim", "api", "migrate"])
def test_every_other_function_may_connect_out_only_to_https_and_the_database(
    synthesized: Synthesized, entry: str
) -> None:
    assert _egress(synthesized, entry) == sorted(
        [("tcp", 443, 443, "0.0.0.0/0"), ("tcp", 5432, 5432, _proxy_group(synthesized))]
    )


def _cluster_group(synthesized: Synthesized) -> str:
    (cluster,) = synthesized.resources("AWS::RDS::DBCluster").values()
    (group,) = cluster["VpcSecurityGroupIds"]
    return str(_getatt(group))


@pytest.mark.parametrize("entry", ["reconcile", "claim", "execute", "api", "migrate"])
def test_without_a_proxy_the_database_port_leads_to_the_cluster_only(
    lean: Synthesized, entry: str
) -> None:
    web = [(443, 443), (80, 80)] if entry == "execute" else [(443, 443)]

    assert _egress(lean, entry) == sorted(
        [("tcp", low, high, "0.0.0.0/0") for low, high in web]
        + [("tcp", 5432, 5432, _cluster_group(lean))]
    )


@pytest.mark.parametrize("entry", ["reconcile", "claim", "execute", "api"])
def test_every_function_but_migrate_connects_as_the_application_role(
    synthesized: Synthesized, entry: str
) -> None:
    variables = _function(synthesized, entry)["Environment"]["Variables"]
    connects = [s for s in _statements(synthesized, entry) if "rds-db:connect" in _actions(s)]

    assert variables["CRONLEDGER_DB_USER"] == APP_USER
    assert "CRONLEDGER_DB_APP_USER" not in variables
    assert [_db_user(s["Resource"]) for s in connects] == [APP_USER]


def test_only_migrate_connects_as_the_schemas_owner_and_grants_the_application_role(
    synthesized: Synthesized,
) -> None:
    variables = _function(synthesized, "migrate")["Environment"]["Variables"]
    (connect,) = [s for s in _statements(synthesized, "migrate") if "rds-db:connect" in _actions(s)]

    assert (variables["CRONLEDGER_DB_USER"], variables["CRONLEDGER_DB_APP_USER"]) == (
        DB_USER,
        APP_USER,
    )
    assert _db_user(connect["Resource"]) == DB_USER


def test_the_proxy_reaches_the_database_as_the_application_role_with_iam(
    synthesized: Synthesized,
) -> None:
    (proxy,) = synthesized.resources("AWS::RDS::DBProxy").values()
    role = _getatt(proxy["RoleArn"])
    statements = [
        statement
        for policy in synthesized.resources("AWS::IAM::Policy").values()
        if {"Ref": role} in policy["Roles"]
        for statement in policy["PolicyDocument"]["Statement"]
    ]
    (connect,) = [s for s in statements if "rds-db:connect" in _actions(s)]

    assert proxy["DefaultAuthScheme"] == "IAM_AUTH"
    assert proxy["RequireTLS"] is True
    assert _db_user(connect["Resource"]) == APP_USER
    assert ":dbuser:" in str(connect["Resource"])


def test_tagged_targets_must_carry_this_installations_name(synthesized: Synthesized) -> None:
    tagged = [
        s
        for s in _statements(synthesized, "execute")
        if "aws:ResourceTag/cronledger:target" in str(s.get("Condition"))
    ]

    assert {action for s in tagged for action in _actions(s)} == {
        "lambda:InvokeFunction",
        "states:StartExecution",
        "states:StartSyncExecution",  # an Express machine with `wait`
        "states:DescribeStateMachine",  # which tells the executor the machine is Express
        "sqs:SendMessage",
        "events:PutEvents",
    }
    for statement in tagged:
        assert statement["Condition"] == {
            "StringEquals": {"aws:ResourceTag/cronledger:target": INSTALLATION}
        }


def test_the_executor_reads_only_secrets_tagged_for_this_installation(
    synthesized: Synthesized,
) -> None:
    reads = [
        s
        for s in _statements(synthesized, "execute")
        if _actions(s) & {"secretsmanager:GetSecretValue", "ssm:GetParameter", "ssm:GetParameters"}
    ]

    assert sorted(a for s in reads for a in _actions(s)) == [
        "secretsmanager:DescribeSecret",
        "secretsmanager:GetSecretValue",
        "ssm:GetParameter",
        "ssm:ListTagsForResource",
    ]
    for statement in reads:
        assert statement["Condition"] == {
            "StringEquals": {"aws:ResourceTag/cronledger:secret": INSTALLATION}
        }
    for entry in ("reconcile", "claim", "api"):
        assert not [
            s
            for s in _statements(synthesized, entry)
            if "secretsmanager:GetSecretValue" in _actions(s)
        ], entry


def test_no_python_module_or_private_network_is_allowed_unless_listed(
    synthesized: Synthesized,
) -> None:
    for entry in ("reconcile", "claim", "execute", "api", "migrate"):
        variables = _function(synthesized, entry)["Environment"]["Variables"]
        assert "CRONLEDGER_PYTHON_TARGETS" not in variables
        assert "CRONLEDGER_HTTP_ALLOW_NETWORKS" not in variables
        assert variables["CRONLEDGER_SECRETS"] == "aws"
