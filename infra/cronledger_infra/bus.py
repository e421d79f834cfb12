"""The installation's EventBridge bus: where its events go, who may put them there, and which
of them reach a person.

The stack makes the bus (`<name>-events`) unless `event_bus` names one to use instead. Every
function but `migrate` may `events:PutEvents` on that bus, by its ARN, never a wildcard:
events are sent by whichever function's commit made them, and swept by `reconcile`. Each event's `source`
is `cronledger.<name>`, its `detail-type` the kind's readable form, its `detail` the event.

With `alert_email` or `alert_topic_arn`, one rule per alerting kind (`ALERT_DETAIL_TYPES`: the
kinds a channel delivers unless it says otherwise) sends a sentence a person can act on to
SNS, rather than the event's JSON: the channel, the instant, what happened, the error, where
to look. The stack's own topic for `alert_email` is encrypted with a key EventBridge may use;
a topic of `alert_topic_arn` (in the stack's account and region) must let
`events.amazonaws.com` publish, as its policy is not the stack's to change. Rules live in the
bus's account, so a bus of another account routes its own alerts.
"""

from __future__ import annotations

from collections.abc import Iterable

from aws_cdk import (
    Annotations,
    aws_events as events,
    aws_events_targets as targets,
    aws_iam as iam,
    aws_kms as kms,
    aws_lambda as lambda_,
    aws_sns as sns,
    aws_sns_subscriptions as subscriptions,
)
from constructs import Construct

#: What the functions read (cronledger.settings).
BUS_VARIABLE = "CRONLEDGER_EVENT_BUS_NAME"
INSTALLATION_VARIABLE = "CRONLEDGER_INSTALLATION"
#: The detail-types a person is told of: a channel's default `alerts.on`.
ALERT_DETAIL_TYPES = (
    "Occurrence Failed",
    "Occurrence Abandoned",
    "Occurrence Overdue",
    "Channel Stalled",
    "Channel Recovered",
)


class Bus(Construct):
    def __init__(
        self, scope: Construct, construct_id: str, *, name: str, existing_bus: str | None
    ) -> None:
        super().__init__(scope, construct_id)
        self._name = name
        self.source = f"cronledger.{name}"
        if existing_bus is None:
            self.bus: events.IEventBus = events.EventBus(
                self,
                "Bus",
                event_bus_name=f"{name}-events",
                description=f"cronledger {name}: occurrence and channel events",
            )
            told = self.bus.event_bus_name
        elif existing_bus.startswith("arn:"):
            self.bus = events.EventBus.from_event_bus_arn(self, "Bus", existing_bus)
            told = existing_bus  # an ARN reaches a bus of another account or region
        else:
            self.bus = events.EventBus.from_event_bus_name(self, "Bus", existing_bus)
            told = existing_bus
        self.environment = {BUS_VARIABLE: told, INSTALLATION_VARIABLE: name}
        self.topic: sns.ITopic | None = None

    def grant_put(self, functions: Iterable[lambda_.IFunction]) -> None:
        """Each function may put events on this bus, and nowhere else."""
        for function in functions:
            self.bus.grant_put_events_to(function)

    def route_alerts(
        self, *, api_url: str, alert_email: str | None, alert_topic_arn: str | None
    ) -> None:
        """Alerting events, as sentences, to a topic of the stack's subscribed by
        `alert_email` and to `alert_topic_arn` (in the stack's account and region): one rule
        per detail-type. Neither given: no rule, the bus only carries the events."""
        topics: list[sns.ITopic] = []
        if alert_email:
            key = kms.Key(
                self,
                "AlertKey",
                description=f"cronledger {self._name} alerts",
                enable_key_rotation=True,
            )
            key.grant(
                iam.ServicePrincipal("events.amazonaws.com"), "kms:Decrypt", "kms:GenerateDataKey*"
            )
            self.topic = sns.Topic(self, "Alerts", master_key=key, enforce_ssl=True)
            self.topic.add_subscription(subscriptions.EmailSubscription(alert_email))
            topics.append(self.topic)
        if alert_topic_arn:
            topics.append(sns.Topic.from_topic_arn(self, "AlertTopic", alert_topic_arn))
        if not topics:
            return
        for detail_type, sentence in sentences(self._name, api_url).items():
            rule = events.Rule(
                self,
                detail_type.replace(" ", ""),
                event_bus=self.bus,
                description=f"cronledger {self._name}: {detail_type} to the alert topic",
                event_pattern=events.EventPattern(source=[self.source], detail_type=[detail_type]),
                targets=[
                    targets.SnsTopic(topic, message=events.RuleTargetInput.from_text(sentence))
                    for topic in topics
                ],
            )
            if alert_topic_arn:
                Annotations.of(rule).acknowledge_warning(
                    "@aws-cdk/aws-events:ruleUnresolvedEnvironment",
                    "alert_topic_arn names a topic in the stack's own account and region",
                )


def sentences(name: str, api_url: str) -> dict[str, str]:
    """Per alerting detail-type, the message a person gets: EventBridge fills each field
    from the event's detail."""

    def field(path: str) -> str:
        return events.EventField.from_path(f"$.detail.{path}")

    channel, instant = field("channel_name"), field("scheduled_for")
    attempt = f"attempt {field('attempt')} of {field('max_attempts')}"
    where = f"Console: {field('links.console')} (cronledger console --api-url {api_url})."
    told = {
        "Occurrence Failed": (
            f"channel {channel} failed: its run scheduled for {instant} failed on {attempt} "
            f"with: {field('error')}."
        ),
        "Occurrence Abandoned": (
            f"channel {channel} abandoned a run: the one scheduled for {instant} stopped "
            f"renewing its lease on {attempt} (its executor died or ran out of time)."
        ),
        "Occurrence Overdue": (
            f"channel {channel} is overdue: its run scheduled for {instant} has not completed "
            f"in time and is {field('status')}."
        ),
        "Channel Stalled": (
            f"channel {channel} has stalled: nothing has been scheduled for it since "
            f"{field('oldest_scheduled_for')}, as reconciling it keeps failing."
        ),
        "Channel Recovered": (
            f"channel {channel} has recovered: its run scheduled for {instant} completed."
        ),
    }
    assert set(told) == set(ALERT_DETAIL_TYPES)
    return {kind: f"cronledger {name}: {text} {where}" for kind, text in told.items()}
