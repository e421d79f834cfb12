"""Schema migrations run by the deploy itself, before the other functions get new code.

A CDK trigger invokes `migrate` synchronously once the database construct (cluster, writer,
proxy and the rules that let `migrate` reach it) is created, and again whenever `migrate`'s
code or configuration changes (they share one asset, so: on every code change). The other
functions are updated only after it succeeded, so new code never meets an old schema; a failed
migration fails the deploy, which CloudFormation rolls back. Migrations are idempotent (upgrade
to head), so running them again is harmless.

The trigger depends on the whole database construct, the master secret's rotation schedule
included, but creating that schedule only starts the secret's first rotation; `migrate` waits
for it to finish (and for the proxy to answer) by itself, so it is told the secret's ARN and
may describe it (its metadata: never its value). A migration may take longer than any other
statement is allowed, so its connections wait as long as the function may run.

A migration cannot hang a deploy. The trigger waits for `migrate` a margin longer than
`migrate` may run (`TRIGGER_MARGIN`: a cold start inside the VPC comes on top of the run),
and CloudFormation waits for the trigger's answer that margin longer again (`ServiceTimeout`),
instead of its default hour: a provider that never answers fails the deploy in minutes, which
then rolls back.
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import (
    CfnResource,
    Duration,
    aws_iam as iam,
    aws_lambda as lambda_,
    aws_secretsmanager as secretsmanager,
    triggers,
)
from constructs import Construct

#: The variables `cronledger.aws.migrate` reads.
SECRET_ARN = "CRONLEDGER_DB_SECRET_ARN"
SOCKET_TIMEOUT = "CRONLEDGER_DB_SOCKET_TIMEOUT_SECS"
#: How much longer the trigger waits for `migrate`, and CloudFormation for the trigger.
TRIGGER_MARGIN = Duration.minutes(2)


class Migration(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        migrate: lambda_.Function,
        database_secret: secretsmanager.ISecret | None,
        after: Sequence[Construct],
        before: Sequence[Construct],
    ) -> None:
        super().__init__(scope, construct_id)
        if database_secret is not None:
            migrate.add_environment(SECRET_ARN, database_secret.secret_arn)
            iam.Grant.add_to_principal(
                grantee=migrate,
                actions=["secretsmanager:DescribeSecret"],
                resource_arns=[database_secret.secret_arn],
            )
        timeout = migrate.timeout
        assert timeout is not None
        migrate.add_environment(SOCKET_TIMEOUT, str(int(timeout.to_seconds())))
        self.trigger = triggers.Trigger(
            self,
            "Migrate",
            handler=migrate,
            execute_after=list(after),
            execute_before=list(before),
            execute_on_handler_change=True,
            invocation_type=triggers.InvocationType.REQUEST_RESPONSE,
            timeout=Duration.seconds(timeout.to_seconds() + TRIGGER_MARGIN.to_seconds()),
        )
        resource = self.trigger.node.find_child("Default").node.default_child
        assert isinstance(resource, CfnResource)
        resource.add_property_override(
            "ServiceTimeout", int(timeout.to_seconds() + 2 * TRIGGER_MARGIN.to_seconds())
        )
