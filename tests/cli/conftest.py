"""The command line against a served API over the suite's parametrised `ledger` (PostgreSQL
and SQLite, from tests/conftest.py): what the command line asks of the ledger (a label
selector, a prune) on both backends. Commands whose meaning does not depend on the backend
are tested in tests/unit, on SQLite."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cronledger.api import create_app
from cronledger.ledger import Ledger
from tests.api.helpers import SETTINGS, Scheduler
from tests.api.http import serving
from tests.unit.test_operator_cli import Cli, Served


@pytest.fixture
def cli(
    ledger: Ledger, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> Iterator[Cli]:
    """The command line against an API over the parametrised `ledger` (both backends)."""
    for name in ("COLUMNS", "NO_COLOR", "FORCE_COLOR", "CRONLEDGER_API_URL"):
        monkeypatch.delenv(name, raising=False)
    served = Served()
    with serving(create_app(ledger, SETTINGS), served) as url:
        yield Cli(url, ledger, Scheduler(ledger), capsys, served)
