"""Every revision from the first one written after the linter was adopted passes squawk: its
PostgreSQL script (rendered offline, as `alembic upgrade rev1:rev2 --sql` would) builds indexes
concurrently, adds no column old code would fail to write, and bounds its waits."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest
from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory

from cronledger.ledger.migration import ALEMBIC_INI

ROOT = Path(__file__).resolve().parents[2]
SQUAWK = Path(sys.executable).with_name("squawk")
#: Revisions that had run on installed databases before the linter: they cannot be changed
#: any more (a database records that it ran them, never what they said), so their findings
#: would only be noise. Every later revision is linted.
SHIPPED_BEFORE_THE_LINTER = ("0001", "0002", "0003", "0004", "0005")


def revisions() -> list[tuple[str, str]]:
    """(previous, revision) for each revision, oldest first; `base` before the first."""
    script = ScriptDirectory.from_config(Config(str(ALEMBIC_INI)))
    walked = [(r.down_revision or "base", r.revision) for r in script.walk_revisions()]
    return list(reversed(walked))  # type: ignore[arg-type]


def script_of(previous: str, revision: str) -> str:
    buffer = io.StringIO()
    config = Config(str(ALEMBIC_INI), output_buffer=buffer)
    command.upgrade(config, f"{previous}:{revision}", sql=True)
    return buffer.getvalue()


LINTED = [pair for pair in revisions() if pair[1] not in SHIPPED_BEFORE_THE_LINTER]


def test_the_exempt_revisions_are_the_oldest_ones_and_every_later_one_is_linted() -> None:
    ordered = [revision for _, revision in revisions()]

    assert tuple(ordered[: len(SHIPPED_BEFORE_THE_LINTER)]) == SHIPPED_BEFORE_THE_LINTER
    assert [revision for _, revision in LINTED] == ordered[len(SHIPPED_BEFORE_THE_LINTER) :]
    assert LINTED, "the newest revision is linted"


@pytest.mark.parametrize(("previous", "revision"), LINTED, ids=[r for _, r in LINTED])
def test_the_revisions_postgresql_script_passes_squawk(
    previous: str, revision: str, tmp_path: Path
) -> None:
    script = tmp_path / f"{revision}.sql"
    script.write_text(script_of(previous, revision))

    linted = subprocess.run(
        [str(SQUAWK), "--config", str(ROOT / ".squawk.toml"), "--reporter", "gcc", str(script)],
        capture_output=True,
        text=True,
        check=False,
    )

    assert f"SET version_num='{revision}'" in script.read_text(), "the whole revision rendered"
    assert linted.returncode == 0, linted.stdout + linted.stderr


def test_a_blocking_index_build_is_what_squawk_refuses(tmp_path: Path) -> None:
    # The linter is not vacuous: the statement 0005 ran before online builds is refused.
    script = tmp_path / "blocking.sql"
    script.write_text(
        "SET lock_timeout = '5s';\nSET statement_timeout = 0;\n"
        "CREATE INDEX ix_blocking ON cron_occurrences (due_at);\n"
    )

    linted = subprocess.run(
        [str(SQUAWK), "--config", str(ROOT / ".squawk.toml"), "--reporter", "gcc", str(script)],
        capture_output=True,
        text=True,
        check=False,
    )

    assert linted.returncode != 0
    assert "require-concurrent-index-creation" in linted.stdout
