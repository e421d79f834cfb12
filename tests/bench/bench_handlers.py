"""Cold-start benchmark: how long each handler module takes to import from the built code
asset, which is most of what a Lambda cold start costs before the first invocation, and what
that first invocation then builds before its first statement.

The asset is built with the stack's recipe (infra/cronledger_infra/bundling.py: pip, trim,
bytecode compiled by the runtime's CPython) for this machine's CPU instead of arm64, since an
arm64 native module cannot load here; everything else is the shipped bytes. Each import runs
in a fresh interpreter of the runtime's Python version (`bytecode_python`) as Lambda runs it:
`-B` (nothing written: /var/task is read-only), no site-packages, the asset first on the path
and then the AWS SDK the runtime provides (copied from this environment and compiled like
the asset), and the environment of tests/aws/stack.py (tracing on, no credentials, no
settings read), after the modules Lambda's runtime client has imported before it imports the
handler (awslambdaric's bootstrap: json, logging, decimal, concurrent.futures, …).
`python -X importtime`'s cumulative time of the handler module, the median of
`RUNS` processes, against a target of 600 ms for every handler, with the three heaviest
direct imports and the CPU time of the import (what it costs when it waits for no other
process: this machine's load average is printed beside it).

A handler that leaves work to its first invocation has not made its cold start shorter, so
the same process then does what a first invocation does before its first statement, with the
stack's environment and credentials: it builds what the handler module keeps per container
(`runtime.per_container`: the engine, the claim function's Lambda client, the API's resolver,
…) and opens a connection, which signs an IAM token and is refused (nothing listens on the
port). That is printed as the first invocation's setup; a target's own client (an executor
running a Lambda target loads botocore's clients) comes on top. Then the import again without
the asset's bytecode, for comparison.
"""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tests.aws.stack import handler_modules, lambda_import_environment

PROJECT_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(PROJECT_ROOT / "infra"))

from cronledger_infra.bundling import (  # noqa: E402
    RUNTIME_PROVIDED,
    build_into,
    bytecode_python,
    compile_bytecode,
)

IMPORT_TARGET_MS = 600.0
RUNS = 5
_LINE = re.compile(r"^import time:\s*(\d+)\s*\|\s*(\d+)\s*\|(\s*)(\S+)\s*$")
#: Run in each fresh interpreter: import the handler module, then, with the stack's
#: environment in place of the import's, do what its first invocation does before a statement.
COLD_START = """
import json, os, sys, time
import concurrent.futures, decimal, importlib, logging, traceback  # Lambda's runtime client's
module_name, environment = sys.argv[1], json.loads(sys.argv[2])
cpu = time.process_time()
module = __import__(module_name, fromlist=["handler"])
import_cpu = time.process_time() - cpu
for name in [n for n in os.environ if n.startswith("CRONLEDGER_")]:
    del os.environ[name]
os.environ.update(environment)
wall, cpu = time.perf_counter(), time.process_time()
from cronledger.aws import runtime
for name, value in vars(module).items():
    # what the handler keeps per container (`runtime.per_container` wraps its factory)
    if name != "handler" and getattr(value, "__module__", None) == module_name and hasattr(
        value, "__wrapped__"
    ):
        value()
try:
    runtime.ledger().engine.connect()
except Exception:
    pass  # signed a token, then refused: nothing listens on the port
print(json.dumps({
    "import_cpu": import_cpu,
    "setup": time.perf_counter() - wall,
    "setup_cpu": time.process_time() - cpu,
}))
"""


@dataclass(frozen=True)
class ImportTime:
    total_ms: float
    heaviest: list[tuple[str, float]]
    cpu_ms: float = 0.0
    setup_ms: float = 0.0
    setup_cpu_ms: float = 0.0


def main() -> None:
    python = bytecode_python()
    machine = platform.machine()
    with tempfile.TemporaryDirectory(prefix="cronledger-cold-") as scratch:
        asset, runtime = Path(scratch, "task"), Path(scratch, "runtime")
        build_into(asset, PROJECT_ROOT, (f"manylinux2014_{machine}", f"manylinux_2_28_{machine}"))
        provide_runtime_sdk(runtime)
        path = f"{asset}{os.pathsep}{runtime}"
        invocation = first_invocation_environment()
        with_bytecode = {
            name: import_time(python, path, m, invocation) for name, m in handler_modules().items()
        }
        for cache in list(asset.rglob("__pycache__")):
            shutil.rmtree(cache)
        without = {
            name: import_time(python, path, m, invocation) for name, m in handler_modules().items()
        }
    load = os.getloadavg()[0]
    print(
        f"cold starts from the built asset ({machine} build, {python}, load average "
        f"{load:.1f} on {os.cpu_count()} CPUs):",
        flush=True,
    )
    for name, module in handler_modules().items():
        measured, bare = with_bytecode[name], without[name]
        verdict = "ok" if measured.total_ms <= IMPORT_TARGET_MS else "OVER"
        heaviest = ", ".join(f"{m} {ms:.0f}" for m, ms in measured.heaviest)
        print(
            f"import {module}: {measured.total_ms:.0f} ms, {measured.cpu_ms:.0f} ms CPU (target "
            f"{IMPORT_TARGET_MS:.0f} ms: {verdict}; heaviest: {heaviest}); then the first "
            f"invocation's setup {measured.setup_ms:.0f} ms, {measured.setup_cpu_ms:.0f} ms CPU; "
            f"import without bytecode {bare.total_ms:.0f} ms, {bare.cpu_ms:.0f} ms CPU",
            flush=True,
        )


