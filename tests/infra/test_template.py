"""The synthesized template keeps the promises issue 6 makes about the deployed scheduler.

Each test reads the CloudFormation the stack synthesizes (once per session, see conftest) and
checks one promise at the resource level: what runs, when, with which permissions, what alarms,
and that no secret reaches a function's environment.
"""

from __future__ import annotations

import json
import re

import pytest

from tests.infra.synthesis import TARGET_ARNS, Synthesized

pytestmark = pytest.mark.xdist_group(name="infra")

HANDLERS = {
    "cronledger.aws.reconcile.handler",
    "cronledger.aws.claim.handler",
    "cronledger.aws.execute.handler",
    "cronledger.aws.api.handler",
    "cronledger.aws.migrate.handler",
}
TARGET_ACTIONS = {
    "lambda:InvokeFunction",
    "states:StartExecution",
    "sqs:SendMessage",
    "events:PutEvents",
}
#: A tagged target is callable only when its tag names this installation (the default name).
TAGGED = {"StringEquals": {"aws:ResourceTag/cronledger:target": "Cronledger"}}
MIGRATE = "cronledger.aws.migrate.handler"


def _getatt_id(value: object) -> str | None:
    if isinstance(value, dict) and "Fn::GetAtt" in value:
        return value["Fn::GetAtt"][0]
    return None


def _statements(synthesized: Synthesized, role_id: str) -> list[dict]:
    return [
        statement
        for policy in synthesized.resources("AWS::IAM::Policy").values()
        if {"Ref": role_id} in policy["Roles"]
        for statement in policy["PolicyDocument"]["Statement"]
    ]


def _actions(statement: dict) -> list[str]:
    actions = statement["Action"]
    return actions if isinstance(actions, list) else [actions]


def _alarm_on(synthesized: Synthesized, metric_name: str) -> dict:
    alarms = [
        alarm
        for alarm in synthesized.resources("AWS::CloudWatch::Alarm").values()
        if alarm.get("MetricName") == metric_name
    ]
    assert len(alarms) == 1, f"expected one alarm on {metric_name}, found {len(alarms)}"
    return alarms[0]


def test_every_handler_runs_on_arm64_python_3_13_with_its_own_role(synthesized: Synthesized):
    functions = synthesized.resources("AWS::Lambda::Function")
    ours = {logical_id: functions[logical_id] for logical_id in synthesized.functions().values()}

    assert {props["Handler"] for props in ours.values()} == HANDLERS
    for props in ours.values():
        assert props["Architectures"] == ["arm64"]
        assert props["Runtime"] == "python3.13"
        assert props["VpcConfig"]["SubnetIds"], "every function runs inside the VPC"
    roles = [_getatt_id(props["Role"]) for props in ours.values()]
    assert len(set(roles)) == len(HANDLERS)


def test_reconcile_and_claim_each_have_a_one_minute_rule(synthesized: Synthesized):
    functions = synthesized.functions()
    targeted = {
        _getatt_id(target["Arn"])
        for rule in synthesized.resources("AWS::Events::Rule").values()
        if rule.get("ScheduleExpression") == "rate(1 minute)" and rule["State"] == "ENABLED"
        for target in rule["Targets"]
    }

    assert targeted == {
        functions["cronledger.aws.reconcile.handler"],
        functions["cronledger.aws.claim.handler"],
    }


def test_the_executor_is_invoked_once_within_its_lease_and_failures_go_to_a_queue(
    synthesized: Synthesized,
):
    execute = synthesized.functions()["cronledger.aws.execute.handler"]
    lease = int(
        synthesized.resources("AWS::Lambda::Function")[execute]["Environment"]["Variables"][
            "CRONLEDGER_CLAIM_LEASE_SECS"
        ]
    )
    (config,) = [
        config
        for config in synthesized.resources("AWS::Lambda::EventInvokeConfig").values()
        if config["FunctionName"] == {"Ref": execute}
    ]

    assert config["MaximumRetryAttempts"] == 0
    assert config["MaximumEventAgeInSeconds"] < lease
    destination = _getatt_id(config["DestinationConfig"]["OnFailure"]["Destination"])
    assert destination in synthesized.resources("AWS::SQS::Queue")


