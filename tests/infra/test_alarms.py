"""Alarms that reach someone, in the template: CloudWatch may publish to the alarm topics and
use their key, for this installation's alarms alone; the synth warns when no one is paged; a
failed rotation, failed or skipped occurrences and each dead letter are alarmed; what heals by
itself goes to the notice topic."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_cdk.assertions import Annotations, Match
from cfnlint.api import ManualArgs, lint  # type: ignore[import-untyped]

from tests.infra.synthesis import Synthesized, synthesize
from tests.infra.test_lint import findings

pytestmark = pytest.mark.xdist_group(name="infra")

PAGER = "arn:aws:sns:eu-west-1:111111111111:pager"
UNHEARD = "NOBODY WILL BE PAGED"


@pytest.fixture(scope="module")
def paged(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    """The stack with an address and an operator's topic to page."""
    return synthesize(
        tmp_path_factory.mktemp("cdk.out-paged"),
        more={"cronledger:alarm_email": "ops@example.com", "cronledger:alarm_topic_arn": PAGER},
    )


def _topic(synthesized: Synthesized, prefix: str) -> str:
    (topic,) = [t for t in synthesized.resources("AWS::SNS::Topic") if t.startswith(prefix)]
    return topic


def _policy_of(synthesized: Synthesized, topic: str) -> list[dict[str, Any]]:
    (policy,) = [
        p["PolicyDocument"]["Statement"]
        for p in synthesized.resources("AWS::SNS::TopicPolicy").values()
        if p["Topics"] == [{"Ref": topic}]
    ]
    return policy


def _key_policy(synthesized: Synthesized) -> list[dict[str, Any]]:
    topic = synthesized.resources("AWS::SNS::Topic")[_topic(synthesized, "MonitoringAlarms")]
    key = topic["KmsMasterKeyId"]["Fn::GetAtt"][0]
    return synthesized.resources("AWS::KMS::Key")[key]["KeyPolicy"]["Statement"]


def _alarm(synthesized: Synthesized, suffix: str) -> dict[str, Any]:
    (alarm,) = [
        a
        for a in synthesized.resources("AWS::CloudWatch::Alarm").values()
        if a["AlarmName"] == f"Cronledger-{suffix}"
    ]
    return alarm


def _joined(value: Any) -> str:
    """An `Fn::Join` of literals and pseudo parameters, as one string."""
    parts = value["Fn::Join"][1]
    return "".join(p if isinstance(p, str) else "${" + p["Ref"] + "}" for p in parts)


OUR_ALARMS = "arn:${AWS::Partition}:cloudwatch:${AWS::Region}:${AWS::AccountId}:alarm:Cronledger-*"


def test_cloudwatch_may_publish_to_both_topics_for_this_installations_alarms_alone(
    synthesized: Synthesized,
):
    for prefix in ("MonitoringAlarms", "MonitoringNotices"):
        topic = _topic(synthesized, prefix)
        (allowed,) = [
            s
            for s in _policy_of(synthesized, topic)
            if s["Effect"] == "Allow" and s["Principal"] == {"Service": "cloudwatch.amazonaws.com"}
        ]

        assert allowed["Action"] == "sns:Publish"
        assert allowed["Resource"] == {"Ref": topic}
        assert allowed["Condition"]["StringEquals"] == {
            "aws:SourceAccount": {"Ref": "AWS::AccountId"}
        }
        assert _joined(allowed["Condition"]["ArnLike"]["aws:SourceArn"]) == OUR_ALARMS


def test_the_topics_still_refuse_publishing_without_tls(synthesized: Synthesized):
    for prefix in ("MonitoringAlarms", "MonitoringNotices"):
        denied = [
            s for s in _policy_of(synthesized, _topic(synthesized, prefix)) if s["Effect"] == "Deny"
        ]

        assert [s["Condition"] for s in denied] == [{"Bool": {"aws:SecureTransport": "false"}}]


def test_the_topic_key_serves_cloudwatch_for_this_installations_alarms_alone(
    synthesized: Synthesized,
):
    (granted,) = [
        s
        for s in _key_policy(synthesized)
        if s["Principal"] == {"Service": "cloudwatch.amazonaws.com"}
    ]

    assert set(granted["Action"]) == {"kms:Decrypt", "kms:GenerateDataKey*"}
    assert granted["Condition"]["StringEquals"] == {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}
    assert _joined(granted["Condition"]["ArnLike"]["aws:SourceArn"]) == OUR_ALARMS


