"""The installation's bus in the template: it exists, the functions are told of it and may put
on it alone, alerting kinds reach a person as sentences when an address is given, and events
left undelivered page the alarm topic."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import App, Stack, aws_lambda as lambda_
from aws_cdk.assertions import Template
from cfnlint.api import ManualArgs, lint  # type: ignore[import-untyped]

from tests.infra.synthesis import Synthesized, synthesize
from tests.infra.test_lint import findings

pytestmark = pytest.mark.xdist_group(name="infra")

ALERT_EMAIL = "oncall@example.com"
PAGER_TOPIC = "arn:aws:sns:eu-west-1:111111111111:pager"
ALERTING = {
    "Occurrence Failed",
    "Occurrence Abandoned",
    "Occurrence Overdue",
    "Channel Stalled",
    "Channel Recovered",
}
FAILED_DETAIL = {
    "kind": "occurrence.failed",
    "channel_name": "invoices",
    "scheduled_for": "2026-12-02T02:00:00Z",
    "attempt": 3,
    "max_attempts": 3,
    "status": "failed",
    "error": "HTTP 503 from billing",
    "links": {"console": "/#occurrence=01a2354d"},
}


@pytest.fixture(scope="module")
def alerted(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    """The stack with both alert destinations: an address to mail, and a topic of the
    operator's."""
    return synthesize(
        tmp_path_factory.mktemp("cdk.out-alerted"),
        more={"cronledger:alert_email": ALERT_EMAIL, "cronledger:alert_topic_arn": PAGER_TOPIC},
    )


def _the_bus(synthesized: Synthesized) -> str:
    (bus,) = synthesized.resources("AWS::Events::EventBus")
    return bus


def _put_events_resources(synthesized: Synthesized) -> dict[str, list[Any]]:
    """Per function (its handler's module name), every resource a statement lets it
    `events:PutEvents` on."""
    lambdas = synthesized.resources("AWS::Lambda::Function")
    found: dict[str, list[Any]] = {}
    for handler, logical_id in synthesized.functions().items():
        role = {"Ref": lambdas[logical_id]["Role"]["Fn::GetAtt"][0]}
        name = handler.split(".")[2]
        found[name] = []
        for policy in synthesized.resources("AWS::IAM::Policy").values():
            if role not in policy["Roles"]:
                continue
            for statement in policy["PolicyDocument"]["Statement"]:
                actions = statement["Action"]
                if "events:PutEvents" in (actions if isinstance(actions, list) else [actions]):
                    resources = statement["Resource"]
                    found[name] += resources if isinstance(resources, list) else [resources]
    return found


def _rules_on(synthesized: Synthesized, bus: str) -> dict[str, dict[str, Any]]:
    return {
        logical_id: rule
        for logical_id, rule in synthesized.resources("AWS::Events::Rule").items()
        if rule.get("EventBusName") == {"Ref": bus}
    }


def _as_delivered(template: Any, paths: dict[str, str], detail: dict[str, Any]) -> str:
    """The message EventBridge makes of `template` for an event with `detail`: the stack's
    reference filled as a deployment would, each `<name>` by the value at its path."""
    if isinstance(template, dict):  # Fn::Join of literals and references
        parts = template["Fn::Join"][1]
        template = "".join(p if isinstance(p, str) else _deployed(p) for p in parts)
    text: str = json.loads(template)
    for name, path in paths.items():
        value: Any = {"detail": detail}
        for key in path.removeprefix("$.").split("."):
            value = value[key]
        text = text.replace(f"<{name}>", str(value))
    return text


def _deployed(reference: dict[str, Any]) -> str:
    """What a deployment puts for the one reference a sentence holds, the API's endpoint."""
    assert reference["Fn::GetAtt"][1] == "ApiEndpoint", reference
    return "https://api123.execute-api.eu-west-1.amazonaws.com"


