"""Alarms that page someone, one SNS topic they go to, and a dashboard to look at first.

The functions publish CloudWatch metrics as EMF through Powertools, in the installation's
namespace with the dimension `service` = `cronledger` (Powertools' default); `DbUnavailable`
adds `Operation` (the loop that failed). Their names are part of the contract with the handlers
(tests/aws/test_stack_contract.py). Lambda's own metrics (`AWS/Lambda`) cover what a handler
cannot report: an invocation that never ran.

Each alarm is M out of N one-period evaluations, and says what a period with no data means:
- backlog age (`OldestPendingAgeSeconds`, max over a minute, above the threshold) in 3 of 5
  minutes; missing data keeps the state: reconcile reports it once a pass, so no reading means
  no pass, which the reconcile alarm pages, and a gap must neither raise nor clear a backlog;
- reconcile stalled: reconcile was invoked (`AWS/Lambda` `Invocations`) in a 5-minute period
  that saw no completed pass (`ReconcileSucceeded`), in 1 of 1. A reconcile that cannot start
  (no database, no code, no permission) is still invoked and reports nothing, so it pages; a
  fresh installation whose first tick has not come yet has neither, and does not;
- schedule lag p99 (`ScheduleLagSeconds`, started minus due, 5 minutes, above the threshold) in
  2 of 3; missing data does not breach: a quiet period started nothing, so nothing was late
  (work that cannot start shows as backlog age);
- events undelivered (`OldestUndeliveredEventAgeSeconds`, max over a minute, above the
  threshold) in 3 of 5: the sweep retries with a backoff, so one slow minute is not a page, a
  bus that refuses or cannot be reached is; missing data keeps the state, as for the backlog
  (reconcile gauges the outbox after each pass);
- database unavailable (`DbUnavailable` of reconcile and claim, summed per minute, at least 1)
  in 3 of 5: a failover's minute is not a page, an outage is; missing data does not breach,
  as the count is recorded only on a failure;
- executor throttles (`AWS/Lambda` `Throttles` of execute, per minute) in 3 of 5: Lambda
  retries a throttled asynchronous event within its maximum age, so a moment at the cap only
  delays; missing data does not breach, Lambda reports nothing for a function not invoked;
- executor events dropped (`AsyncEventsDropped` of execute, per minute) in 3 of 5: a dropped
  event is an occurrence whose lease expires and which is claimed again, so one is not a page,
  a run of them is; ticks dropped (the same, of reconcile and claim, less the API's wakes of
  claim, which Lambda counts under claim's `wake` alias and which the next tick makes good) in
  3 of 5, as the next tick does the same work; missing data does not breach either;
- occurrences that failed or were skipped as misfires (`Occurrences` with `Status` `failed`
  and `skipped_misfire`, summed over 5 minutes) in 1 of 1: each is a run that did not happen
  or did not succeed, which only a person can judge;
- each function's errors (5 minutes) in 1 of 1; missing data does not breach (an idle function
  has no errors).

Two paths out. Every paging alarm notifies the alarm topic (and `alarm_topic_arn`, when the
operator names one) on ALARM and on OK. What heals itself goes to the notice topic, which
nobody is subscribed to unless the operator subscribes a queue or an inbox: a message sent to
the executor's dead-letter queue (`NumberOfMessagesSent`, per 5 minutes, at least 1: each one,
as it arrives, never a depth that stays in ALARM and hides the next). A failed rotation of the
database's master secret (Secrets Manager's `RotationFailed`) pages through the alarm topic:
nothing retries it before the next schedule, and the secret is what the proxy and migrate log
in with.

The topics accept only TLS, and only CloudWatch alarms of this installation (account, and
alarm names under its prefix) and EventBridge rules of this installation may publish; their key
serves CloudWatch on the same terms, and EventBridge without them, as its requests to KMS carry
no source to condition on. Without an address or a topic to page, the
synth says so loudly: alarms nobody receives are the same as none.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import jsii
from aws_cdk import (
    Annotations,
    Duration,
    Stack,
    aws_cloudwatch as cloudwatch,
    aws_cloudwatch_actions as actions,
    aws_events as events,
    aws_iam as iam,
    aws_kms as kms,
    aws_lambda as lambda_,
    aws_secretsmanager as secretsmanager,
    aws_sns as sns,
    aws_sns_subscriptions as subscriptions,
    aws_sqs as sqs,
)
from constructs import Construct

from cronledger_infra.functions import SERVICE_NAME

BACKLOG_METRIC = "OldestPendingAgeSeconds"
RECONCILE_METRIC = "ReconcileSucceeded"
LAG_METRIC = "ScheduleLagSeconds"
DB_UNAVAILABLE_METRIC = "DbUnavailable"
UNDELIVERED_AGE_METRIC = "OldestUndeliveredEventAgeSeconds"
OCCURRENCES_METRIC = "Occurrences"
#: The `Status`es of `Occurrences` that page: a run that did not succeed, or did not happen.
UNSETTLED_STATUSES = ("failed", "skipped_misfire")
#: The `Operation`s `DbUnavailable` is recorded with: the two loops.
DB_OPERATIONS = ("reconcile", "claim")

Compare = cloudwatch.ComparisonOperator
Missing = cloudwatch.TreatMissingData
MINUTE = Duration.minutes(1)
FIVE_MINUTES = Duration.minutes(5)


@dataclass(frozen=True)
class Rule:
    """When an alarm fires: M (`datapoints`) of N (`periods`) periods past the threshold, and
    what a period without data counts as."""

    threshold: float
    comparison: cloudwatch.ComparisonOperator
    missing: cloudwatch.TreatMissingData
    datapoints: int = 1
    periods: int = 1


class Monitoring(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        functions: Mapping[str, lambda_.IFunction],
        claim_wake: lambda_.IFunction,
        dead_letters: sqs.IQueue,
        name: str,
        namespace: str,
        backlog_age_threshold_secs: int,
        schedule_lag_threshold_secs: int,
        undelivered_event_age_threshold_secs: int,
        alarm_email: str | None,
        alarm_topic_arn: str | None,
        database_secret: secretsmanager.ISecret | None,
    ) -> None:
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        self._name = name
        key = kms.Key(self, "TopicKey", description="cronledger alarms", enable_key_rotation=True)
        self.topic = sns.Topic(self, "Alarms", master_key=key, enforce_ssl=True)
        self.notices = sns.Topic(self, "Notices", master_key=key, enforce_ssl=True)
        alarms_of_ours = {
            "StringEquals": {"aws:SourceAccount": stack.account},
            "ArnLike": {
                "aws:SourceArn": f"arn:{stack.partition}:cloudwatch:{stack.region}:"
                f"{stack.account}:alarm:{name}-*"
            },
        }
        # CloudFormation names a rule after its stack, which is named after the installation.
        rules_of_ours = {
            "StringEquals": {"aws:SourceAccount": stack.account},
            "ArnLike": {
                "aws:SourceArn": f"arn:{stack.partition}:events:{stack.region}:"
                f"{stack.account}:rule/{name}-*"
            },
        }
        # EventBridge's requests to KMS carry no source keys, so its use of the key cannot be
        # conditioned on them (it would be refused, silently); the topics' policies are.
        for service, conditions, key_conditions in (
            ("cloudwatch.amazonaws.com", alarms_of_ours, alarms_of_ours),
            ("events.amazonaws.com", rules_of_ours, None),
        ):
            principal = iam.ServicePrincipal(service)
            key.add_to_resource_policy(
                iam.PolicyStatement(
                    principals=[principal],
                    actions=["kms:Decrypt", "kms:GenerateDataKey*"],
                    resources=["*"],
                    conditions=key_conditions,
                )
            )
            for topic in (self.topic, self.notices):
                topic.add_to_resource_policy(
                    iam.PolicyStatement(
                        principals=[principal],
                        actions=["sns:Publish"],
                        resources=[topic.topic_arn],
                        conditions=conditions,
                    )
                )
        if alarm_email:
            self.topic.add_subscription(subscriptions.EmailSubscription(alarm_email))
        self._actions: list[cloudwatch.IAlarmAction] = [actions.SnsAction(self.topic)]
        if alarm_topic_arn:
            pager = sns.Topic.from_topic_arn(self, "OperatorAlarmTopic", alarm_topic_arn)
            self._actions.append(actions.SnsAction(pager))
        if not (alarm_email or alarm_topic_arn):
            Annotations.of(self).add_warning_v2(
                "cronledger:alarms-unheard",
                "NOBODY WILL BE PAGED: neither alarm_email nor alarm_topic_arn is set, so the "
                "alarms notify a topic nobody is subscribed to. Deploy with "
                "-c cronledger:alarm_email=<address> or -c cronledger:alarm_topic_arn=<topic>, "
                "or subscribe to the AlarmTopicArn output.",
            )
        if database_secret is not None:
            self.rotation_failed = events.Rule(
                self,
                "RotationFailed",
                description="The database master secret's rotation failed",
                event_pattern=events.EventPattern(
                    source=["aws.secretsmanager"],
                    detail_type=["AWS Service Event via CloudTrail"],
                    detail={
                        "eventSource": ["secretsmanager.amazonaws.com"],
                        "eventName": ["RotationFailed"],
                        "additionalEventData": {"SecretId": [database_secret.secret_arn]},
                    },
                ),
            )
            self.rotation_failed.add_target(
                _Publish(
                    self.topic,
                    events.RuleTargetInput.from_text(
                        f"{name}: the rotation of the database's master secret failed "
                        f"({events.EventField.from_path('$.detail.additionalEventData.SecretId')}"
                        "). The proxy and migrate log in with it: see the rotation function's "
                        "log group, fix the cause, then rotate it again "
                        "(aws secretsmanager rotate-secret)."
                    ),
                )
            )

        def ours(
            metric: str, statistic: str, period: Duration, **dimensions: str
        ) -> cloudwatch.Metric:
            return cloudwatch.Metric(
                namespace=namespace,
                metric_name=metric,
                dimensions_map={"service": SERVICE_NAME, **dimensions},
                statistic=statistic,
                period=period,
            )

        def dropped(*names: str) -> cloudwatch.IMetric:
            return _summed(
                "Events dropped",
                {
                    n: functions[n].metric("AsyncEventsDropped", period=MINUTE, statistic="Sum")
                    for n in names
                },
            )

        wakes_dropped = claim_wake.metric(
            "AsyncEventsDropped", period=MINUTE, statistic="Sum", label="API wakes dropped"
        )
        ticks_dropped = cloudwatch.MathExpression(
            expression="SUM([m_reconcile, m_claim]) - FILL(m_wakes, 0)",
            using_metrics={
                "m_reconcile": functions["reconcile"].metric(
                    "AsyncEventsDropped", period=MINUTE, statistic="Sum"
                ),
                "m_claim": functions["claim"].metric(
                    "AsyncEventsDropped", period=MINUTE, statistic="Sum"
                ),
                "m_wakes": wakes_dropped,
            },
            label="Ticks dropped",
            period=MINUTE,
        )
        backlog = ours(BACKLOG_METRIC, "Maximum", MINUTE)
        reconciled = ours(RECONCILE_METRIC, "Sum", FIVE_MINUTES)
        # Invoked yet passed none: 1; anything else, 0. With neither series (before the first
        # tick of a fresh installation) the expression has no data, which does not breach.
        stalled = cloudwatch.MathExpression(
            expression="IF(FILL(invoked, 0) > 0 AND FILL(passed, 0) < 1, 1, 0)",
            using_metrics={
                "invoked": functions["reconcile"].metric_invocations(
                    period=FIVE_MINUTES, statistic="Sum"
                ),
                "passed": reconciled,
            },
            label="Reconcile invoked without a completed pass",
            period=FIVE_MINUTES,
        )
        unsettled = _summed(
            "Occurrences failed or skipped",
            {
                status: ours(OCCURRENCES_METRIC, "Sum", FIVE_MINUTES, Status=status)
                for status in UNSETTLED_STATUSES
            },
            FIVE_MINUTES,
        )
        lag = ours(LAG_METRIC, "p99", FIVE_MINUTES)
        undelivered = ours(UNDELIVERED_AGE_METRIC, "Maximum", MINUTE)
        unavailable = _summed(
            "DbUnavailable",
            {op: ours(DB_UNAVAILABLE_METRIC, "Sum", MINUTE, Operation=op) for op in DB_OPERATIONS},
        )
        execute = functions["execute"]
        throttles = execute.metric_throttles(period=MINUTE, statistic="Sum")
        at_least_one = (1, Compare.GREATER_THAN_OR_EQUAL_TO_THRESHOLD)
        self.alarms = [
            self._alarm(
                "BacklogAge",
                "backlog-age",
                backlog,
                Rule(
                    backlog_age_threshold_secs, Compare.GREATER_THAN_THRESHOLD, Missing.IGNORE, 3, 5
                ),
                "The oldest due occurrence has waited longer than the threshold: claims are "
                "not keeping up, or are failing. See the claim function's errors and logs.",
            ),
            self._alarm(
                "ReconcileStalled",
                "reconcile-stalled",
                stalled,
                Rule(1, Compare.GREATER_THAN_OR_EQUAL_TO_THRESHOLD, Missing.NOT_BREACHING),
                "Reconcile ran but no pass completed in five minutes: no new occurrences are "
                "being made. See the reconcile function's errors and logs, and the database.",
            ),
            self._alarm(
                "ScheduleLag",
                "schedule-lag",
                lag,
                Rule(
                    schedule_lag_threshold_secs,
                    Compare.GREATER_THAN_THRESHOLD,
                    Missing.NOT_BREACHING,
                    2,
                    3,
                ),
                "Attempts start late: the p99 of started minus due exceeds the threshold. "
                "Look at executor throttles, claim's duration and the database's load.",
            ),
            self._alarm(
                "EventsUndelivered",
                "events-undelivered",
                undelivered,
                Rule(
                    undelivered_event_age_threshold_secs,
                    Compare.GREATER_THAN_THRESHOLD,
                    Missing.IGNORE,
                    3,
                    5,
                ),
                "An event has waited longer than the threshold to reach the installation's "
                "event bus: alerts are not being delivered. See the last_error of undelivered "
                "events (GET /api/v1/admin/cron/events), the bus, and the functions' "
                "events:PutEvents permission and network route.",
            ),
            self._alarm(
                "DatabaseUnavailable",
                "database-unavailable",
                unavailable,
                Rule(*at_least_one, Missing.NOT_BREACHING, 3, 5),
                "Reconcile or claim cannot reach the ledger database, or it does not answer "
                "in time. See the cluster's events, its capacity and connections, and the proxy.",
            ),
            self._alarm(
                "ExecutorThrottles",
                "executor-throttles",
                throttles,
                Rule(*at_least_one, Missing.NOT_BREACHING, 3, 5),
                "Executor invocations are throttled: the executor is at its reserved "
                "concurrency (max_in_flight) or the account's limit. Attempts start late, and "
                "are dropped past their maximum event age.",
            ),
            self._alarm(
                "ExecutorEventsDropped",
                "executor-events-dropped",
                dropped("execute"),
                Rule(*at_least_one, Missing.NOT_BREACHING, 3, 5),
                "Executor invocations keep being dropped without running (throttled or failing "
                "past their maximum event age): their occurrences wait for their leases to "
                "expire. See the dead-letter queue and the throttles.",
            ),
            self._alarm(
                "OccurrencesUnsettled",
                "occurrences-failed-or-skipped",
                unsettled,
                Rule(*at_least_one, Missing.NOT_BREACHING),
                "Occurrences failed (their last attempt did not succeed) or were skipped as "
                "misfires (due while nothing could run them, past misfire_grace_secs). See "
                "the installation's events and GET /api/v1/admin/cron/occurrences?status=failed.",
            ),
            self._alarm(
                "TicksDropped",
                "ticks-dropped",
                ticks_dropped,
                Rule(*at_least_one, Missing.NOT_BREACHING, 3, 5),
                "Reconcile or claim ticks are being dropped (throttled or failing past a "
                "minute): see their reserved concurrency, errors and logs.",
            ),
            self._alarm(
                "DeadLetters",
                "executor-dead-letters",
                dead_letters.metric_number_of_messages_sent(period=FIVE_MINUTES, statistic="Sum"),
                Rule(*at_least_one, Missing.NOT_BREACHING),
                "An executor invocation was never run to completion (throttled past its age, "
                "or crashed). The occurrence's lease expires and it is claimed again; inspect "
                "the message, then delete it.",
                paging=False,
            ),
            *(
                self._alarm(
                    f"{fn.capitalize()}Errors",
                    f"{fn}-errors",
                    function.metric_errors(period=FIVE_MINUTES, statistic="Sum"),
                    Rule(*at_least_one, Missing.NOT_BREACHING),
                    f"The {fn} function failed (an unhandled error or a timeout). "
                    "See its log group.",
                )
                for fn, function in functions.items()
            ),
        ]

        self.dashboard = cloudwatch.Dashboard(self, "Dashboard", dashboard_name=name)
        self.dashboard.add_widgets(
            cloudwatch.AlarmStatusWidget(title="Alarms", alarms=self.alarms, width=24),
            cloudwatch.GraphWidget(
                title="Oldest pending occurrence (s)",
                left=[backlog],
                left_annotations=[
                    cloudwatch.HorizontalAnnotation(value=backlog_age_threshold_secs)
                ],
            ),
            cloudwatch.GraphWidget(
                title="Schedule lag p99 (s)",
                left=[lag],
                left_annotations=[
                    cloudwatch.HorizontalAnnotation(value=schedule_lag_threshold_secs)
                ],
            ),
            cloudwatch.GraphWidget(title="Reconcile passes completed", left=[reconciled]),
            cloudwatch.GraphWidget(title="Occurrences failed or skipped", left=[unsettled]),
            cloudwatch.GraphWidget(
                title="Oldest undelivered event (s)",
                left=[undelivered],
                left_annotations=[
                    cloudwatch.HorizontalAnnotation(value=undelivered_event_age_threshold_secs)
                ],
            ),
            cloudwatch.GraphWidget(title="Database unavailable", left=[unavailable]),
            cloudwatch.GraphWidget(
                title="Executor throttles and events dropped",
                left=[throttles, dropped("execute"), ticks_dropped, wakes_dropped],
            ),
            cloudwatch.GraphWidget(
                title="Concurrent executions",
                left=[
                    f.metric("ConcurrentExecutions", statistic="Maximum", label=n)
                    for n, f in functions.items()
                ],
            ),
            cloudwatch.GraphWidget(
                title="Function errors",
                left=[f.metric_errors(label=n) for n, f in functions.items()],
            ),
            cloudwatch.GraphWidget(
                title="Function duration p99",
                left=[f.metric_duration(statistic="p99", label=n) for n, f in functions.items()],
            ),
        )

    @property
    def dashboard_url(self) -> str:
        region = Stack.of(self).region
        return (
            f"https://{region}.console.aws.amazon.com/cloudwatch/home?region={region}"
            f"#dashboards/dashboard/{self._name}"
        )

    def _alarm(
        self,
        construct_id: str,
        suffix: str,
        metric: cloudwatch.IMetric,
        rule: Rule,
        description: str,
        *,
        paging: bool = True,
    ) -> cloudwatch.Alarm:
        alarm = cloudwatch.Alarm(
            self,
            construct_id,
            alarm_name=f"{self._name}-{suffix}",
            alarm_description=description,
            metric=metric,
            threshold=rule.threshold,
            comparison_operator=rule.comparison,
            datapoints_to_alarm=rule.datapoints,
            evaluation_periods=rule.periods,
            treat_missing_data=rule.missing,
        )
        for action in self._actions if paging else [actions.SnsAction(self.notices)]:
            alarm.add_alarm_action(action)
            alarm.add_ok_action(action)
        return alarm


def _summed(
    label: str, metrics: Mapping[str, cloudwatch.IMetric], period: Duration = MINUTE
) -> cloudwatch.IMetric:
    """One series, the sum of `metrics` at each period; no data where none of them has any.
    A single metric is itself."""
    if len(metrics) == 1:
        return next(iter(metrics.values()))
    ids = {f"m_{name}": metric for name, metric in metrics.items()}
    return cloudwatch.MathExpression(
        expression=f"SUM([{', '.join(ids)}])", using_metrics=ids, label=label, period=period
    )


@jsii.implements(events.IRuleTarget)
class _Publish:
    """A rule target that publishes to `topic` and grants nothing: the topic and its key
    already admit this installation's rules, and no one else (CDK's own target would add a
    grant to every rule of every account's EventBridge)."""

    def __init__(self, topic: sns.ITopic, message: events.RuleTargetInput) -> None:
        self._topic = topic
        self._message = message

    def bind(self, _rule: events.IRule, _id: str | None = None) -> events.RuleTargetConfig:
        return events.RuleTargetConfig(arn=self._topic.topic_arn, input=self._message)
