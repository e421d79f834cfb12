"""How many of each function may run at once, and the database connections that can take: one sum.

Reserved concurrency both guarantees and caps a function's concurrent containers, so neither an
executor fan-out nor another workload in the account can throttle the ticks:
- `reconcile` and `claim`: 2 ticks each, one tick's invocation may still be finishing as the
  next one starts; `reconcile` times `reconcile_shards` (4), since a tick with more due than
  one shard takes starts the others as invocations of its own, each with its connections;
- `api`: `api_concurrency` (10), well above what the stage's throttle lets through at once;
- `execute`: `max_in_flight`. Claim never has more attempts claimed or running than that, and
  every executor invocation carries at least one of them, so more executors would have no
  work; the cap makes Lambda hold an excess invocation back (retrying it within its event age)
  instead of opening connections the database cannot take;
- `migrate`: not reserved (once per deploy), counted as one.

Every container holds at most `CONNECTIONS_PER_CONTAINER` database connections (its pool and
overflow, `cronledger.aws.database.PROXY_POOL`; a test keeps the two equal). So an installation
opens at most

    connections = CONNECTIONS_PER_CONTAINER * (max_in_flight + reconcile + claim + api + migrate)

and that must fit in the database's `max_connections` less `DATABASE_HEADROOM` (PostgreSQL's
superuser slots, the password rotation, an operator's session): the props refuse a deployment
where it does not. `max_connections` is Aurora's own default for the cluster's maximum capacity
(about 189 per ACU, capped at 2,000 when the minimum is 0.5 ACU or less, else 5,000) unless the
operator states it (`database_max_connections`). Through RDS Proxy the functions' connections
are the proxy's clients, which it multiplexes onto fewer; the bound still holds, so even
sessions the proxy has to pin fit. Lambda keeps 100 of the account's concurrency unreserved, so
the account's limit must exceed the reserved total by 100; an account below that (a new one
has 10) deploys with `reserve_concurrency=false`, and then only claim's `max_in_flight`
bounds the executors.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: Pool size plus overflow of every function's engine (`PROXY_POOL` in the functions' code).
CONNECTIONS_PER_CONTAINER = 3
#: Connections kept free of the functions: superuser slots, the rotation, an operator.
DATABASE_HEADROOM = 10
#: Aurora PostgreSQL Serverless v2's `max_connections` per ACU of maximum capacity (the
#: 0.5-1 ACU figure; larger instances get slightly more per ACU, so this errs low).
CONNECTIONS_PER_ACU = 189
#: `CRONLEDGER_MAX_IN_FLIGHT`'s default (`cronledger.settings`; a test keeps the two equal).
DEFAULT_MAX_IN_FLIGHT = 200
#: Invocations of `migrate` at once: the deploy's trigger, one at a time.
MIGRATE_CONTAINERS = 1


def aurora_max_connections(min_capacity_acu: float, max_capacity_acu: float) -> int:
    """Aurora Serverless v2's default `max_connections` for a capacity range, erring low."""
    cap = 2000 if min_capacity_acu <= 0.5 else 5000
    return min(cap, math.floor(CONNECTIONS_PER_ACU * max(max_capacity_acu, 1.0)))


@dataclass(frozen=True)
class ConnectionBudget:
    #: function name → its concurrent containers at most (`execute`: max_in_flight)
    concurrency: dict[str, int]
    database_max_connections: int

    @property
    def containers(self) -> int:
        """Containers that may hold connections at once, every function counted."""
        return sum(self.concurrency.values()) + MIGRATE_CONTAINERS

    @property
    def connections(self) -> int:
        return CONNECTIONS_PER_CONTAINER * self.containers

    @property
    def available(self) -> int:
        return self.database_max_connections - DATABASE_HEADROOM

    def problem(self) -> str | None:
        if self.connections <= self.available:
            return None
        terms = " + ".join(
            [
                f"{'max_in_flight' if name == 'execute' else name} {n}"
                for name, n in self.concurrency.items()
            ]
            + [f"migrate {MIGRATE_CONTAINERS}"]
        )
        return (
            f"the functions may open {CONNECTIONS_PER_CONTAINER} * ({terms}) = "
            f"{self.connections} database connections, more than the "
            f"{self.database_max_connections} max_connections less {DATABASE_HEADROOM} kept "
            "free: lower max_in_flight or the reserved concurrency, raise max_capacity_acu, "
            "or state database_max_connections"
        )
