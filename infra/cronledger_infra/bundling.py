"""The functions' code asset, built on this machine with pip (no Docker), from the lock file.

The dependencies come from `requirements-lambda.txt` (see lockfile.py), exactly as pinned:
`pip install --require-hashes --no-deps -r requirements-lambda.txt --platform
manylinux2014_aarch64 --platform manylinux_2_28_aarch64 --implementation cp --python-version
3.13 --only-binary=:all: --target <asset>`: wheels only, for the Lambda runtime's CPython and CPU
whatever machine synthesizes, each checked against the lock's hashes, so no compiler is needed,
a package without an arm64 wheel fails the synth instead of the first invocation, and two
machines ship the same bytes. A lock that no longer matches `pyproject.toml` stops the synth
(`make lock`). Powertools is bundled with everything else, at the locked version (not AWS's
layer): one place decides every version. The `cronledger` package itself is installed after
them, without dependencies.

The project is staged in a temporary directory first, so pip's build leaves nothing in the
working tree. Then the asset loses what no function imports: the AWS SDK and its dependency
closure (the Lambda runtime ships them), what `NEVER_IMPORTED` and `UNUSED_DISTRIBUTIONS` list,
type stubs, host-Python bytecode, and the debug symbols of native modules (when an
`llvm-strip` or aarch64 `strip` is on PATH).

Then it gains the bytecode the runtime will use: every module compiled by a CPython of the
runtime's own version (`bytecode_python`: this interpreter if it is one, else
`CRONLEDGER_BYTECODE_PYTHON`, `python3.13` on PATH, or a pyenv 3.13), as `unchecked-hash`
`.pyc` files (PEP 552): the asset is read-only and its zip carries no meaningful source
timestamps, so the runtime uses them without comparing anything; without them every cold
start compiles each module again (`make bench` shows both). Tracebacks name `/var/task/...`,
where Lambda unpacks the asset. The asset hash is the project's source, pyproject.toml, the
lock file and this recipe, so an unchanged project is not rebuilt.

`make bench` builds the same asset for its own CPU to import it (`platforms`): the lock's
versions, without its hashes, which are those of Lambda's wheels.
"""

from __future__ import annotations

import glob
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import jsii
from aws_cdk import AssetHashType, BundlingOptions, ILocalBundling, aws_lambda as lambda_

from cronledger_infra.lockfile import LOCK_FILE, stale_reasons

RUNTIME = lambda_.Runtime.PYTHON_3_13
ARCHITECTURE = lambda_.Architecture.ARM_64

#: The runtime's CPython, "3.13": the wheels' tags and the bytecode follow it.
PYTHON_VERSION = RUNTIME.name.removeprefix("python")
#: Lambda's CPU, as manylinux platform tags.
LAMBDA_PLATFORMS = ("manylinux2014_aarch64", "manylinux_2_28_aarch64")
#: Where Lambda unpacks the asset: the path compiled modules name in tracebacks.
TASK_ROOT = "/var/task"
BYTECODE_PYTHON = "CRONLEDGER_BYTECODE_PYTHON"
# Distributions the Lambda Python runtime ships (boto3 and its dependency closure), less
# urllib3: the `http` target uses it directly and needs the locked version (>= 2.2), which
# the asset's copy, first on the path, also gives the runtime's botocore.
RUNTIME_PROVIDED = (
    "boto3",
    "botocore",
    "s3transfer",
    "jmespath",
    "python_dateutil",
    "six",
)
#: Distributions no function imports, by the top-level modules they install: the operator
#: command line's (PyYAML, Typer, Rich and what they bring).
UNUSED_DISTRIBUTIONS = {
    "pyyaml": ("yaml", "_yaml"),
    "typer": ("typer",),
    "shellingham": ("shellingham",),
    "annotated_doc": ("annotated_doc",),
    "rich": ("rich",),
    "markdown_it_py": ("markdown_it",),
    "mdurl": ("mdurl",),
    "pygments": ("pygments",),
}
#: Parts of installed packages no function imports: SQLAlchemy's ORM, asyncio layer and
#: other databases' dialects (the ledger is Core on PostgreSQL or SQLite), pydantic's v1
#: compatibility package, test harnesses and console scripts. tests/infra/test_bundling.py
#: runs every function with these unimportable.
NEVER_IMPORTED = (
    "bin",
    "sqlalchemy/testing",
    "alembic/testing",
    "sqlalchemy/orm",
    "sqlalchemy/ext/asyncio",
    "sqlalchemy/dialects/mysql",
    "sqlalchemy/dialects/mssql",
    "sqlalchemy/dialects/oracle",
    "pydantic/v1",
)
_STRIPPERS = ("llvm-strip", "aarch64-linux-gnu-strip")


