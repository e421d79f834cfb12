"""Deployment profiles (`-c cronledger:profile=lean|lean-nat|standard|ha`): how much network
and database an installation pays for, chosen in one word (docs/how-to/cost.md has the cost of
each, computed from the templates by `infra/cost.py`).

| | lean | lean-nat | standard (default) | ha |
|---|---|---|---|---|
| database | the writer, reached straight over verified TLS with IAM tokens | as lean | the writer behind RDS Proxy (TLS, IAM) | as standard, plus a reader in the second AZ that fails over |
| NAT gateways | none (no `http` target on the internet) | one | one | one per AZ |
| interface endpoints | `lambda`, `secretsmanager` and `events`, in one AZ | none: the NAT reaches every AWS API | `lambda` and `secretsmanager`, in both AZs | all five, in both AZs |

An interface endpoint beside a NAT only duplicates a route out, so `standard` keeps the two
whose traffic must not depend on the NAT's one AZ: `lambda` (every executor invocation claim
makes, and the API's wakes) and `secretsmanager` (the rotation, the proxy's secret); the rest go
through the NAT. X-Ray needs a way out too: without a NAT the functions trace only when the
`xray` endpoint is added, and otherwise do not trace at all (a trace that cannot leave would
only cost the daemon's retries).

`standard` is the default because it is what every earlier deploy made: switching an existing
installation's profile replaces its database endpoint and network, so that is left to an
operator who chooses it. `nat_gateways` and `vpc_endpoints` still override a profile's.

Without the proxy every function container connects to Aurora itself, so the connections are
bounded by the functions' concurrency alone: the same sum capacity.py checks for every profile.
"""

from __future__ import annotations

from dataclasses import dataclass

ALL_ENDPOINTS = ("secretsmanager", "lambda", "states", "sqs", "events")
#: Endpoints no profile makes, for an operator to add (`vpc_endpoints`) where there is no NAT:
#: SSM Parameter Store, for `secret_headers` that name a parameter; Step Functions' synchronous
#: API (`sync-states`), for an Express machine run with `wait` (StartSyncExecution); X-Ray
#: (`xray`), for traces.
OPTIONAL_ENDPOINTS = ("ssm", "sync-states", "xray")


@dataclass(frozen=True)
class Profile:
    proxy: bool
    readers: int
    nat_gateways: int
    vpc_endpoints: tuple[str, ...]
    endpoint_azs: int


PROFILES = {
    # claim invokes the executor and api wakes claim (lambda); migrate reads the master
    # user's secret and the rotation writes it (secretsmanager); every function puts the
    # events its commits make on the installation's bus (events)
    "lean": Profile(
        proxy=False,
        readers=0,
        nat_gateways=0,
        vpc_endpoints=("lambda", "secretsmanager", "events"),
        endpoint_azs=1,
    ),
    # the NAT reaches every AWS API; no proxy, as lean
    "lean-nat": Profile(proxy=False, readers=0, nat_gateways=1, vpc_endpoints=(), endpoint_azs=1),
    "standard": Profile(
        proxy=True,
        readers=0,
        nat_gateways=1,
        vpc_endpoints=("lambda", "secretsmanager"),
        endpoint_azs=2,
    ),
    "ha": Profile(
        proxy=True, readers=1, nat_gateways=2, vpc_endpoints=ALL_ENDPOINTS, endpoint_azs=2
    ),
}
DEFAULT_PROFILE = "standard"
