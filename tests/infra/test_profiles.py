"""Each deployment profile makes what it promises (infra/cronledger_infra/profiles.py): `lean`
no proxy, IAM straight to Aurora, no NAT and three endpoints in one AZ, and no tracing unless
X-Ray's endpoint is added; `lean-nat` no proxy, a NAT and no endpoint; `standard` (the default,
`synthesized`) the proxy, one NAT, and only the two endpoints whose traffic must not depend on
it; `ha` a reader in the second AZ and a NAT per AZ. Each passes cfn-lint and cdk-nag like the
default. The VPC's range is the operator's to choose."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cfnlint.api import ManualArgs, lint

from cronledger_infra.props import CronledgerProps
from tests.infra.synthesis import Synthesized, synthesize

pytestmark = pytest.mark.xdist_group(name="infra")


def _variables(synthesized: Synthesized) -> list[dict[str, object]]:
    functions = synthesized.resources("AWS::Lambda::Function")
    return [functions[i]["Environment"]["Variables"] for i in synthesized.functions().values()]


def _endpoint_subnets(synthesized: Synthesized) -> list[int]:
    return [
        len(e["SubnetIds"])
        for e in synthesized.resources("AWS::EC2::VPCEndpoint").values()
        if e.get("VpcEndpointType") == "Interface"
    ]


def _interface_services(synthesized: Synthesized) -> list[str]:
    """The service names of the interface endpoints (`lambda`, `sync-states`, …)."""
    return sorted(
        json.dumps(e["ServiceName"]).split(".")[-1].strip('"]}')
        for e in synthesized.resources("AWS::EC2::VPCEndpoint").values()
        if e.get("VpcEndpointType") == "Interface"
    )


def test_standard_is_the_default_with_the_proxy_one_nat_and_two_endpoints_in_two_azs(
    synthesized: Synthesized,
) -> None:
    assert CronledgerProps().profile == "standard"
    assert len(synthesized.resources("AWS::RDS::DBProxy")) == 1
    assert len(synthesized.resources("AWS::EC2::NatGateway")) == 1
    assert _interface_services(synthesized) == ["lambda", "secretsmanager"]
    assert _endpoint_subnets(synthesized) == [2] * 2
    assert all(_tracing(synthesized))
    assert len(synthesized.resources("AWS::RDS::DBInstance")) == 1
    assert all(v["CRONLEDGER_DB_PROXY"] == "true" for v in _variables(synthesized))


def _tracing(synthesized: Synthesized) -> list[bool]:
    """Per cronledger function, whether it traces (and Powertools' tracer is left on)."""
    functions = synthesized.resources("AWS::Lambda::Function")
    found = []
    for logical_id in synthesized.functions().values():
        active = functions[logical_id].get("TracingConfig") == {"Mode": "Active"}
        disabled = functions[logical_id]["Environment"]["Variables"].get(
            "POWERTOOLS_TRACE_DISABLED"
        )
        assert active != (disabled == "true"), logical_id
        found.append(active)
    return found


@pytest.mark.parametrize("profile", ["lean", "lean_nat", "ha"])
def test_each_profile_passes_cfn_lint_and_cdk_nag(
    profile: str, request: pytest.FixtureRequest
) -> None:
    synthesized: Synthesized = request.getfixturevalue(profile)
    matches = lint(
        json.dumps(synthesized.template), config=ManualArgs(regions=["us-east-1", "eu-west-1"])
    )
    assert synthesized.profile == profile.replace("_", "-")
    assert [str(m) for m in matches if m.rule.id.startswith("E")] == []
    assert synthesized.nag_failure is None, synthesized.nag_failure


def test_lean_reaches_aurora_straight_with_iam_and_pays_for_no_proxy_nat_or_second_az(
    lean: Synthesized,
) -> None:
    (cluster_id,) = lean.resources("AWS::RDS::DBCluster")
    cluster = lean.resources("AWS::RDS::DBCluster")[cluster_id]

    # No proxy, no NAT; three endpoints (events, lambda, secretsmanager), each in one subnet
    assert lean.resources("AWS::RDS::DBProxy") == {}
    assert lean.resources("AWS::EC2::NatGateway") == {}
    assert _interface_services(lean) == ["events", "lambda", "secretsmanager"]
    assert _endpoint_subnets(lean) == [1, 1, 1]

    # Every function connects to the cluster's endpoint with IAM, TLS verified in the code
    assert cluster["EnableIAMDatabaseAuthentication"] is True
    for variables in _variables(lean):
        assert variables["CRONLEDGER_DB_PROXY"] == "false"
        assert variables["CRONLEDGER_DB_IAM_AUTH"] == "true"
        assert variables["CRONLEDGER_DB_HOST"] == {"Fn::GetAtt": [cluster_id, "Endpoint.Address"]}
    # and each but migrate may connect as the application role, to this cluster only
    connects = [
        s
        for p in lean.resources("AWS::IAM::Policy").values()
        for s in p["PolicyDocument"]["Statement"]
        if s["Action"] == "rds-db:connect"
    ]
    assert len(connects) == len(lean.functions()) - 1
    assert all(json.dumps(s["Resource"]).endswith('/cronledger_app"]]}') for s in connects)

    # Only migrate, the schema's owner, is told the master user's secret (it logs in with it)
    told = [v for v in _variables(lean) if "CRONLEDGER_DB_ADMIN_SECRET_ARN" in v]
    assert len(told) == 1 and told[0]["CRONLEDGER_DB_USER"] == "cronledger"


def test_without_nat_the_endpoints_some_targets_need_can_be_added(tmp_path: Path) -> None:
    # SSM parameters named by secret_headers, and Express machines run with `wait`
    synthesized = synthesize(
        tmp_path,
        "lean",
        {"cronledger:vpc_endpoints": "lambda,secretsmanager,events,ssm,sync-states"},
    )

    assert synthesized.resources("AWS::EC2::NatGateway") == {}
    assert _interface_services(synthesized) == [
        "events",
        "lambda",
        "secretsmanager",
        "ssm",
        "sync-states",
    ]
    endpoints = synthesized.resources("AWS::EC2::VPCEndpoint").values()
    assert all(e["PrivateDnsEnabled"] is True for e in endpoints if "SubnetIds" in e)
    assert synthesized.nag_failure is None, synthesized.nag_failure


def test_an_unknown_endpoint_is_refused_naming_every_choice() -> None:
    with pytest.raises(ValueError, match=r"vpc_endpoints \['ec2'\] unknown; choose from "
                       r"\['secretsmanager', 'lambda', 'states', 'sqs', 'events', 'ssm', "
                       r"'sync-states', 'xray'\]"):  # fmt: skip
        CronledgerProps.from_context({"cronledger:vpc_endpoints": "lambda,secretsmanager,ec2"})


def test_without_nat_an_installation_without_the_events_endpoint_is_refused() -> None:
    # Every function puts the events its commits make on the bus: without NAT, only through it
    with pytest.raises(ValueError, match="without NAT, vpc_endpoints must include events"):
        CronledgerProps.from_context(
            {"cronledger:profile": "lean", "cronledger:vpc_endpoints": "lambda,secretsmanager"}
        )


def test_ha_adds_a_reader_in_the_second_az_and_a_nat_per_az(ha: Synthesized) -> None:
    instances = list(ha.resources("AWS::RDS::DBInstance").values())
    zones = [json.dumps(i["AvailabilityZone"]) for i in instances]

    assert len(instances) == 2 and len(set(zones)) == 2  # a writer and a reader, apart
    assert len(ha.resources("AWS::EC2::NatGateway")) == 2
    assert len(ha.resources("AWS::RDS::DBProxy")) == 1
    assert _endpoint_subnets(ha) == [2] * 5


def test_lean_nat_has_no_proxy_a_nat_and_no_interface_endpoint(lean_nat: Synthesized) -> None:
    assert lean_nat.resources("AWS::RDS::DBProxy") == {}
    assert len(lean_nat.resources("AWS::EC2::NatGateway")) == 1
    assert _interface_services(lean_nat) == []
    assert all(_tracing(lean_nat))  # through the NAT
    assert all(v["CRONLEDGER_DB_PROXY"] == "false" for v in _variables(lean_nat))


def test_lean_does_not_trace_as_x_ray_cannot_be_reached(lean: Synthesized) -> None:
    assert not any(_tracing(lean))


def test_lean_traces_once_the_x_ray_endpoint_is_added(tmp_path: Path) -> None:
    traced = synthesize(
        tmp_path, "lean", {"cronledger:vpc_endpoints": "lambda,secretsmanager,events,xray"}
    )

    assert "xray" in _interface_services(traced)
    assert all(_tracing(traced))
    assert traced.nag_failure is None, traced.nag_failure


def test_the_vpc_takes_the_range_the_operator_chose(tmp_path: Path) -> None:
    chosen = synthesize(tmp_path, "lean", {"cronledger:vpc_cidr": "172.20.0.0/20"})
    (vpc,) = chosen.resources("AWS::EC2::VPC").values()
    ingress = [
        rule["CidrIp"]
        for group in chosen.resources("AWS::EC2::SecurityGroup").values()
        for rule in group.get("SecurityGroupIngress", [])
        if "CidrIp" in rule
    ]

    assert vpc["CidrBlock"] == "172.20.0.0/20"
    assert ingress == ["172.20.0.0/20"]  # the endpoints admit the VPC, whatever its range


@pytest.mark.parametrize("cidr", ["10.0.0.0/24", "8.8.0.0/16", "fd00::/48", "ten"])
def test_a_vpc_range_that_is_public_too_small_or_not_ipv4_is_refused(cidr: str) -> None:
    with pytest.raises(ValueError, match="vpc_cidr"):
        CronledgerProps.from_context({"cronledger:vpc_cidr": cidr})


def test_an_unknown_profile_is_refused_naming_the_choices() -> None:
    with pytest.raises(
        ValueError, match=r"profile must be one of \['lean', 'lean-nat', 'standard', 'ha'\]"
    ):
        CronledgerProps.from_context({"cronledger:profile": "cheap"})
