"""The five Lambda functions, made by one helper so they differ only where they must.

Every function runs the same asset (the `cronledger` package) on arm64 Python 3.13 in the `app`
subnets, with its own role, its own security group, its own log group, active tracing (where
traces have a way out, profiles.py) and the same environment: where the database is (never a password), the Powertools names, and the
scheduler settings. What differs is the handler, the timeout and what else it is granted,
which the other constructs add with `grant_*` calls. Only `claim` learns the executor's name,
and only `claim` may invoke it; only `api` learns `claim`'s, to wake it after a manual run.
A wake goes to `claim`'s `wake` alias, not to the function, so Lambda counts what it does with
wakes (`AsyncEventsDropped` with `Resource` = `<claim>:wake`) apart from what it does with the
minute's ticks; and a wake that cannot start within a minute is dropped without a retry, as
the next tick claims the same runs.

Reserved concurrency (`reserved`, see capacity.py) guarantees and caps each function's
containers; `migrate` reserves none.

Timeouts: `reconcile` and `claim` run at most a minute (the next tick is a minute away; `claim`
loops until close to its deadline); `api` answers within API Gateway's 30 s; `execute` runs as
long as the operator allows a target to run; `migrate` has five minutes.
"""

from __future__ import annotations

from collections.abc import Mapping

from aws_cdk import (
    Duration,
    aws_ec2 as ec2,
    aws_iam as iam,
    aws_lambda as lambda_,
    aws_logs as logs,
)
from constructs import Construct

from cronledger_infra.bundling import ARCHITECTURE, RUNTIME
from cronledger_infra.nag import acknowledge
from cronledger_infra.props import MIGRATE_TIMEOUT_SECS

SERVICE_NAME = "cronledger"
#: The ports a function may open connections to, besides the database's (`Database.admit`
#: adds that rule): HTTPS for the AWS APIs (endpoints or NAT), and for the executor HTTP and
#: HTTPS for `http` targets. Nothing else leaves: no SMTP, no SSH, no other port in the VPC.
#: (Which addresses an `http` target may reach is the application's check, SPEC §10; DNS and
#: the VPC resolver are not subject to security groups.)
EGRESS_PORTS = {"execute": (443, 80)}
DEFAULT_EGRESS_PORTS = (443,)
HANDLERS = {
    "reconcile": "cronledger.aws.reconcile.handler",
    "claim": "cronledger.aws.claim.handler",
    "execute": "cronledger.aws.execute.handler",
    "api": "cronledger.aws.api.handler",
    "migrate": "cronledger.aws.migrate.handler",
    # made only where channels are declared in CDK (channels.py)
    "channels": "cronledger.aws.channel_resource.handler",
}