def first_invocation_environment() -> dict[str, str]:
    """What the stack and Lambda give a function by its first invocation (beside the import's
    environment): the database through a proxy with IAM authentication, on a local port where
    nothing listens; the executor's and claim's names; the role's credentials."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # free now, and nothing will listen on it
    return {
        "CRONLEDGER_DB_HOST": "127.0.0.1",
        "CRONLEDGER_DB_PORT": str(port),
        "CRONLEDGER_DB_NAME": "cronledger",
        "CRONLEDGER_DB_USER": "cronledger",
        "CRONLEDGER_DB_IAM_AUTH": "true",
        "CRONLEDGER_EXECUTE_FUNCTION_NAME": "cronledger-execute",
        "CRONLEDGER_CLAIM_FUNCTION_NAME": "cronledger-claim",
        "AWS_ACCESS_KEY_ID": "ASIAEXAMPLEEXAMPLE",
        "AWS_SECRET_ACCESS_KEY": "example",
        "AWS_SESSION_TOKEN": "example",
        "AWS_DEFAULT_REGION": lambda_import_environment()["AWS_REGION"],
    }


def provide_runtime_sdk(target: Path) -> None:
    """The AWS SDK distributions the Lambda runtime provides, copied from this environment
    and compiled for the runtime's Python (Lambda ships its SDK compiled)."""
    target.mkdir()
    for distribution in RUNTIME_PROVIDED:
        name = {"python_dateutil": "dateutil"}.get(distribution, distribution)
        spec = importlib.util.find_spec(name)
        assert spec is not None and spec.origin is not None, name
        origin = Path(spec.origin)
        if origin.name == "__init__.py":
            shutil.copytree(origin.parent, target / name, ignore=shutil.ignore_patterns("*.pyc"))
        else:
            shutil.copy2(origin, target / origin.name)
    compile_bytecode(target)


def import_time(python: str, path: str, module: str, invocation: dict[str, str]) -> ImportTime:
    """Median cumulative `-X importtime` of `module` over fresh interpreters, and the median
    first-invocation setup after it."""
    samples = [_run(python, path, module, invocation) for _ in range(RUNS)]
    middle = sorted(samples, key=lambda s: s.total_ms)[len(samples) // 2]
    return ImportTime(
        statistics.median(s.total_ms for s in samples),
        middle.heaviest,
        statistics.median(s.cpu_ms for s in samples),
        statistics.median(s.setup_ms for s in samples),
        statistics.median(s.setup_cpu_ms for s in samples),
    )


def _run(python: str, path: str, module: str, invocation: dict[str, str]) -> ImportTime:
    run = subprocess.run(
        [python, "-B", "-S", "-X", "importtime", "-c", COLD_START, module, json.dumps(invocation)],
        env={**lambda_import_environment(), "PYTHONPATH": path},
        capture_output=True,
        text=True,
        check=False,
    )
    if run.returncode != 0:
        raise RuntimeError(f"import {module} failed from the asset:\n{run.stderr[-2000:]}")
    cold = json.loads(run.stdout.splitlines()[-1])
    # (cumulative µs, indent, name) per line; a module's imports are printed before it, one
    # level deeper. The module's own line is its last occurrence.
    rows = [
        (int(m.group(2)), len(m.group(3)), m.group(4))
        for line in run.stderr.splitlines()
        if (m := _LINE.match(line))
    ]
    at = max(i for i, (_, _, name) in enumerate(rows) if name == module)
    total, indent, _ = rows[at]
    children: list[tuple[str, float]] = []
    for micros, depth, name in reversed(rows[:at]):
        if depth <= indent:
            break
        if depth == indent + 2:
            children.append((name, micros / 1000))
    children.sort(key=lambda item: -item[1])
    return ImportTime(
        total / 1000,
        children[:3],
        1000 * cold["import_cpu"],
        1000 * cold["setup"],
        1000 * cold["setup_cpu"],
    )


if __name__ == "__main__":
    main()
