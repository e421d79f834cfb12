"""Settings: one immutable object read once from `CRONLEDGER_*` environment variables.

Every process (a Lambda cold start, `cronledger dev`) builds `Settings.from_env()` before doing
anything else, so a bad value stops it at start rather than as a strange lease race an hour
later. All problems are reported together in one `SettingsError`, each naming its variable.
Reading the environment happens only when asked: importing this module reads nothing.

| variable | default | rule |
|---|---|---|
| `CRONLEDGER_DATABASE_URL` | `sqlite:///.cronledger/cronledger.db` | a SQLAlchemy URL |
| `CRONLEDGER_POLL_INTERVAL_MS` | 1000 | 10..60000 |
| `CRONLEDGER_CLAIM_BATCH_SIZE` | 20 | 1..1000 |
| `CRONLEDGER_CLAIM_LEASE_SECS` | 60 | 2..3600 |
| `CRONLEDGER_HEARTBEAT_INTERVAL_SECS` | 15 | 1..3600, below the claim lease |
| `CRONLEDGER_MISFIRE_GRACE_SECS` | 5 | 0..86400, at least the poll interval |
| `CRONLEDGER_MAX_CATCH_UP` | 100 | 1..1000 |
| `CRONLEDGER_DEFAULT_TIMEOUT_MS` | 60000 | 1..900000 (Lambda's 15-minute ceiling) |
| `CRONLEDGER_MAX_IN_FLIGHT` | 100 | 1..10000 |
| `CRONLEDGER_LOOKAHEAD_SECS` | 0 | 0..3600 |
| `CRONLEDGER_RETENTION_HOURS` | 720 (30 days) | 1..87600 |
| `CRONLEDGER_RECONCILE_SHARD_SIZE` | 25000 | 100..1000000: due channels one shard of a pass takes on before the pass splits |
| `CRONLEDGER_RECONCILE_MAX_SHARDS` | 4 | 1..64: shards one pass splits into at most (on AWS, invocations at once) |
| `CRONLEDGER_EXECUTE_MARGIN_MS` | 2000 | 0..60000: kept back from the executor's time left |
| `CRONLEDGER_DB_STATEMENT_TIMEOUT_MS` | 30000 | 100..3600000: PostgreSQL cancels a statement running longer |
| `CRONLEDGER_DB_SOCKET_TIMEOUT_SECS` | 40 | 1..3600, above the statement timeout: a connection silent this long (connecting included) is dropped |
| `CRONLEDGER_PYTHON_TARGETS` | none | comma-separated module prefixes whose functions `python` targets may call |
| `CRONLEDGER_HTTP_ALLOW_NETWORKS` | none | comma-separated CIDRs `http` targets may reach although private, loopback, … |
| `CRONLEDGER_EVENTS_WEBHOOK_URL` | none | locally: an http(s) URL each delivered event is POSTed to (the address rules of `http` targets apply) |
| `CRONLEDGER_EVENT_BUS_NAME` | none | on AWS: the EventBridge bus events are put on |
| `CRONLEDGER_INSTALLATION` | `cronledger` | the installation's name: events' `source` is `cronledger.<name>` |
| `CRONLEDGER_SECRETS` | `env` | where `secret_headers` references point: `env` (`env:CRONLEDGER_SECRET_*` variables) or `aws` (Secrets Manager, SSM Parameter Store) |

The defaults not fixed by the spec were chosen so: a job gets a minute unless its channel says
otherwise; 100 attempts in flight is well inside a default Lambda concurrency quota; a month of
history answers "did it run last week?"; two seconds lets an executor settle and release after
its target gives up; no ledger statement needs 30 s, and one that waits that long on a lock or
a database going away is better cancelled, with 10 s more before the socket itself gives up on
a connection that went silent (a failover's half-open socket). A blank value is refused rather than read as "use the default", because a
blank usually means a template forgot to fill it in; the two lists are the exception, because
for them empty is the safe default itself (nothing allowed), and `cronledger dev` needs a way to
say "nothing" over its own loopback default. What the lists and `CRONLEDGER_SECRETS` open is the
subject of docs/guarantees.md#security and `cronledger.targets.policy`. Other `CRONLEDGER_*` variables belong to
other modules and are ignored here.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from datetime import timedelta
from typing import Any, Final, Literal, get_args

import sqlalchemy as sa
from sqlalchemy.exc import ArgumentError

from cronledger.errors import CronledgerError

PREFIX = "CRONLEDGER_"
DEFAULT_DATABASE_URL = "sqlite:///.cronledger/cronledger.db"
#: The longest a job may be given (Lambda's 15-minute ceiling): the default's bound, and a
#: channel's `timeout_ms`.
TIMEOUT_MAX_MS: Final = 900_000
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
SecretSource = Literal["env", "aws"]
SECRET_SOURCES: Final = get_args(SecretSource)
#: A dotted module name, as `python` targets and CRONLEDGER_PYTHON_TARGETS write it.
MODULE_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


class SettingsError(CronledgerError):
    """The environment holds invalid settings; `problems` has one line per bad variable."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("invalid cronledger settings: " + "; ".join(problems))


