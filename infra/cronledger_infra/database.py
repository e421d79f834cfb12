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

Storage is encrypted; the cluster sits in the isolated `data` subnets and accepts connections
from the proxy (or, without one, the admitted functions) and the rotation function alone, the
proxy from admitted functions alone. `ha` adds a reader in the second AZ, sized with the
writer, that Aurora fails over to.
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
                "public address and its security group admits only the RDS Proxy (or, without "
                "one, the admitted functions) and the "
                "password-rotation function, so a "
                "non-default port would add no protection, only client configuration.",
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
