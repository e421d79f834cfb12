"""Credentials by reference: `secret_headers` name a secret, never hold one. An attempt reads
it, kept at most `CACHE_SECS` (a rotation is picked up soon, a burst reads it once).

Where a reference may point is the operator's choice (`CRONLEDGER_SECRETS`): `env` allows only
`env:CRONLEDGER_SECRET_<NAME>` (the environment also holds the process's own credentials), `aws`
a Secrets Manager ARN or an SSM parameter. An AWS secret tagged `cronledger:secret-hosts` goes
only to the hosts listed there, checked at save (where the tags can be read) and before an
attempt sends anything, so a channel edited to point elsewhere cannot carry it along; tags that
cannot be read refuse the attempt. No message repeats a secret's value, only its reference.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from cronledger.targets.clients import AwsClients, arn_region
from cronledger.targets.policy import TargetPolicy

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.parameters import BaseProvider

ENV_PREFIX: Final = "CRONLEDGER_SECRET_"
CACHE_SECS: Final = 60
#: The tag that binds a secret to the hosts it may be sent to.
HOSTS_TAG: Final = "cronledger:secret-hosts"
_ENV_REFERENCE = re.compile(rf"env:{ENV_PREFIX}[A-Z0-9_]+")
_SECRET_ARN = re.compile(r"arn:aws[a-z-]*:secretsmanager:[a-z0-9-]+:\d{12}:secret:[\w/+=.@-]+")
_PARAMETER_ARN = re.compile(r"arn:aws[a-z-]*:ssm:[a-z0-9-]+:\d{12}:parameter/[\w./-]+")
_PARAMETER_NAME = re.compile(r"/?[\w.-]+(/[\w.-]+)*")
EXAMPLES: Final = {
    "env": f"env:{ENV_PREFIX}HOOK_TOKEN",
    "aws": "arn:aws:secretsmanager:eu-west-1:123456789012:secret:hook-token-AbCdEf",
}


class SecretUnavailable(Exception):
    """A reference could not be read; the message names the reference, never a value."""


def reference_problem(reference: str, policy: TargetPolicy) -> str | None:
    """What is wrong with a reference under the policy's secret source, or None."""
    if policy.secrets == "env":
        if _ENV_REFERENCE.fullmatch(reference):
            return None
        return (
            f"a secret reference is env:{ENV_PREFIX}<NAME>, a variable of the scheduler's "
            "environment set aside for targets (CRONLEDGER_SECRETS=env)"
        )
    if (
        _SECRET_ARN.fullmatch(reference)
        or _PARAMETER_ARN.fullmatch(reference)
        or (_PARAMETER_NAME.fullmatch(reference) and not reference.startswith("arn:"))
    ):
        return None
    return (
        "a secret reference is a Secrets Manager secret ARN or an SSM parameter name "
        "(CRONLEDGER_SECRETS=aws)"
    )


def resolve_secret(reference: str, policy: TargetPolicy, clients: AwsClients) -> str:
    """The value `reference` points at, read now or from the short cache."""
    problem = reference_problem(reference, policy)
    if problem:
        raise SecretUnavailable(f"secret {reference}: {problem}")
    if policy.secrets == "env":
        variable = os.environ.get(reference.removeprefix("env:"))
        if variable is None:
            raise SecretUnavailable(f"secret {reference} is not set in the scheduler's environment")
        return variable
    service = "secretsmanager" if _SECRET_ARN.fullmatch(reference) else "ssm"
    options: dict[str, Any] = {"decrypt": True} if service == "ssm" else {}
    try:
        provider = _provider(service, arn_region(reference), clients)
        value: object = provider.get(_name(reference), max_age=CACHE_SECS, **options)
    except Exception as exc:  # Powertools wraps the service's error; neither holds the value
        raise SecretUnavailable(f"secret {reference} could not be read: {exc}") from None
    if not isinstance(value, str):
        raise SecretUnavailable(f"secret {reference} is not text")
    return value


