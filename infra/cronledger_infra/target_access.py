"""What the executor may call: the targets the operator named, or resources tagged for it.

A target is one of the operator's own resources, so the executor gets no standing access to
the account's functions, queues, state machines or buses. It may reach a resource only when
either its ARN is in the stack's `target_arns`, granted with the resource type's own `grant_*`
call, or (with `allow_tagged_targets`) the resource carries the tag
`cronledger:target=<installation name>`: tagging a resource is how an operator enrols it without
redeploying this stack, and the value must be this installation's name, so a resource enrolled
in one installation is not callable from another in the same account (SPEC §10).

The same holds for the secrets `secret_headers` name: the executor may read a Secrets Manager
secret or an SSM parameter only when it is tagged `cronledger:secret=<installation name>`.

Step Functions targets that `wait` need `states:DescribeExecution`, which acts on executions;
executions carry no tags, so for tagged state machines it is granted on every execution in this
account and region (read-only status polling), and for named ones on that machine's executions.
A `wait` target on an Express machine runs with `states:StartSyncExecution`, after
`states:DescribeStateMachine` tells the executor the machine's type; both are granted wherever
`states:StartExecution` is. A queue or bus encrypted with a customer managed KMS key needs that
key too: the keys the operator lists in `target_kms_keys` may be used by the executor only
through SQS and EventBridge (`kms:ViaService`), to encrypt what it sends.
`http` and `python` targets need no IAM permission.
"""

from __future__ import annotations

from aws_cdk import (
    ArnFormat,
    Stack,
    aws_events as events,
    aws_iam as iam,
    aws_lambda as lambda_,
    aws_sqs as sqs,
    aws_stepfunctions as sfn,
)
from constructs import Construct

from cronledger_infra.nag import acknowledge

TARGET_TAG = "cronledger:target"
SECRET_TAG = "cronledger:secret"


def tagged_for(tag: str, installation: str) -> dict[str, dict[str, str]]:
    """The IAM condition: the resource carries `tag` with this installation's name as value."""
    return {"StringEquals": {f"aws:ResourceTag/{tag}": installation}}


