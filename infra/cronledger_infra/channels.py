"""Channels declared in CDK: each a channel document applied by a custom resource at deploy,
and the executor's grant on exactly the target it names.

The document is the one the API takes (`name`, `status`, `transport_config`, `target`,
`timeout_ms`, `labels`): CloudFormation hands it to `cronledger.aws.channel_resource` (a
function on the installation's own asset, behind CDK's Provider framework), which applies it
through the API's own routes, so a deploy validates and writes exactly as `channels apply`
does. The document travels as one JSON string: CloudFormation would turn the numbers and
booleans of a nested property into strings.

The target decides the grant, made with its own `grant_*` call on the executor's role: a
function is invoked (and its versions and aliases, for a `qualifier`), a state machine started
and its executions described (for `wait`), a queue sent to (with its key, if it has one), a
bus put to; an `https://` URL needs nothing. No tag and no context list is involved.

The channels apply one after another (each waits for the one declared before it), after the
migration: one database connection at a time, never against an old schema. A resource's
physical id is its channel's id, so renaming a channel creates the new one and then removes
the old. Removing a declaration archives the channel (its history stays), or purges it with
`RemovalPolicy.DESTROY`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from aws_cdk import (
    Arn,
    ArnFormat,
    CfnOutput,
    CustomResource,
    Duration,
    RemovalPolicy,
    Stack,
    aws_events as events,
    aws_iam as iam,
    aws_lambda as lambda_,
    aws_logs as logs,
    aws_sqs as sqs,
    aws_stepfunctions as sfn,
    custom_resources as cr,
)
from constructs import Construct, IConstruct

from cronledger_infra.nag import acknowledge

ChannelTarget = lambda_.IFunction | sfn.IStateMachine | sqs.IQueue | events.IEventBus | str
RESOURCE_TYPE = "Custom::CronledgerChannel"
#: How long one channel's apply may take: a cold start in the VPC and a few statements.
APPLY_TIMEOUT = Duration.minutes(2)
#: How cdk-nag spells the stack's partition, region and account in a finding's id.
_ACCOUNT = "arn:<AWS::Partition>:{}:<AWS::Region>:<AWS::AccountId>"
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9_.-]+")


def target_document(target: ChannelTarget, options: Mapping[str, Any]) -> dict[str, Any]:
    """The `target` of a channel document for a construct (or an https URL), with `options`
    (`qualifier`, `wait`, `method`, `source`, `detail_type`, …) added as they are."""
    if isinstance(target, str):
        if not target.startswith("https://"):
            raise ValueError(f"target {target!r}: a URL target must be an https:// URL")
        return {"type": "http", "url": target, **options}
    if hasattr(target, "function_arn"):
        return {"type": "lambda", "function_arn": target.function_arn, **options}
    if hasattr(target, "state_machine_arn"):
        return {"type": "stepfunctions", "state_machine_arn": target.state_machine_arn, **options}
    if hasattr(target, "queue_url"):
        return {"type": "sqs", "queue_url": target.queue_url, **options}
    if hasattr(target, "event_bus_name"):
        missing = [key for key in ("source", "detail_type") if key not in options]
        if missing:
            raise ValueError(
                f"an event bus target needs target_options {missing} (the events' source "
                "and detail-type, e.g. {'source': 'com.example.reports', 'detail_type': "
                "'nightly-report-due'})"
            )
        return {"type": "eventbridge", "event_bus_name": target.event_bus_name, **options}
    raise TypeError(
        f"target {target!r} is not a Lambda function, state machine, queue, event bus or "
        "https:// URL"
    )


def channel_name_of(construct: IConstruct) -> str:
    """A channel name from a construct's id (`NightlyReport` for `schedule(fn, …)`)."""
    return _UNSAFE_NAME.sub("-", construct.node.id).strip("-._") or "channel"