def _invokers_and_told(
    synthesized: Synthesized, handler: str, variable: str
) -> tuple[set[str], set[str]]:
    """The functions whose role may invoke `handler`'s function, and those told its name in
    `variable`."""
    functions = synthesized.functions()
    target = functions[handler]
    lambdas = synthesized.resources("AWS::Lambda::Function")
    invokers = {
        name
        for name, logical_id in functions.items()
        for statement in _statements(synthesized, _getatt_id(lambdas[logical_id]["Role"]))
        if "lambda:InvokeFunction" in statement["Action"]
        and target in json.dumps(statement["Resource"])
    }
    told = {
        name
        for name, logical_id in functions.items()
        if variable in lambdas[logical_id]["Environment"]["Variables"]
    }
    return invokers, told


def test_only_claim_knows_and_may_invoke_the_executor(synthesized: Synthesized):
    invokers, told = _invokers_and_told(
        synthesized, "cronledger.aws.execute.handler", "CRONLEDGER_EXECUTE_FUNCTION_NAME"
    )
    assert invokers == told == {"cronledger.aws.claim.handler"}


def test_only_the_api_knows_and_may_invoke_claim_to_wake_it_through_its_wake_alias(
    synthesized: Synthesized,
):
    functions = synthesized.functions()
    lambdas = synthesized.resources("AWS::Lambda::Function")
    ((alias_id, alias),) = synthesized.resources("AWS::Lambda::Alias").items()
    invokers = {
        name
        for name, logical_id in functions.items()
        for statement in _statements(synthesized, _getatt_id(lambdas[logical_id]["Role"]))
        if "lambda:InvokeFunction" in statement["Action"]
        and alias_id in json.dumps(statement["Resource"])
    }
    told = {
        name: variables["CRONLEDGER_CLAIM_FUNCTION_NAME"]
        for name, logical_id in functions.items()
        if "CRONLEDGER_CLAIM_FUNCTION_NAME"
        in (variables := lambdas[logical_id]["Environment"]["Variables"])
    }
    (delivery,) = [
        c
        for c in synthesized.resources("AWS::Lambda::EventInvokeConfig").values()
        if alias_id in json.dumps(c["Qualifier"])
    ]

    assert alias["FunctionName"] == {"Ref": functions["cronledger.aws.claim.handler"]}
    assert alias["Name"] == "wake"
    assert invokers == set(told) == {"cronledger.aws.api.handler"}
    assert told["cronledger.aws.api.handler"] == {"Ref": alias_id}  # its qualified ARN
    # a wake that cannot start within a minute is left to the next tick
    assert (delivery["MaximumRetryAttempts"], delivery["MaximumEventAgeInSeconds"]) == (0, 60)


def test_the_executor_reaches_only_named_or_tagged_targets(synthesized: Synthesized):
    execute = synthesized.functions()["cronledger.aws.execute.handler"]
    role = _getatt_id(synthesized.resources("AWS::Lambda::Function")[execute]["Role"])
    # Its own resources besides: the dead-letter queue, and the bus it puts its events on
    own = set(synthesized.resources("AWS::SQS::Queue")) | set(
        synthesized.resources("AWS::Events::EventBus")
    )
    named = set(TARGET_ARNS) | {f"{arn}:*" for arn in TARGET_ARNS}
    granted = [
        s
        for s in _statements(synthesized, role)
        if TARGET_ACTIONS & set(s["Action"] if isinstance(s["Action"], list) else [s["Action"]])
    ]

    tagged = [s for s in granted if s.get("Condition") == TAGGED]
    assert len(tagged) == len(TARGET_ACTIONS), "each target action is also open to tagged resources"
    for statement in granted:
        if statement in tagged:
            continue
        resources = statement["Resource"]
        for resource in resources if isinstance(resources, list) else [resources]:
            assert (
                resource in named if isinstance(resource, str) else (_getatt_id(resource) in own)
            ), resource
    listed = json.dumps(granted)
    assert all(arn in listed for arn in TARGET_ARNS)