@dataclass(frozen=True, slots=True)
class Settings:
    database_url: str = DEFAULT_DATABASE_URL
    poll_interval_ms: int = 1000
    claim_batch_size: int = 20
    claim_lease_secs: int = 60
    heartbeat_interval_secs: int = 15
    misfire_grace_secs: int = 5
    max_catch_up: int = 100
    default_timeout_ms: int = 60_000
    max_in_flight: int = 200
    lookahead_secs: int = 0
    retention_hours: int = 720
    reconcile_shard_size: int = 25_000
    reconcile_max_shards: int = 4
    execute_margin_ms: int = 2000
    db_statement_timeout_ms: int = 30_000
    db_socket_timeout_secs: int = 40
    python_targets: tuple[str, ...] = ()
    http_allow_networks: tuple[Network, ...] = ()
    secrets: SecretSource = "env"
    events_webhook_url: str = ""
    event_bus_name: str = ""
    installation: str = "cronledger"

    def __post_init__(self) -> None:
        # Built directly (tests, the local runner) or from the environment: the same rules hold.
        problems = _problems({f.name: getattr(self, f.name) for f in fields(self)}, unparsed=set())
        if problems:
            raise SettingsError(problems)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> Settings:
        """Read every setting from `environ`; raise one `SettingsError` naming each bad variable."""
        given: dict[str, Any] = {}
        problems: list[str] = []
        unparsed: set[str] = set()
        for field in fields(cls):
            raw = environ.get(_variable(field.name))
            if raw is None:
                continue
            try:
                given[field.name] = _PARSERS[field.name](_variable(field.name), raw)
            except ValueError as exc:
                problems.append(str(exc))
                unparsed.add(field.name)
        merged = {f.name: given.get(f.name, f.default) for f in fields(cls)}
        problems += _problems(merged, unparsed)
        if problems:
            raise SettingsError(problems)
        return cls(**given)

    @property
    def poll_interval(self) -> timedelta:
        return timedelta(milliseconds=self.poll_interval_ms)

    @property
    def claim_lease(self) -> timedelta:
        return timedelta(seconds=self.claim_lease_secs)

    @property
    def heartbeat_interval(self) -> timedelta:
        return timedelta(seconds=self.heartbeat_interval_secs)

    @property
    def renewal_give_up(self) -> timedelta:
        """How long an attempt may go without a successful renewal before it stops itself:
        by then a peer could take the lease over at the next beat."""
        return self.claim_lease - self.heartbeat_interval

    @property
    def misfire_grace(self) -> timedelta:
        return timedelta(seconds=self.misfire_grace_secs)

    @property
    def default_timeout(self) -> timedelta:
        return timedelta(milliseconds=self.default_timeout_ms)

    @property
    def lookahead(self) -> timedelta:
        return timedelta(seconds=self.lookahead_secs)

    @property
    def retention(self) -> timedelta:
        return timedelta(hours=self.retention_hours)

    @property
    def execute_margin(self) -> timedelta:
        return timedelta(milliseconds=self.execute_margin_ms)


def _variable(name: str) -> str:
    return PREFIX + name.upper()


_RANGES: dict[str, tuple[int, int]] = {
    "poll_interval_ms": (10, 60_000),
    "claim_batch_size": (1, 1000),
    "claim_lease_secs": (2, 3600),
    "heartbeat_interval_secs": (1, 3600),
    "misfire_grace_secs": (0, 86_400),
    "max_catch_up": (1, 1000),
    "default_timeout_ms": (1, TIMEOUT_MAX_MS),
    "max_in_flight": (1, 10_000),
    "lookahead_secs": (0, 3600),
    "retention_hours": (1, 87_600),
    "reconcile_shard_size": (100, 1_000_000),
    "reconcile_max_shards": (1, 64),
    "execute_margin_ms": (0, 60_000),
    "db_statement_timeout_ms": (100, 3_600_000),
    "db_socket_timeout_secs": (1, 3600),
}


