"""Schema migrations run by the deploy itself, before the other functions get new code.

A CDK trigger invokes `migrate` synchronously once the database construct (cluster, writer,
proxy and the rules that let `migrate` reach it) is created, and again whenever `migrate`'s
code or configuration changes (they share one asset, so: on every code change). The other
functions are updated only after it succeeded, so new code never meets an old schema; a failed
migration fails the deploy, which CloudFormation rolls back. Migrations are idempotent (upgrade
to head), so running them again is harmless.
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import aws_lambda as lambda_
from aws_cdk import triggers
from constructs import Construct


class Migration(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        migrate: lambda_.Function,
        after: Sequence[Construct],
        before: Sequence[Construct],
    ) -> None:
        super().__init__(scope, construct_id)
        self.trigger = triggers.Trigger(
            self,
            "Migrate",
            handler=migrate,
            execute_after=list(after),
            execute_before=list(before),
            execute_on_handler_change=True,
            invocation_type=triggers.InvocationType.REQUEST_RESPONSE,
            timeout=migrate.timeout,
        )
