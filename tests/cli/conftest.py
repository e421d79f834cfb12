"""The command line against a served API over the suite's parametrised `ledger` (PostgreSQL
and SQLite, from tests/conftest.py): what the command line asks of the ledger (a label
selector, a prune) on both backends. Commands whose meaning does not depend on the backend
are tested in tests/unit, on SQLite."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cronledger.ledger import Ledger
from tests.unit.test_operator_cli import Cli, commands


@pytest.fixture
def cli(
    ledger: Ledger, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> Iterator[Cli]:
    with commands(ledger, capsys, monkeypatch) as commanded:
        yield commanded