class Channels(Construct):
    """The provider every channel's custom resource goes through, and the grants."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        handler: lambda_.Function,
        executor: lambda_.Function,
        after: Construct,
        log_retention: logs.RetentionDays,
    ) -> None:
        super().__init__(scope, construct_id)
        self._executor = executor
        self._after = after
        self._names: set[str] = set()
        self._last: CustomResource | None = None
        self.provider = cr.Provider(
            self,
            "Provider",
            on_event_handler=handler,
            log_group=logs.LogGroup(
                self, "ProviderLogs", retention=log_retention, removal_policy=RemovalPolicy.DESTROY
            ),
        )
        acknowledge(
            self.provider,
            {
                "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/"
                "AWSLambdaBasicExecutionRole]": "CDK's custom resource framework function "
                "writes only its own logs with this AWS-maintained policy.",
                "AwsSolutions-L1": "CDK's custom resource framework function runs on the "
                "Node.js runtime CDK chose for it, and only invokes the channels' handler.",
                "AwsSolutions-IAM5[Resource::<"
                + _logical_id(handler)
                + ".Arn>:*]": "CDK's framework function may invoke the channels' handler "
                "and its versions; no other function.",
            },
        )

    def add(
        self,
        document: dict[str, Any],
        target: ChannelTarget,
        removal_policy: RemovalPolicy,
    ) -> Channel:
        name = document["name"]
        if name in self._names:
            raise ValueError(f"channel {name!r} is declared twice; give each a name of its own")
        self._names.add(name)
        self.grant(target)
        channel = Channel(
            self,
            name,
            service_token=self.provider.service_token,
            document=document,
            purge=removal_policy == RemovalPolicy.DESTROY,
        )
        channel.resource.node.add_dependency(self._after)
        if self._last is not None:
            channel.resource.node.add_dependency(self._last)
        self._last = channel.resource
        return channel

    def grant(self, target: ChannelTarget) -> None:
        """What the executor needs to run `target`, and nothing more."""
        executor = self._executor
        if isinstance(target, str):
            return
        if hasattr(target, "function_arn"):
            target.grant_invoke(executor)
            self._acknowledge(
                _nag_text(self, target.function_arn),
                "Lets a channel's target name a version or alias (its `qualifier`) of the "
                "one function the channel declares; no other function.",
            )
        elif hasattr(target, "state_machine_arn"):
            machine = target.state_machine_arn
            target.grant_start_execution(executor)
            target.grant_start_sync_execution(executor)
            # DescribeStateMachine: is it an Express machine (run synchronously)?
            iam.Grant.add_to_principal(
                grantee=executor, actions=["states:DescribeStateMachine"], resource_arns=[machine]
            )
            # DescribeExecution, on this machine's executions (polled while a `wait` runs)
            target.grant_execution(executor, "states:DescribeExecution")
            # the machine's name as CDK's grant takes it: from the ARN
            name = _nag_text(self, Arn.split(machine, ArnFormat.COLON_RESOURCE_NAME).resource_name)
            self._acknowledge(
                None if name is None else f"{_ACCOUNT.format('states')}:execution:{name}",
                "Read-only status of the executions of the one state machine the channel "
                "declares, which the executor polls while a `wait` target runs.",
            )
        elif hasattr(target, "queue_url"):
            target.grant_send_messages(executor)
        elif hasattr(target, "event_bus_name"):
            target.grant_put_events_to(executor)

    def _acknowledge(self, resource: str | None, reason: str) -> None:
        if resource is not None:
            acknowledge(self._executor, {f"AwsSolutions-IAM5[Resource::{resource}:*]": reason})


class Channel(Construct):
    """One channel: its custom resource, and the deploy's word on it as a stack output."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        service_token: str,
        document: dict[str, Any],
        purge: bool,
    ) -> None:
        super().__init__(scope, construct_id)
        self.document = document
        self.resource = CustomResource(
            self,
            "Resource",
            service_token=service_token,
            resource_type=RESOURCE_TYPE,
            properties={
                "Document": Stack.of(self).to_json_string(document),
                "Removal": "purge" if purge else "archive",
                "Deployer": Stack.of(self).stack_name,
            },
        )
        #: The channel's id, once deployed.
        self.channel_id = self.resource.ref
        #: What the last deploy did to it: created, updated, unchanged, and whether it
        #: overwrote a change made through the API.
        self.summary = self.resource.get_att_string("Summary")
        CfnOutput(self, "Applied", value=self.summary, description=f"channel {document['name']}")


def _logical_id(construct: IConstruct) -> str:
    child = construct.node.default_child
    assert child is not None
    resolved = Stack.of(construct).resolve(child.logical_id)  # type: ignore[attr-defined]
    return str(resolved)


def _nag_text(scope: IConstruct, value: str | None) -> str | None:
    """How cdk-nag spells a value in a finding's id: a literal as itself, an attribute of a
    resource as `<Logical.Attribute>`, another intrinsic as its compact JSON."""
    if value is None:
        return None
    resolved = Stack.of(scope).resolve(value)
    if isinstance(resolved, str):
        return resolved
    attribute = resolved.get("Fn::GetAtt") if isinstance(resolved, dict) else None
    if isinstance(attribute, list) and len(attribute) == 2:
        return f"<{attribute[0]}.{attribute[1]}>"
    return json.dumps(resolved, separators=(",", ":"))