def secret_hosts(reference: str, clients: AwsClients) -> frozenset[str] | None:
    """The hosts an AWS secret's `cronledger:secret-hosts` tag names (lowercase), or None
    without the tag; read now or from the short cache. `SecretUnavailable` when unreadable."""
    with _providers_lock:
        cached = _hosts.get(reference)
    if cached is not None and time.monotonic() - cached[0] < CACHE_SECS:
        return cached[1]
    tags: list[Any]  # each service's own TypedDict of Key and Value
    try:
        if _SECRET_ARN.fullmatch(reference):
            client = clients.secretsmanager(arn_region(reference))
            tags = client.describe_secret(SecretId=reference).get("Tags", [])
        else:
            answer = clients.ssm(arn_region(reference)).list_tags_for_resource(
                ResourceType="Parameter", ResourceId=_name(reference)
            )
            tags = answer.get("TagList", [])
    except Exception as exc:  # the service's error names the secret, never its value
        raise SecretUnavailable(
            f"secret {reference}: its tags, which say where it may be sent, could not be "
            f"read: {exc}"
        ) from None
    listed = next((t.get("Value", "") for t in tags if t.get("Key") == HOSTS_TAG), None)
    hosts = None if listed is None else frozenset(filter(None, map(_host, listed.split(","))))
    with _providers_lock:
        _hosts[reference] = (time.monotonic(), hosts)
    return hosts


def hosts_where_readable(clients: AwsClients) -> Callable[[str], frozenset[str] | None]:
    """`secret_hosts` for a check that may go without: None also when the tags cannot be read
    (the caller lacks the permission, the secret is not there yet)."""

    def read(reference: str) -> frozenset[str] | None:
        try:
            return secret_hosts(reference, clients)
        except SecretUnavailable:
            return None

    return read


def host_refusal(reference: str, host: str, hosts: frozenset[str] | None) -> str | None:
    """Why the secret at `reference`, bound to `hosts`, may not be sent to `host`, or None."""
    if hosts is None or _host(host) in hosts:
        return None
    bound = ", ".join(sorted(hosts)) or "no host"
    return (
        f"secret {reference} may be sent only to {bound} (its tag {HOSTS_TAG}), "
        f"not to {_host(host)}"
    )


def _host(name: str) -> str:
    """A host name as the binding compares it: case and a final dot do not matter."""
    return name.strip().lower().rstrip(".")


_providers: dict[tuple[str, str | None], BaseProvider] = {}
_providers_lock = threading.Lock()
#: Per reference: when its hosts were read, and what they were.
_hosts: dict[str, tuple[float, frozenset[str] | None]] = {}


def _provider(service: str, region: str | None, clients: AwsClients) -> BaseProvider:
    """One caching Powertools provider per service and region, imported on first use."""
    from aws_lambda_powertools.utilities.parameters import SecretsProvider, SSMProvider

    with _providers_lock:
        provider = _providers.get((service, region))
        if provider is None:
            if service == "secretsmanager":
                provider = SecretsProvider(boto3_client=clients.secretsmanager(region))
            else:
                provider = SSMProvider(boto3_client=clients.ssm(region))
            _providers[(service, region)] = provider
        return provider


def _name(reference: str) -> str:
    """SSM takes a parameter's name, not its ARN; Secrets Manager takes either."""
    match = re.match(r"arn:[^:]+:ssm:[^:]+:\d+:parameter(/.*)", reference)
    if match is None:
        return reference
    name = match.group(1)
    # A parameter without a path has the ARN `…:parameter/name` and the name `name`.
    return name if name.count("/") > 1 else name[1:]


def scrub(text: str | None, secrets: list[str]) -> str | None:
    """`text` with every secret value replaced, for an answer or error that echoes one."""
    if text is None:
        return None
    for value in sorted(secrets, key=len, reverse=True):
        if value:
            text = text.replace(value, "[secret]")
    return text
