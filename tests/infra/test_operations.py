"""What an operator sees: alarms that page on what matters, each evaluated M out of N periods
with missing data counted as designed (infra/cronledger_infra/monitoring.py says why for each),
JSON access logs that name the route and the caller, and where the dashboard is."""

from __future__ import annotations

import json
from typing import Any

import pytest

from cronledger_infra.stack import PROJECT_ROOT
from tests.infra.synthesis import TARGET_ARNS, TARGET_KMS_KEY, Synthesized

pytestmark = pytest.mark.xdist_group(name="infra")

GE = "GreaterThanOrEqualToThreshold"
#: alarm name suffix -> (threshold, comparison, M, N, missing data)
EVALUATION = {
    "backlog-age": (300, "GreaterThanThreshold", 3, 5, "ignore"),
    "reconcile-stalled": (1, GE, 1, 1, "notBreaching"),
    "schedule-lag": (60, "GreaterThanThreshold", 2, 3, "notBreaching"),
    "database-unavailable": (1, GE, 3, 5, "notBreaching"),
    "executor-throttles": (1, GE, 3, 5, "notBreaching"),
    "executor-events-dropped": (1, GE, 3, 5, "notBreaching"),
    "ticks-dropped": (1, GE, 3, 5, "notBreaching"),
    "executor-dead-letters": (1, GE, 1, 1, "notBreaching"),
    "occurrences-failed-or-skipped": (1, GE, 1, 1, "notBreaching"),
}
#: The alarms that heal themselves and go to the notice topic, not the paging one.
NOTICES = {"executor-dead-letters"}


def alarms(synthesized: Synthesized) -> dict[str, dict[str, Any]]:
    """Alarm name suffix (after `Cronledger-`) -> its properties."""
    return {
        props["AlarmName"].removeprefix("Cronledger-"): props
        for props in synthesized.resources("AWS::CloudWatch::Alarm").values()
    }


def metric_stats(alarm: dict[str, Any]) -> list[dict[str, Any]]:
    """The metrics a math-expression alarm reads."""
    return [query["MetricStat"]["Metric"] for query in alarm["Metrics"] if "MetricStat" in query]


def dimension(metric: dict[str, Any], name: str) -> Any:
    (value,) = [d["Value"] for d in metric["Dimensions"] if d["Name"] == name]
    return value


def test_each_alarm_is_m_out_of_n_with_missing_data_treated_as_designed(synthesized: Synthesized):
    found = alarms(synthesized)
    topics = synthesized.resources("AWS::SNS::Topic")
    (paging,) = [t for t in topics if t.startswith("MonitoringAlarms")]
    (notices,) = [t for t in topics if t.startswith("MonitoringNotices")]

    for suffix, (threshold, comparison, m, n, missing) in EVALUATION.items():
        alarm = found[suffix]
        assert (
            alarm["Threshold"],
            alarm["ComparisonOperator"],
            alarm["DatapointsToAlarm"],
            alarm["EvaluationPeriods"],
            alarm["TreatMissingData"],
        ) == (threshold, comparison, m, n, missing), suffix
        topic = notices if suffix in NOTICES else paging
        assert alarm["AlarmActions"] == alarm["OKActions"] == [{"Ref": topic}], suffix
    for fn in ("reconcile", "claim", "execute", "api", "migrate"):
        assert found[f"{fn}-errors"]["TreatMissingData"] == "notBreaching"


def test_schedule_lag_alarms_on_the_p99_of_started_minus_due(synthesized: Synthesized):
    alarm = alarms(synthesized)["schedule-lag"]

    assert (alarm["Namespace"], alarm["MetricName"]) == ("Cronledger", "ScheduleLagSeconds")
    assert alarm["ExtendedStatistic"] == "p99"
    assert alarm["Period"] == 300
    assert alarm["Dimensions"] == [{"Name": "service", "Value": "cronledger"}]


