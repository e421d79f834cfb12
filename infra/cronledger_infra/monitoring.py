"""Alarms that page someone, one SNS topic they go to, and a dashboard to look at first.

The functions publish CloudWatch metrics as EMF through Powertools, in the `metrics_namespace`
with the single dimension `service` = `cronledger` (Powertools' default). Two of them are
alarmed here, so their names are part of the contract with the handlers:
- `OldestPendingAgeSeconds` (seconds; maximum over a minute): the backlog alarm fires when the
  oldest due, unclaimed occurrence is older than the threshold for three minutes running.
- `ReconcileSucceeded` (count; `reconcile` emits 1 after every pass that completed): the
  reconcile alarm fires when a five-minute period has none. Missing data is breaching, because
  a reconcile that cannot start (no database, no code, no permission) emits nothing at all.
The executor's dead-letter queue alarms on its first message; each function on its first error
in five minutes. Every alarm notifies the topic on ALARM and on OK. The topic is encrypted with
a key CloudWatch may use, and accepts only TLS.
"""

from __future__ import annotations

from collections.abc import Mapping

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as actions
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from cronledger_infra.functions import SERVICE_NAME

BACKLOG_METRIC = "OldestPendingAgeSeconds"
RECONCILE_METRIC = "ReconcileSucceeded"


class Monitoring(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        functions: Mapping[str, lambda_.IFunction],
        dead_letters: sqs.IQueue,
        name: str,
        namespace: str,
        backlog_age_threshold_secs: int,
        alarm_email: str | None,
    ) -> None:
        super().__init__(scope, construct_id)
        key = kms.Key(self, "TopicKey", description="cronledger alarms", enable_key_rotation=True)
        key.grant(
            iam.ServicePrincipal("cloudwatch.amazonaws.com"), "kms:Decrypt", "kms:GenerateDataKey*"
        )
        self.topic = sns.Topic(self, "Alarms", master_key=key, enforce_ssl=True)
        if alarm_email:
            self.topic.add_subscription(subscriptions.EmailSubscription(alarm_email))
        prefix = name
        self._action = actions.SnsAction(self.topic)

        def metric(name: str, statistic: str, period: Duration) -> cloudwatch.Metric:
            return cloudwatch.Metric(
                namespace=namespace,
                metric_name=name,
                dimensions_map={"service": SERVICE_NAME},
                statistic=statistic,
                period=period,
            )

        backlog = metric(BACKLOG_METRIC, "Maximum", Duration.minutes(1))
        reconciled = metric(RECONCILE_METRIC, "Sum", Duration.minutes(5))
        alarms = [
            self._alarm(
                "BacklogAge",
                f"{prefix}-backlog-age",
                backlog,
                backlog_age_threshold_secs,
                cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
                cloudwatch.TreatMissingData.NOT_BREACHING,
                "The oldest due occurrence has waited longer than the threshold: claims are "
                "not keeping up, or are failing. See the claim function's errors and logs.",
                evaluation_periods=3,
            ),
            self._alarm(
                "ReconcileStalled",
                f"{prefix}-reconcile-stalled",
                reconciled,
                1,
                cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
                cloudwatch.TreatMissingData.BREACHING,
                "No reconcile pass completed in five minutes: no new occurrences are being "
                "made. See the reconcile function's errors and logs, and the database.",
            ),
            self._alarm(
                "DeadLetters",
                f"{prefix}-executor-dead-letters",
                dead_letters.metric_approximate_number_of_messages_visible(
                    period=Duration.minutes(1), statistic="Maximum"
                ),
                1,
                cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
                cloudwatch.TreatMissingData.NOT_BREACHING,
                "An executor invocation was never run to completion (throttled past its age, "
                "or crashed). The occurrence's lease expires and it is claimed again; inspect "
                "the message, then delete it.",
            ),
        ]
        for name, function in functions.items():
            alarms.append(
                self._alarm(
                    f"{name.capitalize()}Errors",
                    f"{prefix}-{name}-errors",
                    function.metric_errors(period=Duration.minutes(5), statistic="Sum"),
                    1,
                    cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
                    cloudwatch.TreatMissingData.NOT_BREACHING,
                    f"The {name} function failed (an unhandled error or a timeout). "
                    "See its log group.",
                )
            )
        self.alarms = alarms

        dashboard = cloudwatch.Dashboard(self, "Dashboard", dashboard_name=prefix)
        dashboard.add_widgets(
            cloudwatch.AlarmStatusWidget(title="Alarms", alarms=alarms, width=24),
            cloudwatch.GraphWidget(
                title="Oldest pending occurrence (s)",
                left=[backlog],
                left_annotations=[
                    cloudwatch.HorizontalAnnotation(value=backlog_age_threshold_secs)
                ],
            ),
            cloudwatch.GraphWidget(title="Reconcile passes completed", left=[reconciled]),
            cloudwatch.GraphWidget(
                title="Function errors",
                left=[f.metric_errors(label=n) for n, f in functions.items()],
            ),
            cloudwatch.GraphWidget(
                title="Function duration p99",
                left=[f.metric_duration(statistic="p99", label=n) for n, f in functions.items()],
            ),
        )

    def _alarm(
        self,
        construct_id: str,
        name: str,
        metric: cloudwatch.IMetric,
        threshold: float,
        comparison: cloudwatch.ComparisonOperator,
        missing: cloudwatch.TreatMissingData,
        description: str,
        evaluation_periods: int = 1,
    ) -> cloudwatch.Alarm:
        alarm = cloudwatch.Alarm(
            self,
            construct_id,
            alarm_name=name,
            alarm_description=description,
            metric=metric,
            threshold=threshold,
            comparison_operator=comparison,
            evaluation_periods=evaluation_periods,
            treat_missing_data=missing,
        )
        alarm.add_alarm_action(self._action)
        alarm.add_ok_action(self._action)
        return alarm
