"""Settings: one immutable object read once from `CRONLEDGER_*` environment variables.

Every process builds `Settings.from_env()` before anything else, so a bad value stops it at
start, not as a strange lease race an hour later; all problems come in one `SettingsError`,
each naming its variable. Settings built directly obey the same rules and read no environment.
docs/reference/settings.md is generated from the fields below.

A blank value is refused (a template forgot to fill it in), except in the two lists, where
empty is the safe default itself (nothing allowed) and lets `cronledger dev` say "nothing" over
its loopback default; what they and `secrets` open: docs/guarantees.md#security.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Mapping
from datetime import timedelta
from typing import Annotated, Any, Final, Literal, Self, get_args

import sqlalchemy as sa
from pydantic import (
    BeforeValidator,
    Field,
    ModelWrapValidatorHandler,
    ValidationError,
    ValidationInfo,
    model_validator,
)
from pydantic_core import PydanticCustomError
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)
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


class EnvText(str):
    """A value as the environment wrote it: its validator reads it as text, and its messages
    speak of the variable."""


def _variable(name: str | None) -> str:
    return PREFIX + str(name).upper()


def _problem(message: str) -> PydanticCustomError:
    return PydanticCustomError("settings", message)


def _items(raw: str) -> list[str]:
    return [item.strip() for item in raw.split(",") if item.strip()]


def _whole(value: Any, info: ValidationInfo) -> Any:
    if not isinstance(value, str):
        return value
    variable = _variable(info.field_name)
    if not value.strip():
        raise _problem(f"{variable} is empty; unset it to use the default or give a number")
    try:
        return int(value.strip(), 10)
    except ValueError:
        raise _problem(f"{variable}={value!r} is not a whole number") from None


def _database_url(value: str, info: ValidationInfo) -> str:
    # The URL may carry a password, so no message below repeats it.
    text, variable = value.strip(), _variable(info.field_name)
    if not text:
        raise _problem(f"{variable} is empty; unset it to use {DEFAULT_DATABASE_URL}")
    try:
        sa.make_url(text)
    except ArgumentError:
        raise _problem(
            f"{variable} is not a database URL; use e.g. {DEFAULT_DATABASE_URL} or "
            "postgresql+pg8000://user@host:5432/db"
        ) from None
    return text


def _module_prefixes(value: Any, info: ValidationInfo) -> Any:
    variable = _variable(info.field_name)
    if isinstance(value, str):
        value = _items(value)
        bad = [p for p in value if not MODULE_NAME.fullmatch(p)]
        if bad:
            raise _problem(
                f"{variable}: {', '.join(map(repr, bad))} not a module name; list module "
                "prefixes separated by commas, e.g. reports.jobs,billing.tasks"
            )
    return value


def _module_name(value: str, info: ValidationInfo) -> str:
    if not MODULE_NAME.fullmatch(value):
        raise _problem(
            f"{PREFIX}PYTHON_TARGETS: {value!r} is not a module name such as reports.jobs"
        )
    return value


def _networks(value: Any, info: ValidationInfo) -> Any:
    variable = _variable(info.field_name)
    if not isinstance(value, str):
        if not all(isinstance(n, Network) for n in value):
            raise _problem(f"{variable} holds networks (ipaddress.ip_network)")
        return value
    networks, bad = [], []
    for item in _items(value):
        try:
            networks.append(ipaddress.ip_network(item))
        except ValueError as exc:
            bad.append(f"{item!r} ({exc})")
    if bad:
        raise _problem(
            f"{variable}: {'; '.join(bad)}; list networks in CIDR form separated by commas, "
            "e.g. 10.20.0.0/16,fd12:3456::/48"
        )
    return networks


def _secret_source(value: Any, info: ValidationInfo) -> Any:
    variable = _variable(info.field_name)
    if not isinstance(value, EnvText):
        if value not in SECRET_SOURCES:
            raise _problem(f"{variable}={value!r} must be one of env, aws")
        return value
    if value.strip().lower() not in SECRET_SOURCES:
        raise _problem(
            f"{variable}={value!r} must be env (env:CRONLEDGER_SECRET_* variables) or aws "
            "(Secrets Manager ARNs and SSM parameter names)"
        )
    return value.strip().lower()


def _webhook_url(value: str, info: ValidationInfo) -> str:
    if value.strip() and not re.fullmatch(r"https?://[^\s/?#]+[^\s]*", value.strip()):
        raise _problem(
            f"{_variable(info.field_name)} must be an http:// or https:// URL, e.g. "
            "http://127.0.0.1:9000/events"
        )
    return value.strip()


def _name(value: str, info: ValidationInfo) -> str:
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", value.strip()):
        raise _problem(
            f"{_variable(info.field_name)}={value!r} must be 1-64 letters, digits, `.`, `_` or "
            "`-`, starting with a letter or digit"
        )
    return value.strip()


Whole = Annotated[int, BeforeValidator(_whole)]


class _Span:
    """A duration setting as a `timedelta`, read from its field (named `…_ms`, `…_secs` or
    `…_hours`)."""

    _UNITS: Final = {"ms": "milliseconds", "secs": "seconds", "hours": "hours"}

    def __init__(self, field: str) -> None:
        self.field, self.unit = field, self._UNITS[field.rsplit("_", 1)[1]]

    def __get__(self, settings: Any, owner: type) -> timedelta:
        return timedelta(**{self.unit: getattr(settings, self.field)})


class Settings(BaseSettings):
    """What every process runs with; the meaning of each field is in
    docs/reference/settings-notes.yml, its range in its annotation."""

    model_config = SettingsConfigDict(
        env_prefix=PREFIX, frozen=True, extra="forbid", ignored_types=(_Span,)
    )

    database_url: Annotated[str, BeforeValidator(_database_url)] = DEFAULT_DATABASE_URL
    poll_interval_ms: Annotated[Whole, Field(ge=10, le=60_000)] = 1000
    claim_batch_size: Annotated[Whole, Field(ge=1, le=1000)] = 20
    claim_lease_secs: Annotated[Whole, Field(ge=2, le=3600)] = 60
    heartbeat_interval_secs: Annotated[Whole, Field(ge=1, le=3600)] = 15
    misfire_grace_secs: Annotated[Whole, Field(ge=0, le=86_400)] = 5
    max_catch_up: Annotated[Whole, Field(ge=1, le=1000)] = 100
    default_timeout_ms: Annotated[Whole, Field(ge=1, le=TIMEOUT_MAX_MS)] = 60_000
    max_in_flight: Annotated[Whole, Field(ge=1, le=10_000)] = 200
    lookahead_secs: Annotated[Whole, Field(ge=0, le=3600)] = 0
    retention_hours: Annotated[Whole, Field(ge=1, le=87_600)] = 720
    reconcile_shard_size: Annotated[Whole, Field(ge=100, le=1_000_000)] = 25_000
    reconcile_max_shards: Annotated[Whole, Field(ge=1, le=64)] = 4
    execute_margin_ms: Annotated[Whole, Field(ge=0, le=60_000)] = 2000
    db_statement_timeout_ms: Annotated[Whole, Field(ge=100, le=3_600_000)] = 30_000
    db_socket_timeout_secs: Annotated[Whole, Field(ge=1, le=3600)] = 40
    python_targets: Annotated[
        tuple[Annotated[str, BeforeValidator(_module_name)], ...],
        NoDecode,
        BeforeValidator(_module_prefixes),
    ] = ()
    http_allow_networks: Annotated[tuple[Network, ...], NoDecode, BeforeValidator(_networks)] = ()
    secrets: Annotated[SecretSource, BeforeValidator(_secret_source)] = "env"
    events_webhook_url: Annotated[str, BeforeValidator(_webhook_url)] = ""
    event_bus_name: Annotated[str, BeforeValidator(str.strip)] = ""
    installation: Annotated[str, BeforeValidator(_name)] = "cronledger"

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings,)  # built directly, from its arguments only: see `from_env`

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> Settings:
        """Read every setting from `environ`; raise one `SettingsError` naming each bad variable.
        Other `CRONLEDGER_*` variables belong to other modules and are ignored here."""
        source = EnvSettingsSource(cls)  # names matched case-insensitively, as it reads os.environ
        source.env_vars = {name.lower(): value for name, value in environ.items()}
        return cls.model_validate({name: EnvText(text) for name, text in source().items()})

    def replace(self, **changes: Any) -> Settings:
        """A copy with `changes`, checked like any other."""
        return type(self)(**{**dict(self), **changes})

    @model_validator(mode="wrap")
    @classmethod
    def _checked(cls, values: Any, handler: ModelWrapValidatorHandler[Self]) -> Self:
        """Every problem at once, as a `SettingsError`; the rules relating two settings only
        once each alone is valid (a relation to a bad value would only repeat the problem)."""
        try:
            settings = handler(values)
        except ValidationError as invalid:
            raise SettingsError([_message(error) for error in invalid.errors()]) from None
        lease, beat = settings.claim_lease_secs, settings.heartbeat_interval_secs
        grace, poll = settings.misfire_grace_secs, settings.poll_interval_ms
        socket, statement = settings.db_socket_timeout_secs, settings.db_statement_timeout_ms
        found = []
        if beat >= lease:  # a beat must land inside the lease, or every run loses its claim
            found.append(
                f"{PREFIX}HEARTBEAT_INTERVAL_SECS={beat} must be below {PREFIX}CLAIM_LEASE_SECS={lease}"
            )
        if grace * 1000 < poll:  # or an instant due just after one poll misfires at the next
            found.append(
                f"{PREFIX}MISFIRE_GRACE_SECS={grace} must cover {PREFIX}POLL_INTERVAL_MS={poll} "
                f"(set it to at least {-(-poll // 1000)})"
            )
        if socket * 1000 <= statement:  # the server's cancellation must reach a listening client
            found.append(
                f"{PREFIX}DB_SOCKET_TIMEOUT_SECS={socket} must be above "
                f"{PREFIX}DB_STATEMENT_TIMEOUT_MS={statement}"
            )
        if found:
            raise SettingsError(found)
        return settings

    poll_interval = _Span("poll_interval_ms")
    claim_lease = _Span("claim_lease_secs")
    heartbeat_interval = _Span("heartbeat_interval_secs")
    misfire_grace = _Span("misfire_grace_secs")
    default_timeout = _Span("default_timeout_ms")
    lookahead = _Span("lookahead_secs")
    execute_margin = _Span("execute_margin_ms")

    @property
    def renewal_give_up(self) -> timedelta:
        """How long an attempt may go without a successful renewal before it stops itself:
        by then a peer could take the lease over at the next beat."""
        return self.claim_lease - self.heartbeat_interval


def _message(error: Any) -> str:
    """The line a pydantic error becomes: the validators' own, or a range naming both ends."""
    if error["type"] == "settings":
        return str(error["msg"])
    name = str(error["loc"][0])
    variable = _variable(name)
    if error["type"] in ("greater_than_equal", "less_than_equal"):
        low, high = (
            next(getattr(m, end) for m in Settings.model_fields[name].metadata if hasattr(m, end))
            for end in ("ge", "le")
        )
        return f"{variable}={error['input']} must be between {low} and {high}"
    return f"{variable}: {error['msg']}"