def test_the_installation_has_a_bus_of_its_own_and_every_function_is_told_of_it(
    synthesized: Synthesized,
) -> None:
    bus = _the_bus(synthesized)

    assert synthesized.resources("AWS::Events::EventBus")[bus]["Name"] == "Cronledger-events"
    for props in synthesized.resources("AWS::Lambda::Function").values():
        if str(props.get("Handler", "")).startswith("cronledger."):
            variables = props["Environment"]["Variables"]
            assert variables["CRONLEDGER_EVENT_BUS_NAME"] == {"Ref": bus}
            assert variables["CRONLEDGER_INSTALLATION"] == "Cronledger"


def test_the_functions_may_put_events_on_the_installations_bus_by_its_arn_and_never_on_any(
    synthesized: Synthesized,
) -> None:
    bus_arn = {"Fn::GetAtt": [_the_bus(synthesized), "Arn"]}

    granted = _put_events_resources(synthesized)

    # The three that only send the scheduler's events may reach that bus and nothing else
    for name in ("reconcile", "claim", "api"):
        assert granted[name] == [bus_arn], name
    # The executor reaches it beside its named and tagged targets; migrate sends nothing
    assert bus_arn in granted["execute"]
    assert granted["migrate"] == []
    assert "*" not in [r for resources in granted.values() for r in resources]


def test_without_an_alert_address_no_rule_reads_the_bus(synthesized: Synthesized) -> None:
    assert _rules_on(synthesized, _the_bus(synthesized)) == {}
    assert not [t for t in synthesized.template.get("Outputs", {}) if t == "AlertTopicArn"]


def test_events_left_undelivered_past_the_threshold_page_the_alarm_topic(
    synthesized: Synthesized,
) -> None:
    (alarm,) = [
        a
        for a in synthesized.resources("AWS::CloudWatch::Alarm").values()
        if a.get("MetricName") == "OldestUndeliveredEventAgeSeconds"
    ]
    (alarm_topic,) = [t for t in synthesized.resources("AWS::SNS::Topic") if "Alarms" in t]

    assert alarm["AlarmName"] == "Cronledger-events-undelivered"
    assert alarm["Namespace"] == "Cronledger"
    assert alarm["Dimensions"] == [{"Name": "service", "Value": "cronledger"}]
    assert (alarm["Statistic"], alarm["Period"], alarm["Threshold"]) == ("Maximum", 60, 600)
    assert alarm["ComparisonOperator"] == "GreaterThanThreshold"
    assert (alarm["DatapointsToAlarm"], alarm["EvaluationPeriods"]) == (3, 5)
    assert alarm["AlarmActions"] == alarm["OKActions"] == [{"Ref": alarm_topic}]


def test_each_alerting_kind_has_a_rule_on_the_bus_sending_it_to_both_alert_topics(
    alerted: Synthesized,
) -> None:
    rules = _rules_on(alerted, _the_bus(alerted)).values()
    (own_topic,) = [t for t in alerted.resources("AWS::SNS::Topic") if "Alerts" in t]

    assert sorted(r["EventPattern"]["detail-type"][0] for r in rules) == sorted(ALERTING)
    for rule in rules:
        assert rule["EventPattern"]["source"] == ["cronledger.Cronledger"]
        assert len(rule["EventPattern"]["detail-type"]) == 1
        assert [t["Arn"] for t in rule["Targets"]] == [{"Ref": own_topic}, PAGER_TOPIC]
        assert all("InputTransformer" in t for t in rule["Targets"])


def test_a_failed_occurrence_reaches_a_person_as_a_sentence_naming_what_where_and_why(
    alerted: Synthesized,
) -> None:
    (failed,) = [
        r
        for r in _rules_on(alerted, _the_bus(alerted)).values()
        if r["EventPattern"]["detail-type"] == ["Occurrence Failed"]
    ]

    messages = [
        _as_delivered(
            t["InputTransformer"]["InputTemplate"],
            t["InputTransformer"]["InputPathsMap"],
            FAILED_DETAIL,
        )
        for t in failed["Targets"]
    ]

    assert (
        messages
        == [
            "cronledger Cronledger: channel invoices failed: its run scheduled for "
            "2026-12-02T02:00:00Z failed on attempt 3 of 3 with: HTTP 503 from billing. "
            "Console: /#occurrence=01a2354d (cronledger console --api-url "
            "https://api123.execute-api.eu-west-1.amazonaws.com)."
        ]
        * 2
    )