def test_every_service_the_topics_admit_is_held_to_this_installation(
    synthesized: Synthesized,
):
    statements = [
        s
        for prefix in ("MonitoringAlarms", "MonitoringNotices")
        for s in _policy_of(synthesized, _topic(synthesized, prefix))
    ]
    services = [s for s in statements if s["Effect"] == "Allow" and "Service" in s["Principal"]]

    assert {s["Principal"]["Service"] for s in services} == {
        "cloudwatch.amazonaws.com",
        "events.amazonaws.com",
    }
    for statement in services:
        assert statement["Condition"]["StringEquals"] == {
            "aws:SourceAccount": {"Ref": "AWS::AccountId"}
        }, statement
        assert "aws:SourceArn" in statement["Condition"]["ArnLike"], statement


def test_the_topic_key_serves_eventbridge_without_source_conditions_it_could_not_meet(
    synthesized: Synthesized,
):
    (granted,) = [
        s for s in _key_policy(synthesized) if s["Principal"] == {"Service": "events.amazonaws.com"}
    ]

    assert set(granted["Action"]) == {"kms:Decrypt", "kms:GenerateDataKey*"}
    assert "Condition" not in granted


def test_with_someone_paged_the_template_passes_cfn_lint_and_cdk_nag(paged: Synthesized):
    matches = lint(json.dumps(paged.template), config=ManualArgs(regions=["us-east-1"]))

    assert [str(m) for m in matches if m.rule.id.startswith("E")] == []
    assert paged.nag_failure is None, paged.nag_failure
    assert findings(paged) == []


def test_a_synth_with_nobody_to_page_warns_and_one_with_someone_does_not(
    synthesized: Synthesized, paged: Synthesized
):
    def warnings(s: Synthesized) -> list[Any]:
        stack = s.app.node.find_child("Cronledger")
        return Annotations.from_stack(stack).find_warning("*", Match.string_like_regexp(UNHEARD))

    assert len(warnings(synthesized)) == 1
    assert "alarm_email" in json.dumps(warnings(synthesized)[0].entry.data)
    assert warnings(paged) == []


def test_paging_alarms_notify_the_operators_topic_too_but_notices_do_not(paged: Synthesized):
    ours = _topic(paged, "MonitoringAlarms")
    notices = _topic(paged, "MonitoringNotices")

    assert _alarm(paged, "backlog-age")["AlarmActions"] == [{"Ref": ours}, PAGER]
    assert _alarm(paged, "backlog-age")["OKActions"] == [{"Ref": ours}, PAGER]
    assert _alarm(paged, "executor-dead-letters")["AlarmActions"] == [{"Ref": notices}]


def test_failed_and_misfire_skipped_occurrences_page_together(synthesized: Synthesized):
    alarm = _alarm(synthesized, "occurrences-failed-or-skipped")
    read = [q["MetricStat"]["Metric"] for q in alarm["Metrics"] if "MetricStat" in q]

    assert {(m["Namespace"], m["MetricName"]) for m in read} == {("Cronledger", "Occurrences")}
    assert sorted(d["Value"] for m in read for d in m["Dimensions"] if d["Name"] == "Status") == [
        "failed",
        "skipped_misfire",
    ]
    assert alarm["AlarmActions"] == [{"Ref": _topic(synthesized, "MonitoringAlarms")}]


def test_each_dead_letter_sent_notifies_instead_of_a_depth_that_stays_in_alarm(
    synthesized: Synthesized,
):
    alarm = _alarm(synthesized, "executor-dead-letters")

    assert (alarm["Namespace"], alarm["MetricName"]) == ("AWS/SQS", "NumberOfMessagesSent")
    assert (alarm["Statistic"], alarm["Threshold"]) == ("Sum", 1)
    assert alarm["AlarmActions"] == [{"Ref": _topic(synthesized, "MonitoringNotices")}]


def test_a_single_dropped_executor_event_does_not_page_but_a_run_of_them_does(
    synthesized: Synthesized,
):
    alarm = _alarm(synthesized, "executor-events-dropped")

    assert (alarm["DatapointsToAlarm"], alarm["EvaluationPeriods"]) == (3, 5)


def test_a_failed_rotation_of_the_database_secret_pages_the_alarm_topic(
    synthesized: Synthesized,
):
    (secret,) = synthesized.resources("AWS::SecretsManager::SecretTargetAttachment")
    (rule,) = [
        r
        for r in synthesized.resources("AWS::Events::Rule").values()
        if r.get("EventPattern", {}).get("source") == ["aws.secretsmanager"]
    ]
    (target,) = rule["Targets"]

    assert rule["EventPattern"]["detail"] == {
        "eventSource": ["secretsmanager.amazonaws.com"],
        "eventName": ["RotationFailed"],
        "additionalEventData": {"SecretId": [{"Ref": secret}]},
    }
    assert rule["EventPattern"]["detail-type"] == ["AWS Service Event via CloudTrail"]
    assert "EventBusName" not in rule  # the default bus, where AWS services put theirs
    assert target["Arn"] == {"Ref": _topic(synthesized, "MonitoringAlarms")}
    assert "rotate-secret" in target["InputTransformer"]["InputTemplate"]
