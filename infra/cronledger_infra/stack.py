"""The cronledger stack: composes the constructs, decides nothing of its own.

Each construct owns one concern and its own invariants (see each module's header); the stack
wires their outputs together, in dependency order, and publishes what an operator needs after
a deploy.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aws_cdk import CfnOutput, Duration, Stack, Tags
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from cronledger_infra.api import Api
from cronledger_infra.bundling import function_code
from cronledger_infra.bus import Bus
from cronledger_infra.database import Database
from cronledger_infra.execution import Execution
from cronledger_infra.functions import Functions
from cronledger_infra.helper_logs import HelperLogs
from cronledger_infra.migration import Migration
from cronledger_infra.monitoring import Monitoring
from cronledger_infra.network import Network
from cronledger_infra.props import CronledgerProps
from cronledger_infra.scheduling import Scheduling
from cronledger_infra.target_access import TargetAccess

PROJECT_ROOT = Path(__file__).resolve().parents[2]
INSTALLATION_TAG = "cronledger:installation"


class CronledgerStack(Stack):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        props: CronledgerProps,
        code: lambda_.Code | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        # A proxy's target group takes no tags, though CDK would give it some.
        Tags.of(self).add(
            INSTALLATION_TAG, props.name, exclude_resource_types=["AWS::RDS::DBProxyTargetGroup"]
        )
        retention = logs.RetentionDays[props.log_retention]

        shape = props.shape
        network = Network(
            self,
            "Network",
            cidr=props.vpc_cidr,
            nat_gateways=shape.nat_gateways,
            endpoints=shape.vpc_endpoints,
            endpoint_azs=shape.endpoint_azs,
            log_retention=retention,
        )
        database = Database(
            self,
            "Database",
            vpc=network.vpc,
            data_subnets=network.data_subnets,
            app_subnets=network.app_subnets,
            min_capacity_acu=props.min_capacity_acu,
            max_capacity_acu=props.max_capacity_acu,
            deletion_protection=props.deletion_protection,
            removal_policy=props.removal_policy,
            secret_rotation_days=props.secret_rotation_days,
            log_retention=retention,
            proxy=shape.proxy,
            readers=shape.readers,
        )
        bus = Bus(self, "Events", name=props.name, existing_bus=props.event_bus)
        functions = Functions(
            self,
            "Functions",
            code=code or function_code(PROJECT_ROOT),
            vpc=network.vpc,
            subnets=network.app_subnets,
            environment={
                **database.environment,
                **props.scheduler_environment(),
                **bus.environment,
            },
            metrics_namespace=props.namespace,
            log_level=props.log_level,
            memory_mb=props.memory_mb,
            execute_timeout=Duration.seconds(props.execute_timeout_secs),
            log_retention=retention,
            reserved=props.reserved_concurrency(),
            tracing=props.tracing,
        )
        database.admit(f for name, f in functions.all.items() if name != "migrate")
        database.admit_owner(functions.migrate)
        bus.grant_put(f for name, f in functions.all.items() if name != "migrate")

        Scheduling(self, "Scheduling", reconcile=functions.reconcile, claim=functions.claim)
        execution = Execution(
            self,
            "Execution",
            execute=functions.execute,
            max_event_age=Duration.seconds(props.execute_max_event_age_secs),
        )
        TargetAccess(
            self,
            "TargetAccess",
            executor=functions.execute,
            installation=props.name,
            target_arns=props.target_arns,
            allow_tagged_targets=props.allow_tagged_targets,
            kms_keys=props.target_kms_keys,
        )
        api = Api(
            self,
            "Api",
            name=f"{props.name}-api",
            handler=functions.api,
            throttle_rate=props.api_throttle_rate,
            throttle_burst=props.api_throttle_burst,
            log_retention=retention,
        )
        bus.route_alerts(
            api_url=api.url, alert_email=props.alert_email, alert_topic_arn=props.alert_topic_arn
        )
        monitoring = Monitoring(
            self,
            "Monitoring",
            functions=functions.all,
            claim_wake=functions.claim_wake,
            dead_letters=execution.dead_letters,
            name=props.name,
            namespace=props.namespace,
            backlog_age_threshold_secs=props.backlog_age_threshold_secs,
            schedule_lag_threshold_secs=props.schedule_lag_threshold_secs,
            undelivered_event_age_threshold_secs=props.undelivered_event_age_threshold_secs,
            alarm_email=props.alarm_email,
            alarm_topic_arn=props.alarm_topic_arn,
            database_secret=database.cluster.secret,
        )
        Migration(
            self,
            "Migration",
            migrate=functions.migrate,
            database_secret=database.cluster.secret,
            after=[database],
            before=[
                function.node.default_child
                for name, function in functions.all.items()
                if name != "migrate"
            ],
        )

        HelperLogs(self, "HelperLogs", log_retention=retention)
        database.protect_after([c for c in self.node.children if c is not database])

        CfnOutput(self, "ApiUrl", value=api.url, description="The operator API (SigV4, IAM)")
        CfnOutput(self, "AlarmTopicArn", value=monitoring.topic.topic_arn)
        CfnOutput(
            self,
            "NoticeTopicArn",
            value=monitoring.notices.topic_arn,
            description="What heals itself (dead letters): subscribe a queue or an inbox",
        )
        CfnOutput(self, "DashboardUrl", value=monitoring.dashboard_url)
        CfnOutput(self, "EventBusArn", value=bus.bus.event_bus_arn)
        if bus.topic is not None:
            CfnOutput(self, "AlertTopicArn", value=bus.topic.topic_arn)
        CfnOutput(self, "ExecutorDeadLetterQueueUrl", value=execution.dead_letters.queue_url)
        CfnOutput(self, "DatabaseEndpoint", value=database.endpoint)
