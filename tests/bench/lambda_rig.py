"""What the AWS benchmarks share: the real handlers run in this process as a Lambda container
would run them (Powertools' variables, the stack's settings, a fresh container per case), the
Lambda API they call is a loopback one with injected latency (`AWS_ENDPOINT_URL_LAMBDA`), and
the ledger is a scratch PostgreSQL database.

Powertools reads its variables when `cronledger.aws` is first imported, so importing this
module sets them, and the benchmarks import the handlers only after it."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stdout
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import sqlalchemy as sa

from cronledger.ledger import Ledger, NewOccurrence
from cronledger.ledger.tables import metadata

EXECUTOR = "cronledger-execute"
CLAIM = "cronledger-claim"
RECONCILE = "cronledger-reconcile"
POWERTOOLS = {
    "POWERTOOLS_SERVICE_NAME": "cronledger",
    "POWERTOOLS_METRICS_NAMESPACE": "Cronledger",
    "POWERTOOLS_LOG_LEVEL": "WARNING",
    "POWERTOOLS_TRACE_DISABLED": "true",
    "POWERTOOLS_METRICS_DISABLED": "true",
}
os.environ.update(POWERTOOLS)


@dataclass
class LoopbackLambda:
    url: str
    payloads: list[dict[str, Any]] = field(default_factory=list)

    @staticmethod
    def ids_of(payload: dict[str, Any]) -> list[str]:
        """The occurrence ids one executor invoke carried."""
        return [str(i) for i in payload.get("occurrence_ids", [payload.get("occurrence_id")])]


@contextmanager
def loopback_lambda(latency_secs: float) -> Iterator[LoopbackLambda]:
    """A Lambda API on 127.0.0.1 answering each Invoke with 202 after `latency_secs`; its
    payloads are filled in when the block ends."""
    server = subprocess.Popen(
        [sys.executable, "-m", "tests.bench.loopback_lambda", str(latency_secs)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert server.stdin is not None and server.stdout is not None
    loopback = LoopbackLambda(server.stdout.readline().strip())
    try:
        yield loopback
    finally:
        server.stdin.close()
        loopback.payloads = json.loads(server.stdout.read())
        server.wait(timeout=30)


def function_environment(database_url: str, lambda_url: str, **settings: Any) -> None:
    """The environment of a function of the stack, pointed at `database_url` and the loopback
    Lambda API, with these `CRONLEDGER_*` settings."""
    os.environ.update(
        {
            "AWS_ACCESS_KEY_ID": "bench",
            "AWS_SECRET_ACCESS_KEY": "bench",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_REGION": "us-east-1",
            "AWS_ENDPOINT_URL_LAMBDA": lambda_url,
            **POWERTOOLS,
            "CRONLEDGER_DATABASE_URL": database_url,
            "CRONLEDGER_EXECUTE_FUNCTION_NAME": EXECUTOR,
            **{f"CRONLEDGER_{k.upper()}": str(v) for k, v in settings.items()},
        }
    )


def empty(ledger: Ledger) -> None:
    with ledger.engine.begin() as conn:
        for table in reversed(metadata.sorted_tables):
            conn.execute(sa.delete(table))


def seed_due(ledger: Ledger, count: int, channels: int = 50) -> set[str]:
    """`count` occurrences that fell due in the last second (a midnight burst); their ids."""
    now = ledger.db_now()
    rows = [
        NewOccurrence(
            channel_id=f"ch-{n % channels}",
            channel_name="burst",
            channel_version=1,
            scheduled_for=now - timedelta(microseconds=1000 + n),
        )
        for n in range(count)
    ]
    ledger.occurrences.insert_occurrences(rows)
    with ledger.engine.begin() as conn:
        conn.execute(sa.text("ANALYZE cron_occurrences"))
    return {r.id for r in rows}


def claim_tick(remaining_ms: int = 60_000) -> int:
    """One EventBridge tick of the real claim handler; how many occurrences it dispatched."""
    from cronledger.aws import claim
    from tests.aws.invocations import FakeContext, scheduled_event

    with redirect_stdout(io.StringIO()):  # its EMF documents
        answer = claim.handler(
            scheduled_event("Cronledger-Claim"), FakeContext(CLAIM, remaining_ms)
        )
    return int(answer["dispatched"])


def reconcile_tick(remaining_ms: int = 60_000) -> dict[str, int]:
    """One EventBridge tick of the real reconcile handler; its totals."""
    from cronledger.aws import reconcile
    from tests.aws.invocations import FakeContext, scheduled_event

    with redirect_stdout(io.StringIO()):  # its EMF documents
        answer: dict[str, int] = reconcile.handler(
            scheduled_event("Cronledger-Reconcile"), FakeContext(RECONCILE, remaining_ms)
        )
    return answer
