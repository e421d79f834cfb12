"""One cronledger installation as a construct: what `CronledgerStack` composes, and what a
user's own CDK app composes beside the functions its schedules run.

Each construct it holds owns one concern and its own invariants (see each module's header);
this one wires their outputs together, in dependency order, and publishes what an operator
needs after a deploy. Its props are `CronledgerProps`, profiles included, given whole or as
keyword arguments (`Cronledger(self, "Scheduler", profile="lean")`).

Channels are declared next to it (`add_channel`, `schedule`): each one grants the executor
exactly what its target needs and is applied by a custom resource at deploy (channels.py).
Every resource under it carries `cronledger:installation=<name>`; the stack's other
resources are the user's and keep their own tags.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from aws_cdk import (
    CfnOutput,
    Duration,
    RemovalPolicy,
    Stack,
    Tags,
    aws_lambda as lambda_,
    aws_logs as logs,
)
from constructs import Construct

from cronledger_infra.api import Api
from cronledger_infra.bundling import function_code
from cronledger_infra.bus import Bus
from cronledger_infra.channels import (
    APPLY_TIMEOUT,
    Channel,
    Channels,
    ChannelTarget,
    channel_name_of,
    target_document,
)
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


class Cronledger(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        props: CronledgerProps | None = None,
        code: lambda_.Code | None = None,
        **options: Any,
    ) -> None:
        """`props`, or `CronledgerProps(**options)`; `code` replaces the bundled asset (the
        tests' source-only one)."""
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        at_the_root = set(stack.node.children)
        if props is None:
            props = CronledgerProps(**options)
        elif options:
            raise TypeError(f"give props or {sorted(options)}, not both")
        self.props = props
        self._code = code or _checkout_code()
        self._channels: Channels | None = None
        # A proxy's target group takes no tags, though CDK would give it some.
        Tags.of(self).add(
            INSTALLATION_TAG, props.name, exclude_resource_types=["AWS::RDS::DBProxyTargetGroup"]
        )
        self._retention = retention = logs.RetentionDays[props.log_retention]

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
        self.database = database = Database(
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
        self._bus = bus = Bus(self, "Events", name=props.name, existing_bus=props.event_bus)
        self.functions = functions = Functions(
            self,
            "Functions",
            code=self._code,
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
        self.migration = Migration(
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
        # The rest of the installation: its constructs, and the helpers CDK put at the
        # stack's root for them (a trigger's provider, the log-retention function, ...).
        helpers = [c for c in stack.node.children if c not in at_the_root and c is not self]
        database.protect_after([c for c in self.node.children if c is not database] + helpers)

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

    def add_channel(
        self,
        name: str,
        *,
        target: ChannelTarget,
        schedule: str | None = None,
        at: str | None = None,
        timezone: str | None = None,
        payload: Mapping[str, Any] | None = None,
        misfire: str | None = None,
        max_catch_up: int | None = None,
        overlap: str | Mapping[str, Any] | None = None,
        retry: Mapping[str, Any] | None = None,
        alerts: Mapping[str, Any] | None = None,
        labels: Mapping[str, str] | None = None,
        timeout: Duration | None = None,
        target_options: Mapping[str, Any] | None = None,
        removal_policy: RemovalPolicy = RemovalPolicy.RETAIN,
    ) -> Channel:
        """Declare an active channel that runs `target` on `schedule` (six cron fields) or
        once `at` a local time, in `timezone`. `misfire` is its `misfire_policy` (with
        `max_catch_up` for `catch_up`), `overlap` its `concurrency` (a policy, or the whole
        object), `retry` and `alerts` those objects as the API takes them. Checked by the API
        at deploy, every problem at once; removed from the app, the channel is archived, or
        purged with `removal_policy=RemovalPolicy.DESTROY`."""
        if (schedule is None) == (at is None):
            raise ValueError(f"channel {name!r}: give exactly one of schedule and at")
        chosen: dict[str, Any] = {
            "schedule": schedule,
            "at": at,
            "timezone": timezone,
            "payload": None if payload is None else dict(payload),
            "misfire_policy": misfire,
            "max_catch_up": max_catch_up,
            "concurrency": {"policy": overlap} if isinstance(overlap, str) else overlap,
            "retry": retry,
            "alerts": alerts,
        }
        document: dict[str, Any] = {
            "name": name,
            "status": "active",
            "transport_config": {k: v for k, v in chosen.items() if v is not None},
            "target": target_document(target, target_options or {}),
        }
        if timeout is not None:
            document["timeout_ms"] = int(timeout.to_milliseconds())
        if labels is not None:
            document["labels"] = dict(labels)
        return self._declared().add(document, target, removal_policy)

    def schedule(
        self,
        target: ChannelTarget,
        schedule: str,
        *,
        timezone: str | None = None,
        name: str | None = None,
        **options: Any,
    ) -> Channel:
        """`add_channel` in one line: `installation.schedule(fn, "0 15 2 * * *",
        timezone="Europe/London")`, named after the target's construct id unless `name`."""
        if name is None:
            if isinstance(target, str):
                raise ValueError(f"schedule({target!r}, …): a URL target needs a name")
            name = channel_name_of(target)
        return self.add_channel(
            name, target=target, schedule=schedule, timezone=timezone, **options
        )

    def _declared(self) -> Channels:
        """The channels' handler and provider, made with the first channel declared."""
        if self._channels is None:
            handler = self.functions.add(
                "channels", APPLY_TIMEOUT, "Applies the channels declared in CDK at deploy"
            )
            self.database.admit([handler])
            self._bus.grant_put([handler])
            self._channels = Channels(
                self,
                "Channels",
                handler=handler,
                executor=self.functions.execute,
                after=self.migration.trigger,
                log_retention=self._retention,
            )
        return self._channels


def _checkout_code() -> lambda_.Code:
    """The functions' asset, built from the cronledger checkout this library is part of."""
    if not (PROJECT_ROOT / "functions" / "cronledger").is_dir():
        raise FileNotFoundError(
            f"the functions' code asset is built from a cronledger checkout, and "
            f"{PROJECT_ROOT} is not one: import cronledger_infra from a checkout's infra/ "
            "directory (docs/how-to/cdk-app.md), or pass code="
        )
    return function_code(PROJECT_ROOT)
