"""How an executor invocation is delivered: once, while its claim is still good.

`claim` invokes `execute` asynchronously with ids only. Lambda would retry a failed attempt
twice and keep an undelivered one for six hours; both are wrong here. Retries are 0 because a
failed attempt is settled in the ledger and the next scheduled occurrence is the natural retry
(SPEC §5); the maximum event age stays under the claim lease (checked in the props) because an
invocation that waited longer may find its occurrence re-claimed by another executor. What
Lambda gives up on (throttled past the age, or crashed) lands in an encrypted SQS queue, the
executor's dead-letter queue, whose depth is alarmed.
"""

from __future__ import annotations

from aws_cdk import (
    Duration,
    aws_lambda as lambda_,
    aws_lambda_destinations as destinations,
    aws_sqs as sqs,
)
from constructs import Construct

from cronledger_infra.nag import acknowledge


class Execution(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        execute: lambda_.IFunction,
        max_event_age: Duration,
    ) -> None:
        super().__init__(scope, construct_id)
        self.dead_letters = sqs.Queue(
            self,
            "DeadLetters",
            retention_period=Duration.days(14),
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
        )
        acknowledge(
            self.dead_letters,
            {
                "AwsSolutions-SQS3": "This queue is itself a dead-letter queue: the on-failure "
                "destination of the executor's asynchronous invocations.",
            },
        )
        lambda_.EventInvokeConfig(
            self,
            "Delivery",
            function=execute,
            retry_attempts=0,
            max_event_age=max_event_age,
            on_failure=destinations.SqsDestination(self.dead_letters),
        )