class Functions(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        code: lambda_.Code,
        vpc: ec2.IVpc,
        subnets: ec2.SubnetSelection,
        environment: Mapping[str, str],
        tracing: bool,
        metrics_namespace: str,
        log_level: str,
        memory_mb: int,
        execute_timeout: Duration,
        log_retention: logs.RetentionDays,
        reserved: Mapping[str, int],
    ) -> None:
        super().__init__(scope, construct_id)
        self._code = code
        self._vpc = vpc
        self._subnets = subnets
        self._memory_mb = memory_mb
        self._log_retention = log_retention
        self._reserved = reserved
        self._tracing = lambda_.Tracing.ACTIVE if tracing else lambda_.Tracing.DISABLED
        self._environment = {
            "POWERTOOLS_SERVICE_NAME": SERVICE_NAME,
            "POWERTOOLS_METRICS_NAMESPACE": metrics_namespace,
            "POWERTOOLS_LOG_LEVEL": log_level,
            # Target results may carry data the operator would not put in a trace.
            "POWERTOOLS_TRACER_CAPTURE_RESPONSE": "false",
            # without a way out to X-Ray, nothing is traced (profiles.py)
            **({} if tracing else {"POWERTOOLS_TRACE_DISABLED": "true"}),
            **environment,
        }

        minute = Duration.seconds(60)
        self.reconcile = self._function("reconcile", minute, "Turns schedules into occurrences")
        self.claim = self._function("claim", minute, "Leases due occurrences, invokes executors")
        self.execute = self._function("execute", execute_timeout, "Runs one occurrence's target")
        self.api = self._function("api", Duration.seconds(29), "The operators' HTTP API")
        self.migrate = self._function(
            "migrate", Duration.seconds(MIGRATE_TIMEOUT_SECS), "Migrates the ledger schema"
        )

        # A tick starts its pass's other shards as invocations of its own function. A policy of
        # its own: the role's default policy, which the function waits for, cannot name it.
        iam.Policy(
            self,
            "ReconcileShards",
            roles=[self.reconcile.role] if self.reconcile.role else [],
            statements=[
                iam.PolicyStatement(
                    actions=["lambda:InvokeFunction"], resources=[self.reconcile.function_arn]
                )
            ],
        )
        self.claim.add_environment("CRONLEDGER_EXECUTE_FUNCTION_NAME", self.execute.function_name)
        self.execute.grant_invoke_latest_version(self.claim)
        self.claim_wake = lambda_.Alias(
            self, "ClaimWake", alias_name="wake", version=self.claim.current_version
        )
        self.claim_wake.configure_async_invoke(retry_attempts=0, max_event_age=minute)
        self.api.add_environment("CRONLEDGER_CLAIM_FUNCTION_NAME", self.claim_wake.function_arn)
        self.claim_wake.grant_invoke(self.api)

    @property
    def all(self) -> dict[str, lambda_.Function]:
        return {
            "reconcile": self.reconcile,
            "claim": self.claim,
            "execute": self.execute,
            "api": self.api,
            "migrate": self.migrate,
        }

    def add(self, name: str, timeout: Duration, purpose: str) -> lambda_.Function:
        """One more function on the same asset, network and environment, made on demand:
        `channels` exists only in an installation that declares channels in CDK."""
        return self._function(name, timeout, purpose)

    def _function(self, name: str, timeout: Duration, purpose: str) -> lambda_.Function:
        construct_id = name.capitalize()
        security = ec2.SecurityGroup(
            self,
            f"{construct_id}Security",
            vpc=self._vpc,
            description=f"cronledger {name}: outbound only to the ports it needs",
            allow_all_outbound=False,
        )
        for port in EGRESS_PORTS.get(name, DEFAULT_EGRESS_PORTS):
            security.add_egress_rule(
                ec2.Peer.any_ipv4(), ec2.Port.tcp(port), f"{name}: TCP {port} out"
            )
        function = lambda_.Function(
            self,
            construct_id,
            description=f"cronledger {name}: {purpose}",
            code=self._code,
            handler=HANDLERS[name],
            runtime=RUNTIME,
            architecture=ARCHITECTURE,
            memory_size=self._memory_mb,
            timeout=timeout,
            reserved_concurrent_executions=self._reserved.get(name),
            environment=self._environment,
            vpc=self._vpc,
            vpc_subnets=self._subnets,
            security_groups=[security],
            tracing=self._tracing,
            log_group=logs.LogGroup(self, f"{construct_id}Logs", retention=self._log_retention),
        )
        acknowledge(
            function,
            {
                "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/"
                "AWSLambdaBasicExecutionRole]": "The AWS-maintained minimum for a function to "
                "write its own logs; it grants nothing else.",
                "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/"
                "AWSLambdaVPCAccessExecutionRole]": "The AWS-maintained minimum for a function "
                "to attach its network interfaces in the VPC it must run in to reach the "
                "database; it grants nothing else.",
                "AwsSolutions-L1": "Python 3.13 is the runtime the asset is built for (pip "
                "resolves CPython 3.13 wheels, see bundling.py); moving to a newer runtime is "
                "a deliberate change of RUNTIME and the wheel tags together.",
                "AwsSolutions-IAM5[Resource::*]": "X-Ray's PutTraceSegments and "
                "PutTelemetryRecords have no resource-level permissions; the wildcard covers "
                "only those two actions, added by active tracing.",
            },
        )
        return function
