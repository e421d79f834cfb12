"""The code asset is built from the lock file (infra/cronledger_infra/lockfile.py): exactly its
pins, checked against its hashes, and never from a lock that no longer matches pyproject.toml.

The asset tests really run the bundling recipe (pip, for arm64 CPython 3.13, into a scratch
directory); pip's cache makes a second build quick.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name

from cronledger_infra.bundling import (
    RUNTIME_PROVIDED,
    UNUSED_DISTRIBUTIONS,
    asset_hash,
    build_into,
)
from cronledger_infra.lockfile import LOCK_FILE, pins, stale_reasons
from cronledger_infra.stack import PROJECT_ROOT

pytestmark = pytest.mark.xdist_group(name="asset")


def project_copy(root: Path) -> Path:
    """What bundling reads of the project, copied: pyproject.toml, the README, the lock and
    the package."""
    root.mkdir(parents=True, exist_ok=True)
    for name in ("pyproject.toml", "README.md", LOCK_FILE):
        shutil.copy2(PROJECT_ROOT / name, root / name)
    shutil.copytree(
        PROJECT_ROOT / "functions" / "cronledger",
        root / "functions" / "cronledger",
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
    )
    return root


def installed(asset: Path) -> dict[str, str]:
    """Canonical distribution name → version, from the asset's `*.dist-info` directories."""
    found = {}
    for dist_info in asset.glob("*.dist-info"):
        name, version = dist_info.name.removesuffix(".dist-info").rsplit("-", 1)
        found[canonicalize_name(name)] = version
    return found


def test_the_lock_file_matches_pyproject_toml() -> None:
    assert stale_reasons(PROJECT_ROOT) == [], "run `make lock` and commit requirements-lambda.txt"


def test_a_changed_dependency_makes_the_lock_stale(tmp_path: Path) -> None:
    root = project_copy(tmp_path)
    pyproject = root / "pyproject.toml"
    text = pyproject.read_text()
    pyproject.write_text(text.replace('"pg8000>=1.31.3"', '"pg8000>=1.32"', 1))

    reasons = stale_reasons(root)

    assert any("not made from pyproject.toml's current dependencies" in r for r in reasons)
    assert any(re.match(r"pg8000==1\.31\.\d+ does not satisfy", r) for r in reasons), reasons


def test_the_assets_name_follows_the_lock_file(tmp_path: Path) -> None:
    # Given a copy of the project, named as the project is
    root = project_copy(tmp_path)
    before = asset_hash(root)
    assert before == asset_hash(PROJECT_ROOT)

    # When one hash in its lock changes, then so does the asset's name
    lock = root / LOCK_FILE
    lock.write_text(lock.read_text().replace("sha256:", "sha256:0", 1))
    assert asset_hash(root) != before


def test_the_asset_holds_exactly_the_locked_versions(tmp_path: Path) -> None:
    asset = tmp_path / "asset"

    build_into(asset, PROJECT_ROOT)

    shipped = installed(asset)
    trimmed = {canonicalize_name(d) for d in (*RUNTIME_PROVIDED, *UNUSED_DISTRIBUTIONS)}
    locked = {name: v for name, v in pins(PROJECT_ROOT / LOCK_FILE).items() if name not in trimmed}
    assert shipped.pop("cronledger") == "0.1.0"
    assert shipped == locked
    assert (asset / "pg8000" / "core.py").is_file()


def test_a_wheel_whose_hash_the_lock_does_not_list_is_refused(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    # Given a lock whose hashes for one distribution are not those of its files
    root = project_copy(tmp_path / "project")
    lock = root / LOCK_FILE
    text = lock.read_text()
    start = text.index("\ncroniter==")
    end = text.index("\n", text.index("# via", start))
    entry = text[start:end]
    forged = re.sub(r"sha256:[0-9a-f]{64}", "sha256:" + "0" * 64, entry)
    lock.write_text(text.replace(entry, forged))
    assert stale_reasons(root) == []  # the pins and the digest still match

    # When the asset is built, then pip refuses it
    with pytest.raises(subprocess.CalledProcessError):
        build_into(tmp_path / "asset", root)
    assert "DO NOT MATCH THE HASHES" in capfd.readouterr().err
    assert not (tmp_path / "asset" / "croniter").exists()
