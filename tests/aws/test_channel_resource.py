"""The channels function: CloudFormation's custom resource events for a channel declared in
CDK, as the Provider framework delivers them, applied to this run's PostgreSQL through the
API's routes (AWS through moto). Each test reads the channel back from the ledger."""

from __future__ import annotations

import json
from typing import Any

import pytest

from cronledger.aws import channel_resource
from cronledger.channels_as_code import DeployRefused
from cronledger.errors import NotFound
from cronledger.ledger import Ledger
from tests.aws.invocations import FakeContext

DEPLOYER = "BillingApp"
DOCUMENT: dict[str, Any] = {
    "name": "nightly-report",
    "status": "active",
    "transport_config": {"schedule": "0 15 2 * * *", "timezone": "Europe/London"},
    "target": {"type": "python", "callable": "tests.aws.targets:record"},
}


def event(
    request: str,
    document: dict[str, Any],
    *,
    old: dict[str, Any] | None = None,
    physical_id: str | None = None,
    removal: str = "archive",
) -> dict[str, Any]:
    """A custom resource event as the Provider framework passes it to its on-event handler."""
    properties = {
        "ServiceToken": "arn:aws:lambda:us-east-1:123456789012:function:framework",
        "Document": json.dumps(document),
        "Removal": removal,
        "Deployer": DEPLOYER,
    }
    sent: dict[str, Any] = {
        "RequestType": request,
        "ResourceType": "Custom::CronledgerChannel",
        "LogicalResourceId": "SchedulerChannelsnightlyreport",
        "StackId": "arn:aws:cloudformation:us-east-1:123456789012:stack/BillingApp/1",
        "RequestId": "d3f1c0de-0000-4000-8000-000000000001",
        "ResourceProperties": properties,
    }
    if old is not None:
        sent["OldResourceProperties"] = {**properties, "Document": json.dumps(old)}
    if physical_id is not None:
        sent["PhysicalResourceId"] = physical_id
    return sent


def deploy(sent: dict[str, Any]) -> dict[str, Any]:
    answer: dict[str, Any] = channel_resource.handler(
        sent, FakeContext("cronledger-channels", 120_000)
    )
    return answer


def edited(**transport: Any) -> dict[str, Any]:
    return {**DOCUMENT, "transport_config": {**DOCUMENT["transport_config"], **transport}}


def test_a_create_makes_the_channel_active_at_version_1(container: Ledger) -> None:
    answer = deploy(event("Create", DOCUMENT))

    channel = container.channels.get_channel(answer["PhysicalResourceId"])
    assert (channel.name, channel.status, channel.version) == ("nightly-report", "active", 1)
    assert channel.transport_config["timezone"] == "Europe/London"
    assert answer["Data"]["Outcome"] == "created"
    assert answer["Data"]["ChannelId"] == channel.channel_id


def test_an_update_writes_a_new_version_only_when_the_document_changed(container: Ledger) -> None:
    # Given a deployed channel
    channel_id = deploy(event("Create", DOCUMENT))["PhysicalResourceId"]

    # When the same document is applied again, then a changed one
    same = deploy(event("Update", DOCUMENT, old=DOCUMENT, physical_id=channel_id))
    changed = deploy(
        event("Update", edited(schedule="0 30 3 * * *"), old=DOCUMENT, physical_id=channel_id)
    )

    # Then the first wrote nothing and the second wrote version 2
    assert same["Data"]["Outcome"] == "unchanged"
    assert same["PhysicalResourceId"] == channel_id
    assert changed["Data"]["Outcome"] == "updated"
    channel = container.channels.get_channel(channel_id)
    assert channel.version == 2
    assert channel.transport_config["schedule"] == "0 30 3 * * *"
    assert container.channels.list_channel_versions(channel_id).total == 2
    assert channel.status_reason == f"applied by the deploy of {DEPLOYER}"


