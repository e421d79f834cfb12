"""The ledger's home: Aurora PostgreSQL Serverless v2, reached through RDS Proxy (`standard`,
`ha`) or straight (`lean`), always over TLS with IAM authentication for the functions.

The functions never hold a password. A function connects with a short-lived token it signs
itself (`rds-db:connect`, granted per function and per database user). Two users (SPEC §10):

- `APP_USER`, the application role, which every function but `migrate` connects as
  (`admit`). It may read and write the `cron_*` tables' rows and nothing else; `migrate`
  creates it and grants exactly that (`cronledger.ledger.roles`), with `rds_iam`, so it has no
  password at all: the proxy reaches the database as it with IAM too (end-to-end IAM, the
  proxy's `DefaultAuthScheme`; its role may connect as `APP_USER` only).
- `DB_USER`, the master user, which owns the schema: only `migrate` connects as it
  (`admit_owner`). Its password lives only in Secrets Manager, read by the function that
  rotates it and by the proxy (the one user the proxy still reaches with a secret), or,
  without a proxy, by `migrate` itself, which then logs in with it (an IAM login would cost the
  master user the password its rotation uses).

A first deploy that fails must roll back cleanly and be retried: so the cluster is created
unprotected, and deletion protection (when chosen) is turned on by a call of its own that runs
only once everything else in the stack has been created (`protect_after`). A create that fails
before then deletes what it made; one that fails after it cannot, as nothing is left to fail.
`retain` keeps the cluster on delete but not when its own create is rolled back
(`RETAIN_EXCEPT_ON_CREATE`). Every name the cluster and what the stack keeps carry is
CloudFormation's, never a fixed one, so a retry never collides with what a failed try left.

Storage is encrypted; the cluster sits in the isolated `data` subnets and accepts connections
from the proxy (or, without one, the admitted functions) and the rotation function alone, the
proxy from admitted functions alone. `ha` adds a reader in the second AZ, sized with the
writer, that Aurora fails over to.
"""

from __future__ import annotations

from collections.abc import Iterable

from aws_cdk import (
    CfnDeletionPolicy,
    Duration,
    RemovalPolicy,
    Stack,
    aws_ec2 as ec2,
    aws_iam as iam,
    aws_lambda as lambda_,
    aws_logs as logs,
    aws_rds as rds,
    aws_secretsmanager as secretsmanager,
    custom_resources as cr,
)
from constructs import Construct

from cronledger_infra.nag import acknowledge

DB_NAME = "cronledger"
DB_USER = "cronledger"
APP_USER = "cronledger_app"
DB_PORT = 5432

_CDK_LOG_RETENTION_HELPER = "LogRetentionaae0aa3c5b4d4f87b02d85b201efdd8a"
_CDK_SDK_CALL_FUNCTION = "AWS679f53fac002430cb0da5b7982bd2287"
_REMOVAL = {
    "snapshot": RemovalPolicy.SNAPSHOT,
    "retain": RemovalPolicy.RETAIN,
    "destroy": RemovalPolicy.DESTROY,
}


