"""What the operator lets targets do: one immutable object, made from `Settings`. Whoever can
call the API chooses what the executor runs, so anything a document can name beyond its target
(a Python function, a private network, a secret) is allowed by this policy alone. The default
allows none of it: no `python` target, no private address, secrets only from the environment.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from cronledger.settings import Network, SecretSource, Settings
from cronledger.targets.addresses import Address, resolve

#: `resolver(host, port)`: every address `host` has, as the connection would use them.
Resolver = Callable[[str, int], Sequence[Address]]
#: `secret_hosts(reference)`: the hosts a secret is bound to, None when unbound or unknown.
SecretHosts = Callable[[str], frozenset[str] | None]

PYTHON_TARGETS = "CRONLEDGER_PYTHON_TARGETS"
HTTP_ALLOW_NETWORKS = "CRONLEDGER_HTTP_ALLOW_NETWORKS"


@dataclass(frozen=True, slots=True)
class TargetPolicy:
    """`python_modules`: module prefixes (each covering its submodules) whose functions `python`
    targets may call. `http_allow_networks`: networks `http` targets may reach although not
    public. `secrets`: where `secret_headers` references point. `resolver`: how hosts become
    addresses. `secret_hosts`: where a secret's tags can be read at save, the hosts it is
    bound to (an attempt always reads them itself)."""

    python_modules: tuple[str, ...] = ()
    http_allow_networks: tuple[Network, ...] = ()
    secrets: SecretSource = "env"
    resolver: Resolver = field(default=resolve, compare=False, repr=False)
    secret_hosts: SecretHosts | None = field(default=None, compare=False, repr=False)

    @classmethod
    def from_settings(cls, settings: Settings) -> TargetPolicy:
        return cls(
            python_modules=settings.python_targets,
            http_allow_networks=settings.http_allow_networks,
            secrets=settings.secrets,
        )

    def allows_module(self, module: str) -> bool:
        return any(
            module == prefix or module.startswith(f"{prefix}.") for prefix in self.python_modules
        )