def test_labels_are_created_with_the_channel_and_a_labels_only_change_is_a_new_version(
    container: Ledger,
) -> None:
    # Given a channel declared with labels
    labelled = {**DOCUMENT, "labels": {"team": "billing", "example.com/tier": "gold"}}
    created = deploy(event("Create", labelled))
    channel_id = created["PhysicalResourceId"]

    # When only its labels change, then that document is deployed again
    relabelled = {**DOCUMENT, "labels": {"team": "ops"}}
    changed = deploy(event("Update", relabelled, old=labelled, physical_id=channel_id))
    same = deploy(event("Update", relabelled, old=relabelled, physical_id=channel_id))

    # Then version 1 kept the first labels, version 2 holds the new ones, the redeploy wrote
    # nothing, and the schedule is as declared
    assert (created["Data"]["Outcome"], changed["Data"]["Outcome"]) == ("created", "updated")
    assert same["Data"]["Outcome"] == "unchanged"
    channel = container.channels.get_channel(channel_id)
    assert (channel.version, channel.status, channel.labels) == (2, "active", {"team": "ops"})
    first = container.channels.get_channel(channel_id, version=1)
    assert first.labels == {"team": "billing", "example.com/tier": "gold"}
    assert channel.transport_config == first.transport_config == DOCUMENT["transport_config"]


def test_a_bad_label_fails_the_deploy_at_its_path(container: Ledger) -> None:
    with pytest.raises(DeployRefused, match=r"labels\.-team") as refused:
        deploy(event("Create", {**DOCUMENT, "labels": {"-team": "x"}}))

    assert "nightly-report" in str(refused.value)
    assert container.channels.list_channels().total == 0


def test_a_redeploy_of_an_unchanged_document_writes_nothing(container: Ledger) -> None:
    channel_id = deploy(event("Create", DOCUMENT))["PhysicalResourceId"]
    before = container.channels.get_channel(channel_id)

    deploy(event("Update", DOCUMENT, old=DOCUMENT, physical_id=channel_id))

    after = container.channels.get_channel(channel_id)
    assert (after.version, after.updated_at, after.status_reason) == (
        before.version,
        before.updated_at,
        before.status_reason,
    )


def test_a_change_made_through_the_api_is_overwritten_and_said(container: Ledger) -> None:
    # Given a deployed channel that an operator edited and paused through the API
    channel_id = deploy(event("Create", DOCUMENT))["PhysicalResourceId"]
    by_hand = edited(payload={"by": "hand"})["transport_config"]
    current = container.channels.get_channel(channel_id)
    container.channels.new_channel_version(channel_id, by_hand, current.target, current.timeout_ms)
    container.channels.set_channel_status(channel_id, "paused", reason="investigating")

    # When the next deploy changes the declaration
    wanted = edited(schedule="0 45 2 * * *")
    answer = deploy(event("Update", wanted, old=DOCUMENT, physical_id=channel_id))

    # Then the declaration wins, and the deploy's output and the channel's history say so
    channel = container.channels.get_channel(channel_id)
    assert channel.status == "active"
    assert channel.version == 3
    assert channel.transport_config == {**wanted["transport_config"]}
    assert "paused through the API" in answer["Data"]["Summary"]
    assert "overwrote" in (channel.status_reason or "")


def test_a_new_version_written_through_the_api_is_named_when_overwritten(
    container: Ledger,
) -> None:
    channel_id = deploy(event("Create", DOCUMENT))["PhysicalResourceId"]
    current = container.channels.get_channel(channel_id)
    by_hand = edited(schedule="0 0 5 * * *")["transport_config"]
    container.channels.new_channel_version(channel_id, by_hand, current.target, current.timeout_ms)

    answer = deploy(event("Update", DOCUMENT, old=DOCUMENT, physical_id=channel_id))

    summary = answer["Data"]["Summary"]
    assert "version 2 → 3" in summary
    assert "written through the API since the last deploy (version 2)" in summary
    channel = container.channels.get_channel(channel_id)
    assert channel.transport_config["schedule"] == "0 15 2 * * *"
    assert "written through the API" in (channel.status_reason or "")