def _problems(values: Mapping[str, Any], unparsed: set[str]) -> list[str]:
    """Every range and every rule relating two settings, skipping values that did not parse."""
    found = [
        f"{_variable('python_targets')}: {prefix!r} is not a module name such as reports.jobs"
        for prefix in values["python_targets"]
        if not (isinstance(prefix, str) and MODULE_NAME.fullmatch(prefix))
    ]
    if not all(isinstance(n, Network) for n in values["http_allow_networks"]):
        found.append(f"{_variable('http_allow_networks')} holds networks (ipaddress.ip_network)")
    if values["secrets"] not in SECRET_SOURCES:
        found.append(f"{_variable('secrets')}={values['secrets']!r} must be one of env, aws")
    for name, (low, high) in _RANGES.items():
        if name not in unparsed and not low <= values[name] <= high:
            found.append(f"{_variable(name)}={values[name]} must be between {low} and {high}")
    if found or unparsed:
        # A relation between an out-of-range value and another would only repeat the problem.
        return found
    if values["heartbeat_interval_secs"] >= values["claim_lease_secs"]:
        # A beat must land inside the lease, or every run loses its claim to a peer.
        found.append(
            f"{_variable('heartbeat_interval_secs')}={values['heartbeat_interval_secs']} "
            f"must be below {_variable('claim_lease_secs')}={values['claim_lease_secs']}"
        )
    if values["misfire_grace_secs"] * 1000 < values["poll_interval_ms"]:
        # An instant that became due just after one poll would count as missed at the next.
        found.append(
            f"{_variable('misfire_grace_secs')}={values['misfire_grace_secs']} must cover "
            f"{_variable('poll_interval_ms')}={values['poll_interval_ms']} "
            f"(set it to at least {-(-values['poll_interval_ms'] // 1000)})"
        )
    if values["db_socket_timeout_secs"] * 1000 <= values["db_statement_timeout_ms"]:
        # The server's cancellation must arrive before the client stops listening for it.
        found.append(
            f"{_variable('db_socket_timeout_secs')}={values['db_socket_timeout_secs']} must be "
            f"above {_variable('db_statement_timeout_ms')}={values['db_statement_timeout_ms']}"
        )
    return found


def _integer(variable: str, raw: str) -> int:
    text = raw.strip()
    if not text:
        raise ValueError(f"{variable} is empty; unset it to use the default or give a number")
    try:
        return int(text, 10)
    except ValueError:
        raise ValueError(f"{variable}={raw!r} is not a whole number") from None


def _database_url(variable: str, raw: str) -> str:
    # The URL may carry a password, so no message below repeats it.
    text = raw.strip()
    if not text:
        raise ValueError(f"{variable} is empty; unset it to use {DEFAULT_DATABASE_URL}")
    try:
        sa.make_url(text)
    except ArgumentError:
        raise ValueError(
            f"{variable} is not a database URL; use e.g. {DEFAULT_DATABASE_URL} or "
            "postgresql+pg8000://user@host:5432/db"
        ) from None
    return text


def _items(raw: str) -> list[str]:
    return [item.strip() for item in raw.split(",") if item.strip()]


def _module_prefixes(variable: str, raw: str) -> tuple[str, ...]:
    prefixes = tuple(_items(raw))
    bad = [p for p in prefixes if not MODULE_NAME.fullmatch(p)]
    if bad:
        raise ValueError(
            f"{variable}: {', '.join(map(repr, bad))} not a module name; list module prefixes "
            "separated by commas, e.g. reports.jobs,billing.tasks"
        )
    return prefixes


def _networks(variable: str, raw: str) -> tuple[Network, ...]:
    networks, bad = [], []
    for item in _items(raw):
        try:
            networks.append(ipaddress.ip_network(item))
        except ValueError as exc:
            bad.append(f"{item!r} ({exc})")
    if bad:
        raise ValueError(
            f"{variable}: {'; '.join(bad)}; list networks in CIDR form separated by commas, "
            "e.g. 10.20.0.0/16,fd12:3456::/48"
        )
    return tuple(networks)


def _webhook_url(variable: str, raw: str) -> str:
    text = raw.strip()
    if text and not re.fullmatch(r"https?://[^\s/?#]+[^\s]*", text):
        raise ValueError(
            f"{variable} must be an http:// or https:// URL, e.g. http://127.0.0.1:9000/events"
        )
    return text


def _name(variable: str, raw: str) -> str:
    text = raw.strip()
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", text):
        raise ValueError(
            f"{variable}={raw!r} must be 1-64 letters, digits, `.`, `_` or `-`, starting with a "
            "letter or digit"
        )
    return text


def _secret_source(variable: str, raw: str) -> str:
    text = raw.strip().lower()
    if text not in SECRET_SOURCES:
        raise ValueError(
            f"{variable}={raw!r} must be env (env:CRONLEDGER_SECRET_* variables) or aws "
            "(Secrets Manager ARNs and SSM parameter names)"
        )
    return text


_PARSERS: dict[str, Callable[[str, str], Any]] = {
    "database_url": _database_url,
    "python_targets": _module_prefixes,
    "http_allow_networks": _networks,
    "secrets": _secret_source,
    "events_webhook_url": _webhook_url,
    "event_bus_name": lambda variable, raw: raw.strip(),
    "installation": _name,
    **dict.fromkeys(_RANGES, _integer),
}