def test_every_alert_sentence_fills_each_of_its_blanks_from_the_events_detail(
    alerted: Synthesized,
) -> None:
    for rule in _rules_on(alerted, _the_bus(alerted)).values():
        transformer = rule["Targets"][0]["InputTransformer"]
        template = json.dumps(transformer["InputTemplate"])
        blanks = set(re.findall(r"<([\w-]+)>", template))
        assert blanks == set(transformer["InputPathsMap"]), rule["EventPattern"]
        assert all(p.startswith("$.detail.") for p in transformer["InputPathsMap"].values())


def test_the_stacks_alert_topic_mails_the_address_under_a_key_eventbridge_may_use(
    alerted: Synthesized,
) -> None:
    ((topic_id, topic),) = [
        (i, t) for i, t in alerted.resources("AWS::SNS::Topic").items() if "Alerts" in i
    ]
    key_id = topic["KmsMasterKeyId"]["Fn::GetAtt"][0]
    key_policy = alerted.resources("AWS::KMS::Key")[key_id]["KeyPolicy"]["Statement"]
    subscriptions = alerted.resources("AWS::SNS::Subscription").values()

    assert any(
        s.get("Principal") == {"Service": "events.amazonaws.com"}
        and {"kms:Decrypt", "kms:GenerateDataKey*"} <= set(s["Action"])
        for s in key_policy
    )
    assert {"Protocol": "email", "Endpoint": ALERT_EMAIL, "TopicArn": {"Ref": topic_id}} in [
        {k: s[k] for k in ("Protocol", "Endpoint", "TopicArn")} for s in subscriptions
    ]
    assert alerted.template["Outputs"]["AlertTopicArn"]["Value"] == {"Ref": topic_id}


def test_with_alerts_routed_the_template_passes_cfn_lint_and_cdk_nag(alerted: Synthesized) -> None:
    matches = lint(
        json.dumps(alerted.template), config=ManualArgs(regions=["us-east-1", "eu-west-1"])
    )

    assert [str(m) for m in matches if m.rule.id.startswith("E")] == []
    assert alerted.nag_failure is None, alerted.nag_failure
    assert findings(alerted) == []


def test_a_bus_named_by_its_arn_is_used_and_granted_instead_of_a_new_one(tmp_path: Path) -> None:
    from cronledger_infra.bus import Bus

    arn = "arn:aws:events:eu-west-1:111111111111:event-bus/shared-ops"
    stack = Stack(App(outdir=str(tmp_path)), "Events")
    bus = Bus(stack, "Events", name="acme", existing_bus=arn)
    function = lambda_.Function(
        stack,
        "Sender",
        runtime=lambda_.Runtime.PYTHON_3_13,
        handler="index.handler",
        code=lambda_.Code.from_inline("def handler(event, context): pass"),
        environment=bus.environment,
    )
    bus.grant_put([function])

    template = Template.from_stack(stack).to_json()
    resources = template["Resources"].values()
    assert [r for r in resources if r["Type"] == "AWS::Events::EventBus"] == []
    (sender,) = [r for r in resources if r["Type"] == "AWS::Lambda::Function"]
    assert sender["Properties"]["Environment"]["Variables"] == {
        "CRONLEDGER_EVENT_BUS_NAME": arn,
        "CRONLEDGER_INSTALLATION": "acme",
    }
    (policy,) = [r for r in resources if r["Type"] == "AWS::IAM::Policy"]
    assert policy["Properties"]["PolicyDocument"]["Statement"] == [
        {"Action": "events:PutEvents", "Effect": "Allow", "Resource": arn}
    ]
