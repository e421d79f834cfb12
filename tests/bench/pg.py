"""PostgreSQL for the benchmarks: a scratch database per measurement, and pgbench's TPC-B
as the yardstick a figure is divided by, so a ratio means the same on any machine.

The server: CRONLEDGER_BENCH_PG_URL, else CRONLEDGER_TEST_PG_URL, else postgres@127.0.0.1:5432.
"""

from __future__ import annotations

import os
import re
import subprocess
from contextlib import AbstractContextManager

import sqlalchemy as sa

from tests.pg import scratch_database as shared_scratch_database

SERVER_URL = os.environ.get(
    "CRONLEDGER_BENCH_PG_URL",
    os.environ.get(
        "CRONLEDGER_TEST_PG_URL", "postgresql+pg8000://postgres@127.0.0.1:5432/postgres"
    ),
)
PGBENCH_SCALE = 10
PGBENCH_CLIENTS = 4


def scratch_database(purpose: str) -> AbstractContextManager[str]:
    """A fresh, empty database on the bench server (its URL), dropped afterwards."""
    return shared_scratch_database(SERVER_URL, f"bench_{purpose}")


def pgbench(url: str, secs: int, clients: int = PGBENCH_CLIENTS) -> float:
    """TPC-B tps of `clients` clients for `secs` seconds on the database at `url`, initialised
    here at scale `PGBENCH_SCALE`."""
    pgbench_init(url)
    return pgbench_run(url, secs, clients)


def pgbench_init(url: str) -> None:
    """Create pgbench's tables at scale `PGBENCH_SCALE` in the database at `url`."""
    args, env, database = _pgbench_target(url)
    subprocess.run(
        ["pgbench", "-i", "-q", "-s", str(PGBENCH_SCALE), *args, database],
        check=True,
        env=env,
        capture_output=True,
    )


def pgbench_run(url: str, secs: int, clients: int = PGBENCH_CLIENTS) -> float:
    """TPC-B tps on a database `pgbench_init` prepared."""
    args, env, database = _pgbench_target(url)
    run = subprocess.run(
        ["pgbench", "-c", str(clients), "-j", "2", "-T", str(secs), *args, database],
        check=True,
        env=env,
        capture_output=True,
        text=True,
    )
    match = re.search(r"tps = ([\d.]+)", run.stdout)
    if match is None:
        raise RuntimeError(f"no tps in pgbench output:\n{run.stdout}\n{run.stderr}")
    return float(match.group(1))


def _pgbench_target(url: str) -> tuple[list[str], dict[str, str], str]:
    target = sa.make_url(url)
    args = ["-h", target.host or "127.0.0.1", "-p", str(target.port or 5432)]
    args += ["-U", target.username or "postgres"]
    env = {**os.environ, **({"PGPASSWORD": target.password} if target.password else {})}
    return args, env, target.database or ""