def test_every_api_route_requires_iam_and_the_stage_is_throttled(synthesized: Synthesized):
    routes = synthesized.resources("AWS::ApiGatewayV2::Route").values()
    (stage,) = synthesized.resources("AWS::ApiGatewayV2::Stage").values()

    assert {route["RouteKey"] for route in routes} == {
        "ANY /api/v1/{proxy+}",
        "GET /health",
        "GET /openapi.json",
        "GET /swagger",  # the app serves it, so the gateway must route it
    }
    assert all(route["AuthorizationType"] == "AWS_IAM" for route in routes)
    assert stage["DefaultRouteSettings"]["ThrottlingRateLimit"] > 0
    assert stage["DefaultRouteSettings"]["ThrottlingBurstLimit"] > 0


def test_the_backlog_alarm_watches_the_oldest_pending_age(synthesized: Synthesized):
    alarm = _alarm_on(synthesized, "OldestPendingAgeSeconds")
    (topic,) = [t for t in synthesized.resources("AWS::SNS::Topic") if "Alarms" in t]

    assert alarm["Namespace"] == "Cronledger"
    assert alarm["Dimensions"] == [{"Name": "service", "Value": "cronledger"}]
    assert alarm["ComparisonOperator"] == "GreaterThanThreshold"
    assert alarm["Threshold"] == 300
    assert alarm["AlarmActions"] == [{"Ref": topic}]


def test_a_reconcile_invoked_without_completing_a_pass_is_alarmed(synthesized: Synthesized):
    (alarm,) = [
        a
        for a in synthesized.resources("AWS::CloudWatch::Alarm").values()
        if a["AlarmName"].endswith("-reconcile-stalled")
    ]
    read = {q["Id"]: q["MetricStat"]["Metric"] for q in alarm["Metrics"] if "MetricStat" in q}
    (expression,) = [q["Expression"] for q in alarm["Metrics"] if "Expression" in q]

    assert read["invoked"]["MetricName"] == "Invocations"
    assert read["invoked"]["Dimensions"] == [
        {
            "Name": "FunctionName",
            "Value": {"Ref": synthesized.functions()["cronledger.aws.reconcile.handler"]},
        }
    ]
    assert read["passed"]["MetricName"] == "ReconcileSucceeded"
    assert expression == "IF(FILL(invoked, 0) > 0 AND FILL(passed, 0) < 1, 1, 0)"
    # before the first tick there is neither, and a fresh installation pages nobody
    assert alarm["TreatMissingData"] == "notBreaching"


def test_each_function_errors_and_each_dead_letter_sent_are_alarmed(synthesized: Synthesized):
    alarms = list(synthesized.resources("AWS::CloudWatch::Alarm").values())
    (queue,) = synthesized.resources("AWS::SQS::Queue")
    errored = {
        dimension["Value"]["Ref"]
        for alarm in alarms
        if alarm.get("MetricName") == "Errors"
        for dimension in alarm["Dimensions"]
    }
    (sent,) = [a for a in alarms if a.get("MetricName") == "NumberOfMessagesSent"]

    assert errored == set(synthesized.functions().values())
    assert [_getatt_id(d["Value"]) for d in sent["Dimensions"]] == [queue]
    assert sent["Statistic"] == "Sum"
    assert not [a for a in alarms if a.get("MetricName") == "ApproximateNumberOfMessagesVisible"]


def test_the_database_is_encrypted_private_and_reached_through_a_tls_iam_proxy(
    synthesized: Synthesized,
):
    (cluster,) = synthesized.resources("AWS::RDS::DBCluster").values()
    (proxy,) = synthesized.resources("AWS::RDS::DBProxy").values()

    assert cluster["StorageEncrypted"] is True
    assert cluster["EnableIAMDatabaseAuthentication"] is True
    assert cluster["DeletionProtection"] is False  # turned on last (test_first_deploy.py)
    assert cluster["Engine"] == "aurora-postgresql"
    assert "ServerlessV2ScalingConfiguration" in cluster
    assert proxy["RequireTLS"] is True
    assert [auth["IAMAuth"] for auth in proxy["Auth"]] == ["REQUIRED"]