def test_database_unavailability_sums_what_both_loops_record(synthesized: Synthesized):
    alarm = alarms(synthesized)["database-unavailable"]
    (expression,) = [q["Expression"] for q in alarm["Metrics"] if "Expression" in q]
    stats = metric_stats(alarm)

    assert expression.startswith("SUM([")
    assert {m["MetricName"] for m in stats} == {"DbUnavailable"}
    assert {dimension(m, "Operation") for m in stats} == {"reconcile", "claim"}
    assert {dimension(m, "service") for m in stats} == {"cronledger"}


def test_executor_throttles_and_dropped_events_are_lambdas_own_counts(synthesized: Synthesized):
    functions = synthesized.functions()
    execute = functions["cronledger.aws.execute.handler"]
    ticks = {
        functions["cronledger.aws.reconcile.handler"],
        functions["cronledger.aws.claim.handler"],
    }
    found = alarms(synthesized)

    throttles, dropped = found["executor-throttles"], found["executor-events-dropped"]
    assert (throttles["Namespace"], throttles["MetricName"]) == ("AWS/Lambda", "Throttles")
    assert dimension(throttles, "FunctionName") == {"Ref": execute}
    assert (dropped["Namespace"], dropped["MetricName"]) == ("AWS/Lambda", "AsyncEventsDropped")
    assert dimension(dropped, "FunctionName") == {"Ref": execute}
    tick_stats = metric_stats(found["ticks-dropped"])
    assert {m["MetricName"] for m in tick_stats} == {"AsyncEventsDropped"}
    assert {dimension(m, "FunctionName")["Ref"] for m in tick_stats} == ticks


def test_api_wakes_dropped_are_not_counted_as_dropped_ticks(synthesized: Synthesized):
    claim = synthesized.functions()["cronledger.aws.claim.handler"]
    alarm = alarms(synthesized)["ticks-dropped"]
    read = {q["Id"]: q["MetricStat"]["Metric"] for q in alarm["Metrics"] if "MetricStat" in q}
    (expression,) = [q["Expression"] for q in alarm["Metrics"] if "Expression" in q]
    resource = json.dumps(dimension(read["m_wakes"], "Resource"))

    assert expression == "SUM([m_reconcile, m_claim]) - FILL(m_wakes, 0)"
    assert dimension(read["m_wakes"], "FunctionName") == {"Ref": claim}
    assert claim in resource and ":wake" in resource  # Lambda's count for the wake alias
    assert [d["Name"] for d in read["m_claim"]["Dimensions"]] == ["FunctionName"]


def test_api_access_logs_are_json_naming_the_route_and_the_caller(synthesized: Synthesized):
    (stage,) = synthesized.resources("AWS::ApiGatewayV2::Stage").values()
    logged = json.loads(stage["AccessLogSettings"]["Format"])

    assert logged["routeKey"] == "$context.routeKey"
    assert logged["callerArn"] == "$context.identity.userArn"
    assert logged["status"] == "$context.status"
    # every value a quoted HTTP API variable: a blank one still leaves valid JSON
    assert all(isinstance(v, str) and v.startswith("$context.") for v in logged.values())
    # and none of REST APIs' own variables, which an HTTP API leaves unexpanded
    assert not {"$context.resourcePath", "$context.identity.user"} & set(logged.values())


def test_the_dashboard_url_is_an_output(synthesized: Synthesized):
    (dashboard,) = synthesized.resources("AWS::CloudWatch::Dashboard").values()
    url = json.dumps(synthesized.template["Outputs"]["DashboardUrl"]["Value"])

    assert dashboard["DashboardName"] == "Cronledger"
    assert "cloudwatch/home?region=" in url and "#dashboards/dashboard/Cronledger" in url


