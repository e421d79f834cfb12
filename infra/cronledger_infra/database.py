"""The ledger's home: Aurora PostgreSQL Serverless v2, reachable only through RDS Proxy.

The functions never hold a password. The proxy requires TLS and IAM authentication: a function
connects with a short-lived token it signs itself (`rds-db:connect`, granted per function and
per database user). Two users (SPEC §10):

- `APP_USER`, the application role, which every function but `migrate` connects as
  (`admit`). It may read and write the `cron_*` tables' rows and nothing else; `migrate`
  creates it and grants exactly that (`cronledger.ledger.roles`), with `rds_iam`, so it has no
  password at all: the proxy reaches the database as it with IAM too (end-to-end IAM, the
  proxy's `DefaultAuthScheme`; its role may connect as `APP_USER` only).
- `DB_USER`, the master user, which owns the schema: only `migrate` connects as it
  (`admit_owner`). Its password lives only in Secrets Manager, read only by the proxy (the
  one user the proxy still reaches with a secret) and the function that rotates it.

Storage is encrypted; the cluster sits in the isolated `data` subnets and accepts connections
from the proxy and the rotation function alone, the proxy from admitted functions alone.
"""

from __future__ import annotations

from collections.abc import Iterable

from aws_cdk import Duration, RemovalPolicy, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_rds as rds
from constructs import Construct

from cronledger_infra.nag import acknowledge

DB_NAME = "cronledger"
DB_USER = "cronledger"
APP_USER = "cronledger_app"
DB_PORT = 5432

_CDK_LOG_RETENTION_HELPER = "LogRetentionaae0aa3c5b4d4f87b02d85b201efdd8a"
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
    ) -> None:
        super().__init__(scope, construct_id)
        self.cluster = rds.DatabaseCluster(
            self,
            "Cluster",
            engine=rds.DatabaseClusterEngine.aurora_postgres(
                version=rds.AuroraPostgresEngineVersion.VER_16_9
            ),
            writer=rds.ClusterInstance.serverless_v2("Writer"),
            serverless_v2_min_capacity=min_capacity_acu,
            serverless_v2_max_capacity=max_capacity_acu,
            vpc=vpc,
            vpc_subnets=data_subnets,
            port=DB_PORT,
            default_database_name=DB_NAME,
            credentials=rds.Credentials.from_generated_secret(DB_USER),
            storage_encrypted=True,
            iam_authentication=True,
            deletion_protection=deletion_protection,
            removal_policy=_REMOVAL[removal_policy],
            backup=rds.BackupProps(retention=Duration.days(7)),
            cloudwatch_logs_exports=["postgresql"],
            cloudwatch_logs_retention=log_retention,
        )
        # The rotation function runs in `app` (it needs Secrets Manager), reaching the cluster.
        self.cluster.add_rotation_single_user(
            automatically_after=Duration.days(secret_rotation_days), vpc_subnets=app_subnets
        )
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
        if not deletion_protection:
            acknowledge(
                self.cluster,
                {
                    "AwsSolutions-RDS10": "The operator turned deletion protection off for "
                    "this installation (props.deletion_protection), e.g. a disposable one.",
                },
            )
        acknowledge(
            self.cluster,
            {
                "AwsSolutions-RDS11": "PostgreSQL keeps its standard port: the cluster has no "
                "public address and its security group admits only the RDS Proxy and the "
                "password-rotation function, so a "
                "non-default port would add no protection, only client configuration.",
            },
        )

    def admit(self, functions: Iterable[lambda_.Function]) -> None:
        """Let each function reach the proxy and connect as `APP_USER` with an IAM token."""
        for function in functions:
            self.proxy.connections.allow_from(function, ec2.Port.tcp(DB_PORT))
            self.proxy.grant_connect(function, APP_USER)

    def admit_owner(self, migrate: lambda_.Function) -> None:
        """Let `migrate` connect as the schema's owner, and tell it which role to grant."""
        self.proxy.connections.allow_from(migrate, ec2.Port.tcp(DB_PORT))
        self.proxy.grant_connect(migrate, DB_USER)
        migrate.add_environment("CRONLEDGER_DB_USER", DB_USER)
        migrate.add_environment("CRONLEDGER_DB_APP_USER", APP_USER)

    @property
    def environment(self) -> dict[str, str]:
        """Where the database is, for the functions. No password: the proxy requires IAM."""
        return {
            "CRONLEDGER_DB_HOST": self.proxy.endpoint,
            "CRONLEDGER_DB_PORT": str(DB_PORT),
            "CRONLEDGER_DB_NAME": DB_NAME,
            "CRONLEDGER_DB_USER": APP_USER,
            "CRONLEDGER_DB_IAM_AUTH": "true",
        }