def function_code(project_root: Path) -> lambda_.Code:
    """The asset every function runs: the `cronledger` package and its dependencies."""
    return lambda_.Code.from_asset(
        str(project_root / "functions"),
        asset_hash_type=AssetHashType.CUSTOM,
        asset_hash=asset_hash(project_root),
        bundling=BundlingOptions(
            image=RUNTIME.bundling_image,  # never pulled: local bundling succeeds or raises
            local=PipBundling(project_root),
        ),
    )


def source_only_code(project_root: Path) -> lambda_.Code:
    """The package source alone, without dependencies: for tests, whose template has the same
    shape in seconds instead of a pip install. Only Python code can ask for it
    (`build_app(code=…)`); no context value deploys it."""
    return lambda_.Code.from_asset(
        str(project_root / "functions"), exclude=["*.egg-info", "**/__pycache__", "**/*.pyc"]
    )


@jsii.implements(ILocalBundling)
class PipBundling:
    def __init__(self, project_root: Path) -> None:
        self.project_root = project_root

    def try_bundle(self, output_dir: str, _options: Any) -> bool:
        build_into(Path(output_dir), self.project_root)
        return True


class StaleLockFile(RuntimeError):
    """The lock file no longer matches pyproject.toml; the message says what to run."""


class BundlingError(RuntimeError):
    """The asset cannot be built on this machine; the message says what is missing."""


def pip_target(platforms: tuple[str, ...] = LAMBDA_PLATFORMS) -> list[str]:
    """pip's options for wheels of the runtime's CPython on `platforms`."""
    tags = [arg for platform in platforms for arg in ("--platform", platform)]
    return [
        *tags,
        "--implementation",
        "cp",
        "--python-version",
        PYTHON_VERSION,
        "--only-binary=:all:",
    ]


def build_into(
    target: Path, project_root: Path, platforms: tuple[str, ...] = LAMBDA_PLATFORMS
) -> None:
    """Install the locked dependencies and the project for the runtime's CPython on
    `platforms` (Lambda's, unless a benchmark asks for its own) into `target`, trimmed and
    compiled."""
    stale = stale_reasons(project_root)
    if stale:
        raise StaleLockFile(f"{'; '.join(stale)}: run `make lock`, then synthesize again")
    # -qq: pip's errors only (its warnings about the machine's own pip configuration, say an
    # index directory that is not there, would bury a benchmark's figures)
    pip = [sys.executable, "-m", "pip", "install", "-qq", "--no-compile"]
    pip += ["--disable-pip-version-check", "--target", str(target)]
    with tempfile.TemporaryDirectory(prefix="cronledger-stage-") as stage:
        staged = Path(stage)
        lock = project_root / LOCK_FILE
        if platforms == LAMBDA_PLATFORMS:
            locked = ["--require-hashes", "--no-deps", "-r", str(lock)]
        else:
            (staged / "pins.txt").write_text(_pins_of(lock.read_text()))
            locked = ["--no-deps", "-r", str(staged / "pins.txt")]
        subprocess.run([*pip, *pip_target(platforms), *locked], check=True)
        for name in ("pyproject.toml", "README.md"):
            shutil.copy2(project_root / name, staged / name)
        shutil.copytree(
            project_root / "functions" / "cronledger",
            staged / "functions" / "cronledger",
            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
        )
        # `--upgrade` lets its console script join `bin/` (which the asset drops anyway).
        subprocess.run([*pip, "--no-deps", "--upgrade", str(staged)], check=True)
    _trim(target)
    compile_bytecode(target)


