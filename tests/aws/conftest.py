"""Handler fixtures: a container of the functions on this run's PostgreSQL, AWS through moto.

Lambda reads Powertools' variables when it imports a handler module, before any invocation,
so they are set here, before the test modules import the handlers; they are the values the
stack gives its functions. Everything else a container reads at its first invocation, so each
test sets its own environment and starts from a forgotten (cold) container.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from moto import mock_aws

SERVICE = "cronledger"
NAMESPACE = "Cronledger"
os.environ.setdefault("POWERTOOLS_SERVICE_NAME", SERVICE)
os.environ.setdefault("POWERTOOLS_METRICS_NAMESPACE", NAMESPACE)

from cronledger.ledger import Ledger  # noqa: E402
from tests.aws import targets  # noqa: E402
from tests.aws.invocations import REGION, forget_container  # noqa: E402
from tests.ledger.helpers import empty_tables  # noqa: E402


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Fake credentials and a region, and every AWS API answered by moto."""
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": REGION,
        "AWS_REGION": REGION,
    }.items():
        monkeypatch.setenv(name, value)
    config: Any = {"lambda": {"use_docker": False}}
    with mock_aws(config=config):
        yield


@pytest.fixture
def function_env(monkeypatch: pytest.MonkeyPatch, pg_database_url: str) -> None:
    """The scheduler settings of a function pointed at this run's database, with loops fast
    enough for a test."""
    monkeypatch.setenv("CRONLEDGER_DATABASE_URL", pg_database_url)
    monkeypatch.setenv("CRONLEDGER_POLL_INTERVAL_MS", "100")
    monkeypatch.setenv("CRONLEDGER_PYTHON_TARGETS", "tests")
    monkeypatch.delenv("_X_AMZN_TRACE_ID", raising=False)


@pytest.fixture
def container(aws: None, function_env: None, pg_ledger: Ledger) -> Iterator[Ledger]:
    """A cold container on an empty ledger; yields the ledger, to seed and to read back."""
    empty_tables(pg_ledger)
    targets.received.clear()
    forget_container()
    yield pg_ledger
    forget_container()
