"""What the code asset drops (infra/cronledger_infra/bundling.py) is never needed: every
function runs, against this run's PostgreSQL, in a process where those modules cannot be
imported. The asset itself is arm64 and cannot run here; this is the same code, with the
same holes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from cronledger.ledger import Ledger
from cronledger_infra.bundling import dropped_modules
from tests.ledger.helpers import empty_tables

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def exercise(
    ledger: Ledger, database_url: str, dropped: list[str]
) -> subprocess.CompletedProcess[str]:
    empty_tables(ledger)  # the script claims whatever is due: only its own occurrence may be
    return subprocess.run(
        [sys.executable, "-m", "tests.infra.exercise_functions", database_url, *dropped],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_every_function_runs_without_what_the_asset_drops(
    pg_ledger: Ledger, pg_database_url: str
) -> None:
    dropped = dropped_modules()
    assert {"sqlalchemy.orm", "yaml"} <= set(dropped)

    run = exercise(pg_ledger, pg_database_url, dropped)

    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.rstrip().endswith("every function ran")


def test_a_dropped_module_a_function_needs_would_be_caught(
    pg_ledger: Ledger, pg_database_url: str
) -> None:
    run = exercise(pg_ledger, pg_database_url, ["sqlalchemy.dialects.postgresql"])

    assert run.returncode != 0
    assert "sqlalchemy.dialects.postgresql is not in the code asset" in run.stderr
