"""A first deploy that fails rolls back cleanly and can be tried again, and no deploy waits on a
migration for longer than it may run: the cluster's deletion protection comes last, a retained
cluster is still removed when its own create rolls back, what the stack keeps has names
CloudFormation chose, the migration's trigger and CloudFormation both give up in minutes, and
the first rotation waits for the writer it logs in to."""

from __future__ import annotations

from typing import Any

import pytest

from tests.infra.synthesis import Synthesized, synthesize

pytestmark = pytest.mark.xdist_group(name="infra")

KEPT = {"Retain", "Snapshot", "RetainExceptOnCreate"}
#: Properties that give a resource a fixed physical name, by resource type.
NAMES = {
    "AWS::Logs::LogGroup": "LogGroupName",
    "AWS::RDS::DBCluster": "DBClusterIdentifier",
    "AWS::RDS::DBInstance": "DBInstanceIdentifier",
    "AWS::KMS::Key": "KeyId",
}


@pytest.fixture(scope="module")
def retained(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    """An installation that keeps its cluster on delete and chose no deletion protection."""
    return synthesize(
        tmp_path_factory.mktemp("cdk.out-retained"),
        more={
            "cronledger:removal_policy": "retain",
            "cronledger:deletion_protection": "false",
        },
    )


def _resources(synthesized: Synthesized) -> dict[str, dict[str, Any]]:
    return synthesized.template["Resources"]


def _one(synthesized: Synthesized, resource_type: str) -> tuple[str, dict[str, Any]]:
    (found,) = [(i, r) for i, r in _resources(synthesized).items() if r["Type"] == resource_type]
    return found


def test_the_cluster_is_protected_only_once_everything_else_exists(synthesized: Synthesized):
    cluster_id, cluster = _one(synthesized, "AWS::RDS::DBCluster")
    _, protect = _one(synthesized, "Custom::AWS")
    others = {
        logical_id
        for logical_id, resource in _resources(synthesized).items()
        # the database itself it names (its reference is a dependency); all else it waits for
        if not logical_id.startswith(("Database", "CronledgerDatabase", "AWS679f53fac"))
        and resource["Type"] != "AWS::CDK::Metadata"
    }
    call = "".join(
        p if isinstance(p, str) else "<ref>" for p in protect["Properties"]["Create"]["Fn::Join"][1]
    )

    assert cluster["Properties"]["DeletionProtection"] is False
    assert '"action":"modifyDBCluster"' in call and '"DeletionProtection":true' in call
    assert protect["Properties"]["Update"] == protect["Properties"]["Create"]
    assert {"Ref": cluster_id} in protect["Properties"]["Create"]["Fn::Join"][1]
    assert others <= set(protect["DependsOn"]), sorted(others - set(protect["DependsOn"]))


def test_without_deletion_protection_nothing_turns_it_on(retained: Synthesized):
    _, cluster = _one(retained, "AWS::RDS::DBCluster")

    assert cluster["Properties"]["DeletionProtection"] is False
    assert not [r for r in _resources(retained).values() if r["Type"] == "Custom::AWS"]


def test_a_retained_cluster_is_still_removed_when_its_own_create_rolls_back(
    retained: Synthesized,
):
    _, cluster = _one(retained, "AWS::RDS::DBCluster")
    instances = [r for r in _resources(retained).values() if r["Type"] == "AWS::RDS::DBInstance"]

    assert cluster["DeletionPolicy"] == "RetainExceptOnCreate"
    assert {i["DeletionPolicy"] for i in instances} == {"RetainExceptOnCreate"}


@pytest.mark.parametrize("which", ["default", "retained"])
def test_what_the_stack_keeps_has_names_cloudformation_chose(
    which: str, synthesized: Synthesized, retained: Synthesized
):
    template = synthesized if which == "default" else retained
    kept = {
        logical_id: resource
        for logical_id, resource in _resources(template).items()
        if resource.get("DeletionPolicy") in KEPT
    }

    assert kept
    for logical_id, resource in kept.items():
        assert NAMES.get(resource["Type"], "-") not in resource.get("Properties", {}), logical_id


def test_neither_the_trigger_nor_cloudformation_waits_for_migrate_past_its_timeout_for_long(
    synthesized: Synthesized,
):
    _, trigger = _one(synthesized, "Custom::Trigger")
    migrate = synthesized.resources("AWS::Lambda::Function")[
        synthesized.functions()["cronledger.aws.migrate.handler"]
    ]
    migrate_secs = migrate["Timeout"]
    trigger_secs = int(trigger["Properties"]["Timeout"]) / 1000
    service_secs = trigger["Properties"]["ServiceTimeout"]

    assert migrate_secs + 60 <= trigger_secs
    assert trigger_secs + 60 <= service_secs <= 900  # minutes, not CloudFormation's hour


def test_the_first_rotation_waits_for_the_writer(synthesized: Synthesized):
    _, schedule = _one(synthesized, "AWS::SecretsManager::RotationSchedule")
    writer = [
        i
        for i, r in _resources(synthesized).items()
        if r["Type"] == "AWS::RDS::DBInstance" and "Writer" in i
    ]

    assert len(writer) == 1
    assert writer[0] in schedule["DependsOn"]
