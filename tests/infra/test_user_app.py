"""A user's own CDK app with a `Cronledger` construct inside (infra/examples/user_app.py, the
app the docs show): three channels declared beside a function, a state machine and a queue.

The template must carry one custom resource per channel with its document, applied after the
migration and one after another, and the executor may reach exactly those three targets: no
tag condition, nothing named by context. cdk-nag finds nothing in what cronledger adds (the
app's own function, machine and queue are the user's to judge).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import Validations
from cdk_nag import AwsSolutionsChecks

from tests.infra.synthesis import Synthesized

STACK = "BillingApp"
USER_CONSTRUCTS = ("NightlyReport", "MonthEnd", "Invoices")
TARGET_ACTIONS = {
    "lambda:InvokeFunction",
    "states:StartExecution",
    "states:StartSyncExecution",
    "states:DescribeStateMachine",
    "states:DescribeExecution",
    "sqs:SendMessage",
    "events:PutEvents",
}


@pytest.fixture(scope="module")
def user_app(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    from cronledger_infra.application import new_app
    from cronledger_infra.bundling import source_only_code
    from cronledger_infra.stack import PROJECT_ROOT
    from examples.user_app import BillingStack

    outdir = tmp_path_factory.mktemp("cdk.out-user-app")
    app = new_app(outdir=str(outdir))
    BillingStack(app, STACK, cronledger_code=source_only_code(PROJECT_ROOT))
    Validations.of(app).add_plugins(AwsSolutionsChecks(app, verbose=True))
    try:
        app.synth()
        failure = None
    except RuntimeError as exc:  # the app's own resources have findings of their own
        failure = str(exc)
    template = json.loads((outdir / f"{STACK}.template.json").read_text())
    return Synthesized(app=app, outdir=outdir, template=template, nag_failure=failure)


def logical_id(s: Synthesized, resource_type: str, prefix: str) -> str:
    (found,) = [k for k in s.resources(resource_type) if k.startswith(prefix)]
    return found


def document(resource: dict[str, Any]) -> tuple[dict[str, Any], list[Any]]:
    """The channel document of a custom resource, with each reference to another resource
    replaced by `<ref>`, and those references in order."""
    joined = resource["Document"]["Fn::Join"][1]
    refs = [part for part in joined if not isinstance(part, str)]
    text = "".join(part if isinstance(part, str) else "<ref>" for part in joined)
    return json.loads(text), refs


def test_each_channel_is_one_custom_resource_carrying_its_document(user_app: Synthesized):
    channels = user_app.resources("Custom::CronledgerChannel")
    by_name = {document(props)[0]["name"]: props for props in channels.values()}

    assert sorted(by_name) == ["NightlyReport", "invoice-sweep", "month-end"]
    report, report_refs = document(by_name["NightlyReport"])
    assert report["status"] == "active"
    assert report["transport_config"] == {"schedule": "0 15 2 * * *", "timezone": "Europe/London"}
    assert report["target"] == {"type": "lambda", "function_arn": "<ref>"}
    function = logical_id(user_app, "AWS::Lambda::Function", "NightlyReport")
    assert report_refs == [{"Fn::GetAtt": [function, "Arn"]}]

    month_end, month_end_refs = document(by_name["month-end"])
    assert month_end["transport_config"] == {
        "schedule": "0 0 6 1 * *",
        "timezone": "Europe/London",
        "misfire_policy": "catch_up",
        "max_catch_up": 3,
        "concurrency": {"policy": "forbid"},
        "retry": {"max_attempts": 5},
    }
    assert month_end["labels"] == {"team": "billing"}
    machine = logical_id(user_app, "AWS::StepFunctions::StateMachine", "MonthEnd")
    assert month_end["target"]["type"] == "stepfunctions"
    assert month_end_refs == [{"Ref": machine}]

    sweep, sweep_refs = document(by_name["invoice-sweep"])
    assert sweep["transport_config"]["payload"] == {"batch": 100}
    assert sweep["target"]["type"] == "sqs"
    assert sweep_refs == [{"Ref": logical_id(user_app, "AWS::SQS::Queue", "Invoices")}]
    assert by_name["invoice-sweep"]["Removal"] == "purge"
    assert by_name["month-end"]["Removal"] == "archive"


def test_the_channels_apply_after_the_migration_one_after_another(user_app: Synthesized):
    resources = user_app.template["Resources"]
    channels = [k for k, r in resources.items() if r["Type"] == "Custom::CronledgerChannel"]
    trigger = logical_id(user_app, "Custom::Trigger", "SchedulerMigration")

    waits = {k: set(resources[k].get("DependsOn", [])) for k in channels}
    assert all(trigger in w for w in waits.values())
    first = [k for k in channels if not (waits[k] & set(channels))]
    assert len(first) == 1, waits
    # a chain: every other channel waits for exactly one channel
    assert sorted(len(waits[k] & set(channels)) for k in channels) == [0, 1, 1]


def statements(s: Synthesized, prefix: str) -> Iterator[dict[str, Any]]:
    for logical, props in s.resources("AWS::IAM::Policy").items():
        if logical.startswith(prefix):
            yield from props["PolicyDocument"]["Statement"]


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def test_the_executor_may_reach_exactly_the_declared_targets(user_app: Synthesized):
    function = logical_id(user_app, "AWS::Lambda::Function", "NightlyReport")
    machine = logical_id(user_app, "AWS::StepFunctions::StateMachine", "MonthEnd")
    queue = logical_id(user_app, "AWS::SQS::Queue", "Invoices")
    dead_letters = logical_id(user_app, "AWS::SQS::Queue", "SchedulerExecutionDeadLetters")
    bus = logical_id(user_app, "AWS::Events::EventBus", "SchedulerEvents")

    reached: dict[str, set[str]] = {}
    for statement in statements(user_app, "SchedulerFunctionsExecute"):
        assert "Condition" not in statement or "cronledger:target" not in json.dumps(statement)
        for action in set(as_list(statement["Action"])) & TARGET_ACTIONS:
            for resource in as_list(statement["Resource"]):
                reached.setdefault(action, set()).add(json.dumps(resource, sort_keys=True))

    def only(actions: tuple[str, ...], *logical_ids: str) -> None:
        """Each action reaches every one of `logical_ids` and nothing else."""
        for action in actions:
            named = {lid for lid in logical_ids if any(lid in r for r in reached[action])}
            assert named == set(logical_ids), (action, reached[action])
            assert all(any(lid in r for lid in logical_ids) for r in reached[action])

    only(("lambda:InvokeFunction",), function)
    starts = ("states:StartExecution", "states:StartSyncExecution", "states:DescribeStateMachine")
    only((*starts, "states:DescribeExecution"), machine)
    only(("sqs:SendMessage",), queue, dead_letters)  # the executor's own DLQ (Lambda's)
    only(("events:PutEvents",), bus)  # its installation's events: no bus is a target here
    assert "*" not in {r for rs in reached.values() for r in rs}


def test_cronledger_adds_no_unacknowledged_nag_finding(user_app: Synthesized):
    report = json.loads((Path(user_app.outdir) / "validation-report.json").read_text())
    paths = {
        construct["constructPath"]
        for plugin in report["pluginReports"]
        if plugin["pluginName"] == "AwsSolutions"
        for violation in plugin["violations"]
        for construct in violation["violatingConstructs"]
    }

    assert paths, "the app's own resources have findings, so this test can see one of ours"
    ours = {p for p in paths if not p.startswith(tuple(f"{STACK}/{c}/" for c in USER_CONSTRUCTS))}
    assert ours == set()


def test_a_channel_declared_twice_or_without_a_schedule_stops_the_synth():
    from aws_cdk import App, Stack

    from cronledger_infra import Cronledger
    from cronledger_infra.bundling import source_only_code
    from cronledger_infra.stack import PROJECT_ROOT

    stack = Stack(App(), "Twice")
    scheduler = Cronledger(stack, "Scheduler", code=source_only_code(PROJECT_ROOT))
    scheduler.add_channel("ping", schedule="0 * * * * *", target="https://example.com/ping")

    with pytest.raises(ValueError, match="declared twice"):
        scheduler.add_channel("ping", schedule="0 * * * * *", target="https://example.com/ping")
    with pytest.raises(ValueError, match="exactly one of schedule and at"):
        scheduler.add_channel("pong", target="https://example.com/pong")
    with pytest.raises(ValueError, match="https://"):
        scheduler.add_channel("plain", schedule="0 * * * * *", target="http://example.com")


def test_the_docs_show_the_example_app_verbatim():
    root = Path(__file__).resolve().parents[2]
    app = (root / "infra" / "examples" / "user_app.py").read_text()
    page = (root / "docs" / "how-to" / "cdk-app.md").read_text()

    assert f"```python\n{app}```" in page


def test_the_channels_handler_is_a_cronledger_function_that_may_reach_the_database(
    user_app: Synthesized,
):
    handler = user_app.functions()["cronledger.aws.channel_resource.handler"]
    props = user_app.resources("AWS::Lambda::Function")[handler]
    provider = logical_id(user_app, "AWS::Lambda::Function", "SchedulerChannelsProvider")
    api = user_app.functions()["cronledger.aws.api.handler"]

    assert "VpcConfig" in props
    assert props["Code"] == user_app.resources("AWS::Lambda::Function")[api]["Code"]
    assert props.get("ReservedConcurrentExecutions") is None
    connects = [
        s
        for s in statements(user_app, "SchedulerFunctionsChannels")
        if s["Action"] == "rds-db:connect"
    ]
    assert len(connects) == 1
    framework = user_app.resources("AWS::Lambda::Function")[provider]
    assert handler in json.dumps(framework["Environment"])