def test_no_function_environment_holds_a_password_or_secret(synthesized: Synthesized):
    secrets = {
        logical_id
        for kind in ("AWS::SecretsManager::Secret", "AWS::SecretsManager::SecretTargetAttachment")
        for logical_id in synthesized.resources(kind)
    }
    assert secrets, "the database's master secret exists, so this test can see a leak"
    suspicious_name = re.compile(r"PASS|PWD|SECRET|TOKEN|CREDENTIAL|PRIVATE", re.IGNORECASE)

    for handler, logical_id in synthesized.functions().items():
        variables = synthesized.resources("AWS::Lambda::Function")[logical_id]["Environment"][
            "Variables"
        ]
        assert variables["CRONLEDGER_SECRETS"] == "aws"  # where references point, no secret
        for name, value in variables.items():
            if (handler, name) == (MIGRATE, "CRONLEDGER_DB_SECRET_ARN"):
                continue  # the secret's name, not its value (the test below)
            rendered = json.dumps(value)
            assert name == "CRONLEDGER_SECRETS" or not suspicious_name.search(name), name
            assert "resolve:secretsmanager" not in rendered, name
            assert not any(secret in rendered for secret in secrets), name
        assert variables["CRONLEDGER_DB_IAM_AUTH"] == "true"
        assert _getatt_id(variables["CRONLEDGER_DB_HOST"]) in synthesized.resources(
            "AWS::RDS::DBProxy"
        )


def test_only_migrate_knows_the_master_secret_and_it_may_describe_it_but_not_read_it(
    synthesized: Synthesized,
):
    lambdas = synthesized.resources("AWS::Lambda::Function")
    functions = synthesized.functions()
    (attachment,) = synthesized.resources("AWS::SecretsManager::SecretTargetAttachment")
    told = {
        handler
        for handler, logical_id in functions.items()
        if "CRONLEDGER_DB_SECRET_ARN" in lambdas[logical_id]["Environment"]["Variables"]
    }
    migrate = lambdas[functions[MIGRATE]]
    secret_actions = {
        action
        for statement in _statements(synthesized, _getatt_id(migrate["Role"]))
        for action in _actions(statement)
        if action.startswith("secretsmanager:")
    }

    assert told == {MIGRATE}
    assert migrate["Environment"]["Variables"]["CRONLEDGER_DB_SECRET_ARN"] == {"Ref": attachment}
    assert secret_actions == {"secretsmanager:DescribeSecret"}
    # and its connections may wait as long as it runs (a migration has no statement timeout)
    socket = int(migrate["Environment"]["Variables"]["CRONLEDGER_DB_SOCKET_TIMEOUT_SECS"])
    assert socket == migrate["Timeout"]


def test_migrations_run_after_the_database_and_before_the_other_functions(
    synthesized: Synthesized,
):
    resources = synthesized.template["Resources"]
    functions = synthesized.functions()
    ((trigger_id, trigger),) = [
        (logical_id, resource)
        for logical_id, resource in resources.items()
        if resource["Type"] == "Custom::Trigger"
    ]
    version = resources[trigger["Properties"]["HandlerArn"]["Ref"]]
    # (the rotation schedule too: creating it starts the first rotation, which migrate waits
    # out, cronledger.aws.migrate)
    database = (
        set(synthesized.resources("AWS::RDS::DBCluster"))
        | set(synthesized.resources("AWS::RDS::DBProxy"))
        | set(synthesized.resources("AWS::SecretsManager::RotationSchedule"))
    )

    assert version["Properties"]["FunctionName"] == {
        "Ref": functions["cronledger.aws.migrate.handler"]
    }
    assert database <= set(trigger["DependsOn"])
    for handler, logical_id in functions.items():
        if handler != "cronledger.aws.migrate.handler":
            assert trigger_id in resources[logical_id].get("DependsOn", []), handler
