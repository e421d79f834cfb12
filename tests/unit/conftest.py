"""Fixtures of the unit tier: pure and fake-backed tests, SQLite at most, never PostgreSQL."""

from __future__ import annotations

import pytest


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fake credentials and a region, for clients that moto answers."""
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)


@pytest.fixture(scope="session")
def pg_database_url() -> str:
    """The unit tier runs without PostgreSQL (`make unit`), so a test here that asks for it
    fails, naming where it belongs, instead of quietly needing a server."""
    pytest.fail(
        "tests/unit runs without PostgreSQL; a test on both backends belongs in tests/ledger, "
        "tests/api, tests/cli or tests/e2e"
    )