class TargetAccess(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        executor: lambda_.Function,
        installation: str,
        target_arns: tuple[str, ...],
        allow_tagged_targets: bool,
        kms_keys: tuple[str, ...] = (),
    ) -> None:
        super().__init__(scope, construct_id)
        self._executor = executor
        self._installation = installation
        for index, arn in enumerate(target_arns):
            self._grant_named(f"Target{index}", arn)
        if allow_tagged_targets:
            self._grant_tagged()
        self._grant_tagged_secrets()
        if kms_keys:
            self._grant_keys(kms_keys)

    def _grant_named(self, construct_id: str, arn: str) -> None:
        service = arn.split(":")[2] if arn.count(":") >= 5 else ""
        if service == "lambda":
            # The grant is the executor's own policy; a function in another account must
            # also allow the executor in its resource policy, which this stack cannot edit.
            target = lambda_.Function.from_function_attributes(
                self, construct_id, function_arn=arn, skip_permissions=True
            )
            target.grant_invoke(self._executor)
            wildcard = f"{arn}:*"  # the function's versions and aliases (a target `qualifier`)
            acknowledge(
                self._executor,
                {
                    f"AwsSolutions-IAM5[Resource::{wildcard}]": "Lets a target name a version "
                    "or alias (its `qualifier`) of a function the operator listed in "
                    "target_arns; no other function.",
                },
            )
        elif service == "states":
            machine = sfn.StateMachine.from_state_machine_arn(self, construct_id, arn)
            machine.grant_start_execution(self._executor)
            machine.grant_start_sync_execution(self._executor)
            iam.Grant.add_to_principal(
                grantee=self._executor,
                actions=["states:DescribeStateMachine"],
                resource_arns=[":".join(arn.split(":")[:7])],
            )
            executions = executions_of(arn)
            iam.Grant.add_to_principal(
                grantee=self._executor,
                actions=["states:DescribeExecution"],
                resource_arns=[executions],
            )
            acknowledge(
                self._executor,
                {
                    f"AwsSolutions-IAM5[Resource::{executions}]": "Read-only status of the "
                    "executions of one state machine the operator listed in target_arns, "
                    "which the executor polls while a `wait` target runs.",
                },
            )
        elif service == "sqs":
            sqs.Queue.from_queue_arn(self, construct_id, arn).grant_send_messages(self._executor)
        elif service == "events":
            events.EventBus.from_event_bus_arn(self, construct_id, arn).grant_put_events_to(
                self._executor
            )
        else:
            raise ValueError(
                f"target_arns: {arn!r} is not a Lambda function, Step Functions state machine, "
                "SQS queue or EventBridge bus ARN"
            )

    def _grant_tagged(self) -> None:
        stack = Stack.of(self)
        tagged = {
            "lambda:InvokeFunction": stack.format_arn(
                service="lambda",
                resource="function",
                resource_name="*",
                arn_format=ArnFormat.COLON_RESOURCE_NAME,
            ),
            "states:StartExecution": stack.format_arn(
                service="states",
                resource="stateMachine",
                resource_name="*",
                arn_format=ArnFormat.COLON_RESOURCE_NAME,
            ),
            "sqs:SendMessage": stack.format_arn(service="sqs", resource="*"),
            "events:PutEvents": stack.format_arn(
                service="events",
                resource="event-bus",
                resource_name="*",
                arn_format=ArnFormat.SLASH_RESOURCE_NAME,
            ),
        }
        condition = tagged_for(TARGET_TAG, self._installation)
        for action, resource in tagged.items():
            actions = [action]
            if action == "states:StartExecution":  # and an Express machine's, with its type
                actions += ["states:StartSyncExecution", "states:DescribeStateMachine"]
            self._executor.add_to_role_policy(
                iam.PolicyStatement(actions=actions, resources=[resource], conditions=condition)
            )
        executions = stack.format_arn(
            service="states",
            resource="execution",
            resource_name="*",
            arn_format=ArnFormat.COLON_RESOURCE_NAME,
        )
        self._executor.add_to_role_policy(
            iam.PolicyStatement(actions=["states:DescribeExecution"], resources=[executions])
        )
        scoped = (
            "is scoped by the condition that the resource carries the tag "
            "cronledger:target=<this installation's name>"
        )
        account = "arn:<AWS::Partition>:{}:<AWS::Region>:<AWS::AccountId>:{}"
        acknowledge(
            self._executor,
            {
                f"AwsSolutions-IAM5[Resource::{account.format('lambda', 'function:*')}]": (
                    f"lambda:InvokeFunction {scoped}."
                ),
                f"AwsSolutions-IAM5[Resource::{account.format('states', 'stateMachine:*')}]": (
                    f"states:StartExecution, StartSyncExecution and DescribeStateMachine {scoped}."
                ),
                f"AwsSolutions-IAM5[Resource::{account.format('sqs', '*')}]": (
                    f"sqs:SendMessage {scoped}."
                ),
                f"AwsSolutions-IAM5[Resource::{account.format('events', 'event-bus/*')}]": (
                    f"events:PutEvents {scoped}."
                ),
                f"AwsSolutions-IAM5[Resource::{account.format('states', 'execution:*')}]": (
                    "states:DescribeExecution (read-only) acts on executions, which carry no "
                    "tags, so the state machine's tag cannot scope it; the executor polls the "
                    "status of executions it started for tagged `wait` targets."
                ),
            },
        )

    def _grant_keys(self, keys: tuple[str, ...]) -> None:
        """Encrypting with the listed keys, through SQS and EventBridge only."""
        self._executor.add_to_role_policy(
            iam.PolicyStatement(
                actions=["kms:GenerateDataKey", "kms:Decrypt"],
                resources=list(keys),
                conditions={
                    "StringLike": {
                        "kms:ViaService": ["sqs.*.amazonaws.com", "events.*.amazonaws.com"]
                    }
                },
            )
        )

    def _grant_tagged_secrets(self) -> None:
        """Reading the secrets and parameters tagged for this installation, and no other."""
        stack = Stack.of(self)
        secrets = stack.format_arn(
            service="secretsmanager",
            resource="secret",
            resource_name="*",
            arn_format=ArnFormat.COLON_RESOURCE_NAME,
        )
        parameters = stack.format_arn(
            service="ssm",
            resource="parameter",
            resource_name="*",
            arn_format=ArnFormat.SLASH_RESOURCE_NAME,
        )
        condition = tagged_for(SECRET_TAG, self._installation)
        # Reading the tags too: a secret goes only to the hosts its cronledger:secret-hosts
        # tag names, checked after it is resolved.
        for actions, resource in (
            (["secretsmanager:GetSecretValue", "secretsmanager:DescribeSecret"], secrets),
            (["ssm:GetParameter", "ssm:ListTagsForResource"], parameters),
        ):
            self._executor.add_to_role_policy(
                iam.PolicyStatement(actions=actions, resources=[resource], conditions=condition)
            )
        scoped = (
            "is scoped by the condition that the resource carries the tag "
            "cronledger:secret=<this installation's name>: the secrets an operator set aside "
            "for http targets' secret_headers"
        )
        account = "arn:<AWS::Partition>:{}:<AWS::Region>:<AWS::AccountId>:{}"
        acknowledge(
            self._executor,
            {
                f"AwsSolutions-IAM5[Resource::{account.format('secretsmanager', 'secret:*')}]": (
                    f"secretsmanager:GetSecretValue and DescribeSecret {scoped}."
                ),
                f"AwsSolutions-IAM5[Resource::{account.format('ssm', 'parameter/*')}]": (
                    f"ssm:GetParameter and ListTagsForResource {scoped}."
                ),
            },
        )


def executions_of(machine_arn: str) -> str:
    """The ARNs of a state machine's executions, as a wildcard. An execution's ARN names the
    machine without the version or alias a target may qualify it with."""
    partition, service, region, account, _, machine = machine_arn.split(":")[1:7]
    return f"arn:{partition}:{service}:{region}:{account}:execution:{machine}:*"
