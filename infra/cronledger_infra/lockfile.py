"""The lock file the code asset is installed from: every distribution the functions ship, at
one version, with the hashes of its files.

`requirements-lambda.txt` is what `pyproject.toml`'s dependencies resolve to on the Lambda
runtime (arm64, CPython 3.13), not on the machine that runs `make lock`: uv resolves for that
platform and lists, for each pinned version, the hash of every file PyPI has for it, so the
aarch64 wheel pip installs into the asset is among them. Bundling installs exactly these pins
(`--require-hashes --no-deps`): two machines building the asset ship the same bytes or fail,
and an edit to `pyproject.toml` cannot reach the asset without a new lock.

The lock's first line records a digest of the dependencies it was made from (`requires-python`
and `[project].dependencies`); `stale_reasons` compares it with `pyproject.toml` now, and also
checks that every direct dependency's pin satisfies its specifier, so a hand edit shows too.
The development environment (`make install`) is not locked: it is resolved on the developer's
own platform, with the dev extras.

    make lock     # after changing [project].dependencies; needs PyPI
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

LOCK_FILE = "requirements-lambda.txt"
#: The Lambda runtime the asset is for (bundling.py installs wheels for the same tags).
UV_PLATFORM = ("--python-platform", "aarch64-manylinux_2_28", "--python-version", "3.13")
_DIGEST_LINE = "# cronledger: pyproject.toml dependencies sha256 "
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)", re.MULTILINE)


def dependencies_digest(pyproject: Path) -> str:
    """A digest of what the asset's resolution depends on in `pyproject.toml`."""
    project = tomllib.loads(pyproject.read_text())["project"]
    basis = {
        "requires-python": project.get("requires-python"),
        "dependencies": project.get("dependencies", []),
    }
    return hashlib.sha256(json.dumps(basis, sort_keys=True).encode()).hexdigest()


def pins(lock: Path) -> dict[str, str]:
    """Canonical distribution name → pinned version."""
    return {canonicalize_name(name): version for name, version in _PIN.findall(lock.read_text())}


def stale_reasons(project_root: Path) -> list[str]:
    """Why the lock no longer matches `pyproject.toml` (empty when it does)."""
    pyproject, lock = project_root / "pyproject.toml", project_root / LOCK_FILE
    if not lock.is_file():
        return [f"{LOCK_FILE} is missing"]
    reasons = []
    recorded = next(
        (
            line.removeprefix(_DIGEST_LINE).strip()
            for line in lock.read_text().splitlines()
            if line.startswith(_DIGEST_LINE)
        ),
        None,
    )
    if recorded != dependencies_digest(pyproject):
        reasons.append(f"{LOCK_FILE} was not made from pyproject.toml's current dependencies")
    pinned = pins(lock)
    dependencies = tomllib.loads(pyproject.read_text())["project"].get("dependencies", [])
    for text in dependencies:
        requirement = Requirement(text)
        version = pinned.get(canonicalize_name(requirement.name))
        if version is None:
            reasons.append(f"{requirement.name} is not pinned")
        elif not requirement.specifier.contains(version, prereleases=True):
            reasons.append(f"{requirement.name}=={version} does not satisfy {text!r}")
    return reasons


def write_lock(project_root: Path) -> Path:
    """Resolve `pyproject.toml` for the Lambda runtime with uv and write the lock."""
    from uv import find_uv_bin

    resolved = subprocess.run(
        [
            find_uv_bin(),
            "pip",
            "compile",
            "pyproject.toml",
            *UV_PLATFORM,
            "--generate-hashes",
            "--no-header",
            "--quiet",
        ],
        cwd=project_root,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    lock = project_root / LOCK_FILE
    lock.write_text(
        f"{_DIGEST_LINE}{dependencies_digest(project_root / 'pyproject.toml')}\n"
        "# The code asset's dependencies for arm64 CPython 3.13, with hashes: `make lock`\n"
        "# writes this file (infra/cronledger_infra/lockfile.py); do not edit it by hand.\n"
        f"{resolved}"
    )
    return lock


if __name__ == "__main__":
    root = Path(__file__).resolve().parents[2]
    written = write_lock(root)
    print(f"wrote {written.relative_to(root)}: {len(pins(written))} distributions", file=sys.stderr)
