"""What an operator may choose about a deployment, with the defaults a small installation wants.

Every choice is one typed field, validated when the props are made, so a bad value stops the
synth with the field's name instead of surfacing as a failed deploy. From the command line each
field is a context key `cronledger:<field>` (`cdk deploy -c cronledger:nat_gateways=0`); an
unknown `cronledger:` key is refused, so a typo cannot silently keep a default.

`name` names the installation: the stack is called that, and so is everything the stack names
itself (alarms, the dashboard, the API, the metrics namespace unless `metrics_namespace` says
otherwise); every resource carries the tag `cronledger:installation=<name>`. Two installations
with different names deploy side by side in one account and region.

`CRONLEDGER_*` scheduler settings (SPEC §7) left as `None` are not set in the functions'
environment, so the application's own defaults apply. `claim_lease_secs` is always set: the
executor's maximum event age must stay under it (an invocation that waited longer than the lease
would run an occurrence that another claim may already own).

What target documents may name beyond their target (SPEC §10) is the operator's alone:
`python_targets` (module prefixes) and `http_allow_networks` (CIDRs) are empty unless listed
(`-c cronledger:python_targets=reports.jobs`), and secret references are read from Secrets
Manager and SSM (`CRONLEDGER_SECRETS=aws`); the executor may read only those tagged
`cronledger:secret=<name>` (target_access.py).
"""

from __future__ import annotations

import ipaddress
import json
import re
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from aws_cdk import aws_logs as logs

from cronledger_infra.capacity import (
    DEFAULT_MAX_IN_FLIGHT,
    ConnectionBudget,
    aurora_max_connections,
)
from cronledger_infra.network import DEFAULT_CIDR
from cronledger_infra.profiles import (
    ALL_ENDPOINTS,
    DEFAULT_PROFILE,
    OPTIONAL_ENDPOINTS,
    PROFILES,
    Profile,
)

CONTEXT_PREFIX = "cronledger:"

REMOVAL_POLICIES = ("snapshot", "retain", "destroy")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
ENDPOINT_SERVICES = (*ALL_ENDPOINTS, *OPTIONAL_ENDPOINTS)
DEFAULT_NAME = "Cronledger"
#: How long `migrate` may run (functions.py gives it this timeout).
MIGRATE_TIMEOUT_SECS = 300
#: A CloudFormation stack name, short enough that every name derived from it stays within
#: its service's limit.
_KMS_KEY = re.compile(r"arn:aws[a-z-]*:kms:[a-z0-9-]+:\d{12}:key/[A-Za-z0-9-]+")
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9-]{0,31}")
#: Two one-minute ticks and a margin for their jitter (see `lookahead_secs`).
MIN_LOOKAHEAD_SECS = 150
_BUS = re.compile(r"(arn:aws[a-z-]*:events:[a-z0-9-]+:\d{12}:event-bus/)?[/.\-_A-Za-z0-9]{1,256}")
_TOPIC = re.compile(r"arn:aws[a-z-]*:sns:[a-z0-9-]+:\d{12}:[A-Za-z0-9_-]{1,256}(\.fifo)?")
_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


