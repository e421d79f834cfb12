"""Two installations deploy side by side in one account and region: every name a stack gives
a resource itself (an alarm, the dashboard, the proxy, the API, the metrics namespace) follows
the installation's name, so two names never meet; and each installation's executor may use
only the targets and secrets tagged with its own name."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cronledger_infra.application import installation, new_app
from cronledger_infra.bundling import source_only_code
from cronledger_infra.props import CronledgerProps
from cronledger_infra.stack import INSTALLATION_TAG, PROJECT_ROOT
from cronledger_infra.target_access import SECRET_TAG, TARGET_TAG

pytestmark = pytest.mark.xdist_group(name="infra")

#: Properties that give a resource a name of its own, which must be unique in the account
#: and region (or, for the namespace, keep two installations' metrics apart).
PHYSICAL_NAMES = {
    "AlarmName",
    "DashboardName",
    "DBProxyName",
    "Name",
    "functionName",
    "FunctionName",
    "Namespace",
    "TopicName",
    "QueueName",
    "LogGroupName",
    "RoleName",
    "SecretName",
    "StateMachineName",
}
#: Resources whose `Name`-like properties are not physical names (a dimension, a stage).
NOT_A_NAME = {"AWS::ApiGatewayV2::Stage", "AWS::RDS::DBProxyTargetGroup"}


def _names(value: Any, resource_type: str) -> Iterator[str]:
    """Every literal string under a physical-name property, anywhere in `value`."""
    if isinstance(value, dict):
        for key, inner in value.items():
            if key in PHYSICAL_NAMES and isinstance(inner, str):
                if inner.startswith("AWS/"):
                    continue  # an AWS service's own metrics namespace
                if key != "Name" or resource_type == "AWS::ApiGatewayV2::Api":
                    yield inner
            else:
                yield from _names(inner, resource_type)
    elif isinstance(value, list):
        for inner in value:
            yield from _names(inner, resource_type)


def physical_names(template: dict[str, Any]) -> set[str]:
    return {
        name
        for resource in template["Resources"].values()
        if resource["Type"] not in NOT_A_NAME
        for name in _names(resource.get("Properties", {}), resource["Type"])
    }


def tag_conditions(template: dict[str, Any]) -> dict[str, set[str]]:
    """Tag key -> every value an IAM condition on `aws:ResourceTag/<key>` requires."""
    found: dict[str, set[str]] = {}
    for resource in template["Resources"].values():
        if resource["Type"] != "AWS::IAM::Policy":
            continue
        for statement in resource["Properties"]["PolicyDocument"]["Statement"]:
            for test in statement.get("Condition", {}).values():
                for key, value in test.items():
                    if key.startswith("aws:ResourceTag/"):
                        found.setdefault(key.removeprefix("aws:ResourceTag/"), set()).add(value)
    return found


def test_two_installations_in_one_app_share_no_name(tmp_path: Path) -> None:
    # Given one app holding two installations
    app = new_app(outdir=str(tmp_path))
    for name in ("Billing", "Reports"):
        installation(app, CronledgerProps(name=name), code=source_only_code(PROJECT_ROOT))

    # When it is synthesized
    assembly = app.synth()

    # Then each is its own stack, and every name either gives is its own
    billing, reports = (assembly.get_stack_by_name(name) for name in ("Billing", "Reports"))
    named = {
        "Billing": physical_names(billing.template),
        "Reports": physical_names(reports.template),
    }
    assert named["Billing"] and named["Reports"]
    assert named["Billing"].isdisjoint(named["Reports"])
    for installation_name, names in named.items():
        for name in names:
            assert installation_name in name, name
    # and every resource that takes tags says which installation it belongs to
    for stack, name in ((billing, "Billing"), (reports, "Reports")):
        tagged = [
            tag
            for resource in stack.template["Resources"].values()
            for tag in resource.get("Properties", {}).get("Tags", [])
            if isinstance(tag, dict) and tag.get("Key") == INSTALLATION_TAG
        ]
        assert tagged and all(tag["Value"] == name for tag in tagged)
        # and the targets and secrets it may use are those tagged with its own name
        conditions = tag_conditions(stack.template)
        assert set(conditions) == {TARGET_TAG, SECRET_TAG}
        assert all(values == {name} for values in conditions.values()), conditions


def test_an_installation_name_that_cannot_name_a_stack_is_refused() -> None:
    with pytest.raises(ValueError, match="name 'billing_eu'"):
        CronledgerProps.from_context({"cronledger:name": "billing_eu"})
    assert CronledgerProps.from_context({"cronledger:name": "billing-eu"}).namespace == "billing-eu"
