"""A CDK app of one's own with cronledger inside it: three jobs and the schedules that run them.

Run it as any CDK app (`cdk synth --app "python infra/examples/user_app.py"`), from a checkout
of cronledger whose `infra/` is on the import path; tests/infra/test_user_app.py synthesizes it.
"""

from __future__ import annotations

from typing import Any

from aws_cdk import (
    App,
    RemovalPolicy,
    Stack,
    aws_lambda as lambda_,
    aws_sqs as sqs,
    aws_stepfunctions as sfn,
)
from constructs import Construct

from cronledger_infra import Cronledger


class BillingStack(Stack):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cronledger_code: lambda_.Code | None = None,  # None: built from the checkout
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)

        # The jobs: a function, a state machine and a queue of this app.
        report = lambda_.Function(
            self,
            "NightlyReport",
            runtime=lambda_.Runtime.PYTHON_3_13,
            handler="index.handler",
            code=lambda_.Code.from_inline("def handler(event, context):\n    return None\n"),
        )
        month_end = sfn.StateMachine(
            self,
            "MonthEnd",
            definition_body=sfn.DefinitionBody.from_chainable(sfn.Pass(self, "Close")),
        )
        invoices = sqs.Queue(self, "Invoices", enforce_ssl=True)

        # cronledger, with the installation's props (here the small `lean` profile)
        scheduler = Cronledger(
            self,
            "Scheduler",
            name="Billing",
            profile="lean",
            allow_tagged_targets=False,
            code=cronledger_code,
        )

        # Run the function at 02:15 London time, every day.
        scheduler.schedule(report, "0 15 2 * * *", timezone="Europe/London")
        # Start the state machine at 06:00 on the 1st; after an outage run at most the last
        # three missed months, never two at once, five attempts each.
        scheduler.add_channel(
            "month-end",
            schedule="0 0 6 1 * *",
            timezone="Europe/London",
            target=month_end,
            misfire="catch_up",
            max_catch_up=3,
            overlap="forbid",
            retry={"max_attempts": 5},
            labels={"team": "billing"},
        )
        # Send a message every 15 minutes; removed from the app, the channel is purged.
        scheduler.add_channel(
            "invoice-sweep",
            schedule="0 */15 * * * *",
            target=invoices,
            payload={"batch": 100},
            removal_policy=RemovalPolicy.DESTROY,
        )


if __name__ == "__main__":
    app = App()
    BillingStack(app, "BillingApp")
    app.synth()