@dataclass(frozen=True)
class CronledgerProps:
    # the installation
    name: str = DEFAULT_NAME
    # the deployment profile (profiles.py); the two below override its network when set
    profile: str = DEFAULT_PROFILE
    # network
    nat_gateways: int | None = None
    vpc_endpoints: tuple[str, ...] | None = None
    vpc_cidr: str = DEFAULT_CIDR
    # database
    min_capacity_acu: float = 0.5
    max_capacity_acu: float = 4.0
    deletion_protection: bool = True
    removal_policy: str = "snapshot"
    secret_rotation_days: int = 30
    # functions
    memory_mb: int = 512
    execute_timeout_secs: int = 900
    execute_max_event_age_secs: int = 60
    log_retention: str = "ONE_MONTH"
    log_level: str = "INFO"
    # concurrency and the connections it takes (capacity.py); the executor's is max_in_flight
    reserve_concurrency: bool = True
    reconcile_concurrency: int = 2
    # shards one reconcile pass may split into, each an invocation (CRONLEDGER_RECONCILE_MAX_SHARDS)
    reconcile_shards: int = 4
    claim_concurrency: int = 2
    api_concurrency: int = 10
    database_max_connections: int | None = None
    # what the executor may call besides resources tagged `cronledger:target=<name>`
    target_arns: tuple[str, ...] = ()
    allow_tagged_targets: bool = True
    # customer managed KMS keys of encrypted SQS / EventBridge targets
    target_kms_keys: tuple[str, ...] = ()
    # what target documents may name (SPEC §10): none of either unless listed here
    python_targets: tuple[str, ...] = ()
    http_allow_networks: tuple[str, ...] = ()
    # api
    api_throttle_rate: float = 50.0
    api_throttle_burst: int = 100
    # monitoring
    metrics_namespace: str | None = None
    backlog_age_threshold_secs: int = 300
    schedule_lag_threshold_secs: int = 60
    alarm_email: str | None = None
    # an SNS topic of the operator's (a pager's) that the alarms notify too
    alarm_topic_arn: str | None = None
    # events (bus.py): the bus the stack makes unless one is named (its name or ARN); who is
    # told of alerting events; when undelivered events page
    event_bus: str | None = None
    alert_email: str | None = None
    alert_topic_arn: str | None = None
    undelivered_event_age_threshold_secs: int = 600
    # scheduler settings (CRONLEDGER_*)
    claim_lease_secs: int = 120
    claim_batch_size: int | None = None
    max_in_flight: int | None = None
    poll_interval_ms: int | None = None
    heartbeat_interval_secs: int | None = None
    misfire_grace_secs: int | None = None
    max_catch_up: int | None = None
    # Reconcile runs one pass a minute and claim returns when nothing is due in its
    # invocation: rows materialised two ticks and a margin ahead are known to the claim
    # invocation whose minute they fall in, so it waits for them (cost follows the work).
    lookahead_secs: int = 150
    retention_hours: int | None = None
    default_timeout_ms: int | None = None
    db_statement_timeout_ms: int | None = None
    db_socket_timeout_secs: int | None = None

    def __post_init__(self) -> None:
        problems = list(self._problems())
        if problems:
            raise ValueError("invalid cronledger props: " + "; ".join(problems))

    @property
    def namespace(self) -> str:
        """The CloudWatch namespace of the functions' metrics: the installation's own."""
        return self.metrics_namespace or self.name

    @property
    def shape(self) -> Profile:
        """The profile, with the operator's network overrides."""
        chosen = PROFILES.get(self.profile, PROFILES[DEFAULT_PROFILE])
        nat_gateways = chosen.nat_gateways if self.nat_gateways is None else self.nat_gateways
        endpoints = self.vpc_endpoints or chosen.vpc_endpoints
        if not nat_gateways and not self.vpc_endpoints:
            # a profile's NAT taken away: what it reached through the NAT needs its endpoint
            endpoints = tuple(dict.fromkeys((*endpoints, *PROFILES["lean"].vpc_endpoints)))
        return replace(chosen, nat_gateways=nat_gateways, vpc_endpoints=endpoints)

    @property
    def tracing(self) -> bool:
        """Whether the functions trace: only where X-Ray can be reached, through a NAT or
        its endpoint."""
        shape = self.shape
        return shape.nat_gateways > 0 or "xray" in shape.vpc_endpoints

    def concurrency(self) -> dict[str, int]:
        """Each function's concurrent containers at most (capacity.py), migrate aside."""
        return {
            # every overlapping tick, with the shards it starts
            "reconcile": self.reconcile_concurrency * self.reconcile_shards,
            "claim": self.claim_concurrency,
            "api": self.api_concurrency,
            "execute": self.max_in_flight or DEFAULT_MAX_IN_FLIGHT,
        }

    def reserved_concurrency(self) -> dict[str, int]:
        """What each function reserves of the account's concurrency (none when switched off)."""
        return self.concurrency() if self.reserve_concurrency else {}

    def connection_budget(self) -> ConnectionBudget:
        return ConnectionBudget(
            concurrency=self.concurrency(),
            database_max_connections=self.database_max_connections
            or aurora_max_connections(self.min_capacity_acu, self.max_capacity_acu),
        )

    def _problems(self) -> typing.Iterator[str]:
        for key in self.target_kms_keys:
            if not _KMS_KEY.fullmatch(key):
                yield f"target_kms_keys: {key!r} is not a KMS key ARN (arn:aws:kms:…:key/<id>)"
        if not _NAME.fullmatch(self.name):
            yield (
                f"name {self.name!r} must be a letter then up to 31 letters, digits or hyphens "
                "(it becomes the stack name and the prefix of every name the stack gives)"
            )
        if self.profile not in PROFILES:
            yield f"profile must be one of {list(PROFILES)}"
        shape = self.shape
        if shape.nat_gateways < 0:
            yield "nat_gateways must be 0 or more"
        unknown = sorted(set(shape.vpc_endpoints) - set(ENDPOINT_SERVICES))
        if unknown:
            yield f"vpc_endpoints {unknown} unknown; choose from {list(ENDPOINT_SERVICES)}"
        if not shape.nat_gateways and "secretsmanager" not in shape.vpc_endpoints:
            yield (
                "without NAT, vpc_endpoints must include secretsmanager: the password rotation "
                "(and the proxy, or migrate without one) reads the master user's secret "
                "through it"
            )
        try:
            cidr = ipaddress.ip_network(self.vpc_cidr)
        except ValueError as exc:
            yield f"vpc_cidr: {self.vpc_cidr!r} is not a network in CIDR form ({exc})"
        else:
            if not (cidr.version == 4 and cidr.is_private and 16 <= cidr.prefixlen <= 20):
                yield (
                    f"vpc_cidr: {self.vpc_cidr!r} must be a private IPv4 range from /16 to "
                    "/20: the VPC's six subnets (two /22, four /24) must fit in it"
                )
        if not shape.nat_gateways and "lambda" not in shape.vpc_endpoints:
            yield "without NAT, vpc_endpoints must include lambda: claim invokes the executor"
        if not shape.nat_gateways and "events" not in shape.vpc_endpoints:
            yield (
                "without NAT, vpc_endpoints must include events: the functions put the "
                "installation's events on its bus"
            )
        if not 0 <= self.min_capacity_acu <= self.max_capacity_acu <= 256:
            yield "need 0 <= min_capacity_acu <= max_capacity_acu <= 256"
        if self.removal_policy not in REMOVAL_POLICIES:
            yield f"removal_policy must be one of {list(REMOVAL_POLICIES)}"
        if not 1 <= self.secret_rotation_days <= 365:
            yield "secret_rotation_days must be 1..365"
        if not 60 <= self.execute_max_event_age_secs < self.claim_lease_secs:
            yield (
                "need 60 <= execute_max_event_age_secs < claim_lease_secs "
                f"(got {self.execute_max_event_age_secs} and {self.claim_lease_secs}): "
                "an invocation older than the lease may find its occurrence re-claimed"
            )
        if not MIN_LOOKAHEAD_SECS <= self.lookahead_secs <= 3600:
            yield (
                f"lookahead_secs must be {MIN_LOOKAHEAD_SECS}..3600: reconcile runs once a "
                "minute and claim only while something is due, so rows must exist two ticks "
                "(and a margin) before they fall due"
            )
        heartbeat = self.heartbeat_interval_secs
        if heartbeat is not None and not 0 < heartbeat < self.claim_lease_secs:
            yield "heartbeat_interval_secs must be above 0 and below claim_lease_secs"
        if not 1 <= self.execute_timeout_secs <= 900:
            yield "execute_timeout_secs must be 1..900 (the Lambda maximum)"
        if self.log_retention not in logs.RetentionDays.__members__:
            yield "log_retention must be a CDK RetentionDays name such as ONE_MONTH"
        if self.log_level not in LOG_LEVELS:
            yield f"log_level must be one of {list(LOG_LEVELS)}"
        if (self.db_statement_timeout_ms or 0) >= MIGRATE_TIMEOUT_SECS * 1000:
            yield (
                f"db_statement_timeout_ms must be under {MIGRATE_TIMEOUT_SECS * 1000}: migrate's "
                "connections wait as long as it runs, and no longer"
            )
        if not 1 <= self.reconcile_shards <= 64:
            yield "reconcile_shards must be 1..64"
        elif min(self.reconcile_concurrency, self.claim_concurrency, self.api_concurrency) < 1:
            yield "reconcile_concurrency, claim_concurrency and api_concurrency must be 1 or more"
        elif (budget := self.connection_budget().problem()) is not None:
            yield budget
        if self.api_throttle_rate <= 0 or self.api_throttle_burst <= 0:
            yield "api_throttle_rate and api_throttle_burst must be positive"
        if self.backlog_age_threshold_secs <= 0 or self.schedule_lag_threshold_secs <= 0:
            yield "backlog_age_threshold_secs and schedule_lag_threshold_secs must be positive"
        if self.undelivered_event_age_threshold_secs <= 0:
            yield "undelivered_event_age_threshold_secs must be positive"
        if self.event_bus is not None and not _BUS.fullmatch(self.event_bus):
            yield f"event_bus: {self.event_bus!r} is not an event bus name or ARN"
        for field in ("alert_topic_arn", "alarm_topic_arn"):
            topic = getattr(self, field)
            if topic is not None and not _TOPIC.fullmatch(topic):
                yield (
                    f"{field}: {topic!r} is not an SNS topic ARN "
                    "(arn:aws:sns:<region>:<account>:<name>)"
                )
        for prefix in self.python_targets:
            if not _MODULE.fullmatch(prefix):
                yield f"python_targets: {prefix!r} is not a module name such as reports.jobs"
        for network in self.http_allow_networks:
            try:
                ipaddress.ip_network(network)
            except ValueError as exc:
                yield f"http_allow_networks: {network!r} is not a network in CIDR form ({exc})"

    def scheduler_environment(self) -> dict[str, str]:
        """The `CRONLEDGER_*` settings the operator chose, as environment variables."""
        names = (
            "claim_lease_secs",
            "claim_batch_size",
            "max_in_flight",
            "poll_interval_ms",
            "heartbeat_interval_secs",
            "misfire_grace_secs",
            "max_catch_up",
            "lookahead_secs",
            "retention_hours",
            "default_timeout_ms",
            "db_statement_timeout_ms",
            "db_socket_timeout_secs",
        )
        chosen = {
            f"CRONLEDGER_{name.upper()}": str(value)
            for name in names
            if (value := getattr(self, name)) is not None
        }
        lists = {
            "python_targets": self.python_targets,
            "http_allow_networks": self.http_allow_networks,
        }
        chosen.update(
            {
                f"CRONLEDGER_{name.upper()}": ",".join(items)
                for name, items in lists.items()
                if items
            }
        )
        # Secret references on AWS are Secrets Manager ARNs and SSM parameter names.
        chosen["CRONLEDGER_SECRETS"] = "aws"
        # A pass starts no more shards than the reserved concurrency counts.
        chosen["CRONLEDGER_RECONCILE_MAX_SHARDS"] = str(self.reconcile_shards)
        return chosen

    @classmethod
    def from_context(cls, context: Mapping[str, Any]) -> CronledgerProps:
        """Props from CDK context: `cronledger:<field>` keys, strings (`-c`) or JSON values."""
        known = {f.name: f for f in fields(cls)}
        hints = typing.get_type_hints(cls)
        chosen: dict[str, Any] = {}
        for key, raw in context.items():
            if not key.startswith(CONTEXT_PREFIX):
                continue
            name = key.removeprefix(CONTEXT_PREFIX)
            if name not in known:
                raise ValueError(f"unknown context key {key!r}; known: {sorted(known)}")
            chosen[name] = _coerce(key, raw, hints[name])
        return cls(**chosen)


def _coerce(key: str, raw: Any, hint: Any) -> Any:
    """Turn a context value (a string from `-c`, or JSON from cdk.json) into the field's type."""
    optional = typing.get_origin(hint) in (typing.Union, types.UnionType)
    if optional:
        if raw is None or raw == "":
            return None
        hint = next(arg for arg in typing.get_args(hint) if arg is not type(None))
    try:
        if hint is bool:
            if isinstance(raw, bool):
                return raw
            if str(raw).lower() in ("true", "false"):
                return str(raw).lower() == "true"
            raise ValueError("expected true or false")
        if typing.get_origin(hint) is tuple:
            if isinstance(raw, str):
                raw = json.loads(raw) if raw.startswith("[") else raw.split(",")
            return tuple(str(item).strip() for item in raw if str(item).strip())
        if hint is int:
            return int(raw)
        if hint is float:
            return float(raw)
        return str(raw)
    except ValueError as exc:
        raise ValueError(f"context key {key!r}: cannot read {raw!r} ({exc})") from None