def test_a_delete_archives_the_channel_and_keeps_its_history(container: Ledger) -> None:
    channel_id = deploy(event("Create", DOCUMENT))["PhysicalResourceId"]

    answer = deploy(event("Delete", DOCUMENT, physical_id=channel_id))

    channel = container.channels.get_channel(channel_id)
    assert channel.status == "archived"
    assert channel.status_reason == f"removed from the deploy of {DEPLOYER}"
    assert answer["PhysicalResourceId"] == channel_id


def test_a_delete_with_removal_policy_destroy_purges_the_channel(container: Ledger) -> None:
    channel_id = deploy(event("Create", DOCUMENT))["PhysicalResourceId"]

    deploy(event("Delete", DOCUMENT, physical_id=channel_id, removal="purge"))

    with pytest.raises(NotFound):
        container.channels.get_channel(channel_id)


def test_a_delete_of_a_channel_never_made_succeeds(container: Ledger) -> None:
    # A create that failed leaves CloudFormation a physical id that names no channel.
    answer = deploy(event("Delete", DOCUMENT, physical_id="d3f1c0de-never-made"))

    assert "already gone" in answer["Data"]["Summary"]


def test_a_bad_document_fails_the_deploy_with_every_problem_and_writes_nothing(
    container: Ledger,
) -> None:
    bad = {
        **DOCUMENT,
        "transport_config": {"schedule": "15 2 * * *", "timezone": "EST"},
        "target": {"type": "lambda"},
    }

    with pytest.raises(DeployRefused) as refused:
        deploy(event("Create", bad))

    message = str(refused.value)
    for path in ("transport_config.schedule", "transport_config.timezone", "target.function_arn"):
        assert f"{path}: " in message, message
    assert container.channels.list_channels().total == 0


def test_a_bad_update_changes_nothing(container: Ledger) -> None:
    channel_id = deploy(event("Create", DOCUMENT))["PhysicalResourceId"]

    with pytest.raises(DeployRefused, match=r"transport_config\.schedule"):
        deploy(
            event("Update", edited(schedule="0 0 0 30 2 *"), old=DOCUMENT, physical_id=channel_id)
        )

    channel = container.channels.get_channel(channel_id)
    assert (channel.version, channel.status) == (1, "active")


def test_a_declaration_of_an_archived_channels_name_is_refused_with_what_to_do(
    container: Ledger,
) -> None:
    channel_id = deploy(event("Create", DOCUMENT))["PhysicalResourceId"]
    deploy(event("Delete", DOCUMENT, physical_id=channel_id))

    with pytest.raises(DeployRefused, match="archived, which is final"):
        deploy(event("Create", DOCUMENT))


def test_a_channel_made_by_hand_under_the_declared_name_is_adopted_and_said(
    container: Ledger,
) -> None:
    made = container.channels.create_channel(
        "nightly-report",
        {"schedule": "0 0 1 * * *"},
        DOCUMENT["target"],
        60_000,
        status="paused",
    )

    answer = deploy(event("Create", DOCUMENT))

    assert answer["PhysicalResourceId"] == made.channel_id
    assert "made outside this deploy" in answer["Data"]["Summary"]
    channel = container.channels.get_channel(made.channel_id)
    assert (channel.status, channel.version) == ("active", 2)


def test_a_renamed_channel_is_created_anew_and_the_old_one_archived_by_its_delete(
    container: Ledger,
) -> None:
    # Given a deployed channel
    old_id = deploy(event("Create", DOCUMENT))["PhysicalResourceId"]

    # When the declaration is renamed: CloudFormation updates, sees a new physical id, and
    # then deletes the old one
    renamed = {**DOCUMENT, "name": "nightly-summary"}
    answer = deploy(event("Update", renamed, old=DOCUMENT, physical_id=old_id))
    deploy(event("Delete", DOCUMENT, physical_id=old_id))

    # Then the new name is a new active channel and the old one is archived with its history
    assert answer["PhysicalResourceId"] != old_id
    assert answer["Data"]["Outcome"] == "created"
    new = container.channels.get_channel(answer["PhysicalResourceId"])
    assert (new.name, new.status) == ("nightly-summary", "active")
    assert container.channels.get_channel(old_id).status == "archived"
