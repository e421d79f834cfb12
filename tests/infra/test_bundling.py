"""What the code asset drops (infra/cronledger_infra/bundling.py) is never needed: every
function runs, against this run's PostgreSQL, in a process where those modules cannot be
imported. The asset itself is arm64 and cannot run here; this is the same code, with the
same holes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from cronledger.ledger import Ledger
from cronledger_infra import bundling
from cronledger_infra.bundling import (
    PYTHON_VERSION,
    TASK_ROOT,
    BundlingError,
    bytecode_python,
    compile_bytecode,
    dropped_modules,
)
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


def test_the_asset_ships_bytecode_the_runtime_uses_as_it_is(tmp_path: Path) -> None:
    # Given a package as the asset holds it
    package = tmp_path / "jobs"
    package.mkdir()
    (package / "__init__.py").write_text("def fail():\n    raise RuntimeError('x')\n")

    compile_bytecode(tmp_path)

    # Then its bytecode is for the runtime's CPython, hash-based and never checked against the
    # source (whose timestamps the zip does not keep), naming the file where Lambda unpacks it
    (compiled,) = (package / "__pycache__").iterdir()
    assert compiled.name == f"__init__.cpython-{PYTHON_VERSION.replace('.', '')}.pyc"
    header = compiled.read_bytes()[:16]
    assert int.from_bytes(header[4:8], "little") == 0b01  # hash-based, unchecked (PEP 552)
    probe = subprocess.run(
        [
            bytecode_python(),
            "-c",
            "import marshal, sys; c = marshal.loads(open(sys.argv[1], 'rb').read()[16:]); "
            "print(c.co_filename)",
            str(compiled),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert probe.stdout.strip() == f"{TASK_ROOT}/jobs/__init__.py"


def test_without_a_python_of_the_runtimes_version_the_synth_says_how_to_get_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(bundling, "_version_of", lambda python: "3.9")
    with pytest.raises(BundlingError, match="CRONLEDGER_BYTECODE_PYTHON"):
        bytecode_python()