def test_what_destroy_leaves_behind_is_what_the_deploy_guide_lists(synthesized: Synthesized):
    resources = synthesized.template["Resources"]
    kept = {
        logical_id: resource["Type"]
        for logical_id, resource in resources.items()
        if resource.get("DeletionPolicy", "Delete") != "Delete"
    }
    # the log groups each named by a function, the API's stage or the VPC's flow log; CDK's
    # helper functions' own log groups are not kept
    lambdas = synthesized.resources("AWS::Lambda::Function")
    writers = [
        *(lambdas[f]["LoggingConfig"]["LogGroup"]["Ref"] for f in synthesized.functions().values()),
        *(s["AccessLogSettings"]["DestinationArn"]["Fn::GetAtt"][0] for s in
          synthesized.resources("AWS::ApiGatewayV2::Stage").values()),
        *(f["LogGroupName"]["Ref"] for f in synthesized.resources("AWS::EC2::FlowLog").values()),
    ]  # fmt: skip
    guide = (PROJECT_ROOT / "docs" / "how-to" / "deploy.md").read_text()

    assert sorted(kept.values()) == sorted(
        ["AWS::RDS::DBCluster", "AWS::KMS::Key"] + ["AWS::Logs::LogGroup"] * 7
    )
    assert sorted(writers) == sorted(i for i, kind in kept.items() if kind.endswith("LogGroup"))
    assert len(set(writers)) == 7 == len(synthesized.functions()) + 2
    (key,) = [i for i, kind in kept.items() if kind == "AWS::KMS::Key"]
    for topic in synthesized.resources("AWS::SNS::Topic").values():
        assert topic["KmsMasterKeyId"] == {"Fn::GetAtt": [key, "Arn"]}
    assert "| 7 log groups: the five functions', the API's access log, the VPC's flow log |" in (
        guide
    )
    assert "| the alarm topic's KMS key |" in guide


def _executor_statements(synthesized: Synthesized) -> list[dict[str, Any]]:
    execute = synthesized.functions()["cronledger.aws.execute.handler"]
    role = synthesized.resources("AWS::Lambda::Function")[execute]["Role"]["Fn::GetAtt"][0]
    return [
        statement
        for policy in synthesized.resources("AWS::IAM::Policy").values()
        if {"Ref": role} in policy["Roles"]
        for statement in policy["PolicyDocument"]["Statement"]
    ]


def _actions(statement: dict[str, Any]) -> set[str]:
    actions = statement["Action"]
    return set(actions if isinstance(actions, list) else [actions])


def test_a_listed_kms_key_may_encrypt_what_the_executor_sends_through_sqs_and_eventbridge(
    synthesized: Synthesized,
):
    (granted,) = [s for s in _executor_statements(synthesized) if _actions(s) & {"kms:Decrypt"}]

    assert _actions(granted) == {"kms:GenerateDataKey", "kms:Decrypt"}
    assert granted["Resource"] == TARGET_KMS_KEY
    assert granted["Condition"] == {
        "StringLike": {"kms:ViaService": ["sqs.*.amazonaws.com", "events.*.amazonaws.com"]}
    }


def test_an_express_machine_may_be_run_to_completion_where_it_may_be_started(
    synthesized: Synthesized,
):
    machine = next(arn for arn in TARGET_ARNS if ":states:" in arn)
    statements = _executor_statements(synthesized)
    for action in ("states:StartSyncExecution", "states:DescribeStateMachine"):
        named = [s for s in statements if action in _actions(s) and machine in json.dumps(s)]
        tagged = [s for s in statements if action in _actions(s) and "Condition" in s]
        assert named, action
        assert tagged and "states:StartExecution" in _actions(tagged[0]), action


def test_every_function_in_the_stack_cdks_helpers_included_logs_with_its_retention(
    synthesized: Synthesized,
):
    groups = synthesized.resources("AWS::Logs::LogGroup")
    functions = synthesized.resources("AWS::Lambda::Function")
    helpers = set(functions) - set(synthesized.functions().values())

    assert len(helpers) >= 3  # the trigger's provider, log retention's, the default SG's
    for logical_id, function in functions.items():
        group = function["LoggingConfig"]["LogGroup"]["Ref"]
        assert groups[group]["RetentionInDays"] == 30, logical_id
