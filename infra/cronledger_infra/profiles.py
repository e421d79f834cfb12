"""Deployment profiles (`-c cronledger:profile=lean|standard|ha`): how much network and
database an installation pays for, chosen in one word (README "Profiles" has the cost of each).

| | lean | standard (default) | ha |
|---|---|---|---|
| database | the writer, reached straight over verified TLS with IAM tokens | the writer behind RDS Proxy (TLS, IAM) | as standard, plus a reader in the second AZ that fails over |
| NAT gateways | none (no `http` target on the internet) | one | one per AZ |
| interface endpoints | `lambda`, `secretsmanager` and `events`, in one AZ | all five, in both AZs | all five, in both AZs |

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
#: API (`sync-states`), for an Express machine run with `wait` (StartSyncExecution).
OPTIONAL_ENDPOINTS = ("ssm", "sync-states")


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
    "standard": Profile(
        proxy=True, readers=0, nat_gateways=1, vpc_endpoints=ALL_ENDPOINTS, endpoint_azs=2
    ),
    "ha": Profile(
        proxy=True, readers=1, nat_gateways=2, vpc_endpoints=ALL_ENDPOINTS, endpoint_azs=2
    ),
}
DEFAULT_PROFILE = "standard"
