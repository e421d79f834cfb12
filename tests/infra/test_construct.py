"""The stack holds one `Cronledger` construct as its `Default` child, which CDK leaves out of
logical IDs: what the stack made before the construct existed keeps its logical ID, so an
upgrade updates the stateful resources in place instead of replacing them (a new logical ID
on the cluster would be a new, empty database)."""

from __future__ import annotations

from tests.infra.synthesis import Synthesized

#: The logical IDs of the stack's stateful resources, as the stack made them before the
#: construct held them.
STATEFUL = {
    "DatabaseCluster5B53A178": "AWS::RDS::DBCluster",
    "DatabaseClusterWriterD43085C6": "AWS::RDS::DBInstance",
    "DatabaseClusterProxy3967B7F1": "AWS::RDS::DBProxy",
    "CronledgerDatabaseClusterSecretD4A75B3F3fdaad7efa858a3daf9490cf0a702aeb": (
        "AWS::SecretsManager::Secret"
    ),
    "DatabaseClusterSecretAttachmentDC8466C0": "AWS::SecretsManager::SecretTargetAttachment",
    "ExecutionDeadLetters41F1E0B2": "AWS::SQS::Queue",
    "EventsBus45DE4339": "AWS::Events::EventBus",
    "MonitoringTopicKey423AF5B2": "AWS::KMS::Key",
}


def test_the_stateful_resources_keep_their_logical_ids(synthesized: Synthesized):
    resources = synthesized.template["Resources"]

    kept = {lid: resources[lid]["Type"] for lid in STATEFUL if lid in resources}
    assert kept == STATEFUL


def test_the_rotations_security_group_keeps_its_description(synthesized: Synthesized):
    descriptions = {
        props["GroupDescription"]
        for props in synthesized.resources("AWS::EC2::SecurityGroup").values()
    }

    assert "Cronledger/Database/Cluster/RotationSingleUser/SecurityGroup" in descriptions
    assert not any("/Default/" in d for d in descriptions)


def test_a_stack_without_declared_channels_has_no_channel_machinery(synthesized: Synthesized):
    assert synthesized.resources("Custom::CronledgerChannel") == {}
    assert "cronledger.aws.channel_resource.handler" not in synthesized.functions()