def compile_bytecode(target: Path) -> None:
    """Compile every module under `target` for the runtime (see the module header)."""
    options = ["-q", "-j", "0", "--invalidation-mode", "unchecked-hash"]
    paths = ["-s", str(target), "-p", TASK_ROOT, str(target)]
    subprocess.run([bytecode_python(), "-m", "compileall", *options, *paths], check=True)


def bytecode_python() -> str:
    """An interpreter of the runtime's CPython version (see the module header)."""
    candidates = [
        os.environ.get(BYTECODE_PYTHON),
        sys.executable,
        shutil.which(f"python{PYTHON_VERSION}"),
        *sorted(glob.glob(os.path.expanduser(f"~/.pyenv/versions/{PYTHON_VERSION}*/bin/python3"))),
    ]
    for candidate in filter(None, candidates):
        if _version_of(candidate) == PYTHON_VERSION:
            return candidate
    raise BundlingError(
        f"the asset ships bytecode for the Lambda runtime's Python {PYTHON_VERSION}, and no "
        f"Python {PYTHON_VERSION} was found to compile it: install one (python{PYTHON_VERSION} "
        f"on PATH, or set {BYTECODE_PYTHON} to its path)"
    )


def _version_of(python: str) -> str | None:
    run = subprocess.run(
        [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        capture_output=True,
        text=True,
        check=False,
    )
    return run.stdout.strip() if run.returncode == 0 else None


def _pins_of(lock: str) -> str:
    """The lock's `name==version` lines without their hashes."""
    return "\n".join(line.split()[0] for line in lock.splitlines() if "==" in line) + "\n"


def dropped_modules() -> list[str]:
    """The dotted names of everything the asset drops that an import could ask for (the AWS
    SDK aside: the runtime has it)."""
    parts = [path.replace("/", ".") for path in NEVER_IMPORTED if path != "bin"]
    return parts + [name for names in UNUSED_DISTRIBUTIONS.values() for name in names]


def _trim(target: Path) -> None:
    for distribution in (*RUNTIME_PROVIDED, *UNUSED_DISTRIBUTIONS):
        for dist_info in target.glob(f"{distribution}-*.dist-info"):
            _uninstall(target, dist_info)
    for relative in NEVER_IMPORTED:
        shutil.rmtree(target / relative, ignore_errors=True)
    for cache in list(target.rglob("__pycache__")):
        shutil.rmtree(cache)
    for stub in target.rglob("*.pyi"):
        stub.unlink()
    stripper = next(filter(None, map(shutil.which, _STRIPPERS)), None)
    if stripper:
        for library in target.rglob("*.so"):
            subprocess.run([stripper, "--strip-unneeded", str(library)], check=True)
    for directory in sorted(target.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        if directory.is_dir() and not any(directory.iterdir()):
            directory.rmdir()  # left empty by the removals above


def _uninstall(target: Path, dist_info: Path) -> None:
    """Remove exactly the files a distribution's RECORD lists, then its metadata."""
    record = (dist_info / "RECORD").read_text().splitlines()
    for line in record:
        path = target / line.split(",", 1)[0]
        if path.is_file() and dist_info not in path.parents:
            path.unlink()
    shutil.rmtree(dist_info)


def asset_hash(project_root: Path) -> str:
    """What names the asset: everything it is built from (the package's source,
    pyproject.toml, the lock file and this recipe), so two machines with the same inputs
    ship one asset, and a changed pin or hash in the lock is a new one."""
    digest = hashlib.sha256()
    recipe = Path(__file__).read_bytes()
    files = sorted(
        path
        for path in (project_root / "functions" / "cronledger").rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    )
    for path in [project_root / "pyproject.toml", project_root / LOCK_FILE, *files]:
        relative = path.relative_to(project_root).as_posix().encode()
        content = path.read_bytes()
        digest.update(len(relative).to_bytes(4, "big") + relative)
        digest.update(len(content).to_bytes(8, "big") + content)
    digest.update(recipe)
    return digest.hexdigest()
