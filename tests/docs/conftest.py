"""The docs site, built once for the tests that read it; and the examples' tally printed at the
end of the run, whichever worker ran them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs.examples import ROOT

TALLY = "docs examples"
#: The CDK props page's test reads the props' declaration.
if str(ROOT / "infra") not in sys.path:
    sys.path.insert(0, str(ROOT / "infra"))


@pytest.fixture(scope="session")
def built_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`mkdocs build --strict` into a scratch directory: a warning (a broken link, a missing
    page, a reference page that cannot be generated) fails it."""
    site = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [str(Path(sys.executable).parent / "mkdocs"), "build", "--strict", "-d", str(site)],
        cwd=ROOT, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"}, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout
    return site


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for outcome in ("passed", "failed"):
        for report in terminalreporter.stats.get(outcome, []):
            for name, value in getattr(report, "user_properties", []):
                if name == TALLY:
                    terminalreporter.write_sep("-", TALLY)
                    terminalreporter.write_line(value)
