"""The two ticks: EventBridge runs `reconcile` and `claim` every minute.

A tick is worth delivering only while it is fresh. A failed or throttled tick is not retried
past a minute, by EventBridge or by Lambda's asynchronous queue: the next tick, a minute later,
does the same work, and a retried tick would only run beside it. Persistent failure is what
the "reconcile not succeeding" alarm is for.
"""

from __future__ import annotations

from aws_cdk import (
    Duration,
    aws_events as events,
    aws_events_targets as targets,
    aws_lambda as lambda_,
)
from constructs import Construct

TICK = Duration.minutes(1)


class Scheduling(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        reconcile: lambda_.Function,
        claim: lambda_.Function,
    ) -> None:
        super().__init__(scope, construct_id)
        for name, function in (("Reconcile", reconcile), ("Claim", claim)):
            events.Rule(
                self,
                f"{name}EveryMinute",
                description=f"cronledger: run {name.lower()} every minute",
                schedule=events.Schedule.rate(TICK),
                targets=[targets.LambdaFunction(function, max_event_age=TICK, retry_attempts=2)],
            )
            lambda_.EventInvokeConfig(
                self, f"{name}Delivery", function=function, retry_attempts=0, max_event_age=TICK
            )