class Database(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        vpc: ec2.IVpc,
        data_subnets: ec2.SubnetSelection,
        app_subnets: ec2.SubnetSelection,
        min_capacity_acu: float,
        max_capacity_acu: float,
        deletion_protection: bool,
        removal_policy: str,
        secret_rotation_days: int,
        log_retention: logs.RetentionDays,
        proxy: bool,
        readers: int,
    ) -> None:
        super().__init__(scope, construct_id)
        zones = vpc.availability_zones
        self.cluster = rds.DatabaseCluster(
            self,
            "Cluster",
            engine=rds.DatabaseClusterEngine.aurora_postgres(
                version=rds.AuroraPostgresEngineVersion.VER_16_9
            ),
            writer=rds.ClusterInstance.serverless_v2("Writer", availability_zone=zones[0]),
            readers=[
                rds.ClusterInstance.serverless_v2(
                    f"Reader{n + 1}",
                    scale_with_writer=True,  # ready to take over at the writer's size
                    availability_zone=zones[(n + 1) % len(zones)],
                )
                for n in range(readers)
            ],
            serverless_v2_min_capacity=min_capacity_acu,
            serverless_v2_max_capacity=max_capacity_acu,
            vpc=vpc,
            vpc_subnets=data_subnets,
            port=DB_PORT,
            default_database_name=DB_NAME,
            credentials=rds.Credentials.from_generated_secret(DB_USER),
            storage_encrypted=True,
            iam_authentication=True,
            deletion_protection=False,  # turned on once the stack exists (protect_after)
            removal_policy=_REMOVAL[removal_policy],
            backup=rds.BackupProps(retention=Duration.days(7)),
            cloudwatch_logs_exports=["postgresql"],
            cloudwatch_logs_retention=log_retention,
        )
        if removal_policy == "retain":
            for kept in self.cluster.node.find_all():
                if isinstance(kept, (rds.CfnDBCluster, rds.CfnDBInstance)):
                    kept.cfn_options.deletion_policy = CfnDeletionPolicy.RETAIN_EXCEPT_ON_CREATE
        # The rotation function runs in `app` (it needs Secrets Manager), reaching the cluster.
        self.cluster.add_rotation_single_user(
            automatically_after=Duration.days(secret_rotation_days), vpc_subnets=app_subnets
        )
        # Creating the schedule starts the first rotation at once, which logs in to the
        # database: the cluster alone (what the secret's attachment waits for) has no instance
        # to answer it until the writer is up.
        writer = self.cluster.node.find_child("Writer").node.default_child
        assert isinstance(writer, rds.CfnDBInstance)
        for schedule in self.cluster.node.find_all():
            if isinstance(schedule, secretsmanager.CfnRotationSchedule):
                schedule.node.add_dependency(writer)
        self.proxy: rds.DatabaseProxy | None = None
        if proxy:
            proxy_role = iam.Role(
                self, "ProxyRole", assumed_by=iam.ServicePrincipal("rds.amazonaws.com")
            )
            self.cluster.grant_connect(proxy_role, APP_USER)
            self.proxy = self.cluster.add_proxy(
                "Proxy",
                role=proxy_role,
                default_auth_scheme=rds.DefaultAuthScheme.IAM_AUTH,
                secrets=[self.cluster.secret],
                vpc=vpc,
                vpc_subnets=data_subnets,
                require_tls=True,
                iam_auth=True,
                debug_logging=False,
            )

        # CDK sets the retention of the log group RDS creates with a helper function of its own.
        log_retention_helper = Stack.of(self).node.find_child(_CDK_LOG_RETENTION_HELPER)
        acknowledge(
            log_retention_helper,
            {
                "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/"
                "AWSLambdaBasicExecutionRole]": "CDK's log-retention helper writes only its "
                "own logs with this AWS-maintained policy.",
                "AwsSolutions-IAM5[Resource::*]": "CDK's log-retention helper sets the retention "
                "of the log group RDS creates, whose name is known only after deploy; it may "
                "only put and delete retention policies.",
            },
        )
        self._deletion_protection = deletion_protection
        self._log_retention = log_retention
        acknowledge(
            self.cluster,
            {
                "AwsSolutions-RDS10": "Deletion protection is turned on by an SDK call once "
                "the rest of the stack exists, so a failed first deploy can roll the cluster "
                "back (protect_after); unless the operator turned it off for this "
                "installation (props.deletion_protection), e.g. a disposable one.",
            },
        )
        acknowledge(
            self.cluster,
            {
                "AwsSolutions-RDS11": "PostgreSQL keeps its standard port: the cluster has no "
                "public address and its security group admits only the RDS Proxy (or, without "
                "one, the admitted functions) and the "
                "password-rotation function, so a "
                "non-default port would add no protection, only client configuration.",
            },
        )

    def protect_after(self, others: Iterable[Construct]) -> None:
        """Turn the cluster's deletion protection on (when chosen) once `others` (the rest of
        the stack) are created, and again on every update."""
        if not self._deletion_protection:
            return
        protect = cr.AwsSdkCall(
            service="RDS",
            action="modifyDBCluster",
            parameters={
                "DBClusterIdentifier": self.cluster.cluster_identifier,
                "DeletionProtection": True,
                "ApplyImmediately": True,
            },
            physical_resource_id=cr.PhysicalResourceId.of(self.cluster.cluster_identifier),
        )
        # A sibling of this construct, not a child: what waits for the database must not wait
        # for this too.
        parent = self.node.scope
        assert parent is not None
        stack = Stack.of(self)
        protection = cr.AwsCustomResource(
            parent,
            f"{self.node.id}DeletionProtection",
            on_create=protect,
            on_update=protect,
            policy=cr.AwsCustomResourcePolicy.from_statements(
                [
                    iam.PolicyStatement(
                        actions=["rds:ModifyDBCluster"], resources=[self.cluster.cluster_arn]
                    )
                ]
            ),
            install_latest_aws_sdk=False,
            log_group=logs.LogGroup(
                parent,
                f"{self.node.id}DeletionProtectionLogs",
                retention=self._log_retention,
                removal_policy=RemovalPolicy.DESTROY,  # the call's own lines, nothing to keep
            ),
        )
        for other in others:
            protection.node.add_dependency(other)
        acknowledge(
            protection,
            {
                "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/"
                "AWSLambdaBasicExecutionRole]": "CDK's SDK-call function writes only its own "
                "logs with this AWS-maintained policy.",
            },
        )
        singleton = stack.node.find_child(_CDK_SDK_CALL_FUNCTION)
        acknowledge(
            singleton,
            {
                "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/"
                "AWSLambdaBasicExecutionRole]": "CDK's SDK-call function writes only its own "
                "logs with this AWS-maintained policy.",
                "AwsSolutions-L1": "CDK's SDK-call function runs on the Node.js runtime CDK "
                "chose for it, and only calls rds:ModifyDBCluster on this cluster.",
            },
        )

    def admit(self, functions: Iterable[lambda_.Function]) -> None:
        """Let each function reach the proxy (or the cluster) and connect as `APP_USER` with
        an IAM token."""
        for function in functions:
            self._reach(function, APP_USER)

    def admit_owner(self, migrate: lambda_.Function) -> None:
        """Let `migrate` connect as the schema's owner, and tell it which role to grant: with
        an IAM token through the proxy, or, without one, with the password it alone reads."""
        self._reach(migrate, None if self.proxy is None else DB_USER)
        migrate.add_environment("CRONLEDGER_DB_USER", DB_USER)
        migrate.add_environment("CRONLEDGER_DB_APP_USER", APP_USER)
        if self.proxy is None:
            secret = self.cluster.secret
            assert secret is not None
            secret.grant_read(migrate)
            migrate.add_environment("CRONLEDGER_DB_ADMIN_SECRET_ARN", secret.secret_arn)

    def _reach(self, function: lambda_.Function, iam_user: str | None) -> None:
        """Open the port to the proxy (or the cluster); grant an IAM login as `iam_user`."""
        if self.proxy is not None:
            self.proxy.connections.allow_from(function, ec2.Port.tcp(DB_PORT))
            if iam_user is not None:
                self.proxy.grant_connect(function, iam_user)
        else:
            self.cluster.connections.allow_from(function, ec2.Port.tcp(DB_PORT))
            if iam_user is not None:
                self.cluster.grant_connect(function, iam_user)

    @property
    def endpoint(self) -> str:
        """The host the functions connect to."""
        if self.proxy is not None:
            return self.proxy.endpoint
        return self.cluster.cluster_endpoint.hostname

    @property
    def environment(self) -> dict[str, str]:
        """Where the database is, for the functions. No password: they sign IAM tokens."""
        return {
            "CRONLEDGER_DB_HOST": self.endpoint,
            "CRONLEDGER_DB_PORT": str(DB_PORT),
            "CRONLEDGER_DB_NAME": DB_NAME,
            "CRONLEDGER_DB_USER": APP_USER,
            "CRONLEDGER_DB_IAM_AUTH": "true",
            "CRONLEDGER_DB_PROXY": "true" if self.proxy is not None else "false",
        }
