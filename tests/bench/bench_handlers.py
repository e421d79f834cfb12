"""Cold-start benchmark: how long each handler module takes to import in a fresh interpreter,
which is most of what a Lambda cold start costs before the first invocation.

`python -X importtime -c "import cronledger.aws.<name>"`, the module's cumulative time, in the
environment Lambda imports it in (tests/aws/stack.py: tracing on, so Powertools' Tracer loads
the X-Ray SDK and patches as it does on Lambda; no credentials; no settings read). One warm-up
process fills the bytecode caches, then the median of `RUNS` fresh processes is reported
(target 600 ms for `api` on this machine), with the three heaviest direct imports of `api`.
A handler module that does not exist yet is reported as missing.
"""

from __future__ import annotations

import re
import statistics
import subprocess
import sys
from dataclasses import dataclass

from tests.aws.stack import handler_modules, lambda_import_environment

IMPORT_TARGET_MS = {"api": 600.0}
RUNS = 5
_LINE = re.compile(r"^import time:\s*(\d+)\s*\|\s*(\d+)\s*\|(\s*)(\S+)\s*$")


@dataclass(frozen=True)
class ImportTime:
    total_ms: float
    heaviest: list[tuple[str, float]]


def main() -> None:
    for name, module in handler_modules().items():
        measured = import_time(module)
        if measured is None:
            print(f"import {module}: missing", flush=True)
            continue
        target = IMPORT_TARGET_MS.get(name)
        note = ""
        if target is not None:
            verdict = "ok" if measured.total_ms <= target else "OVER"
            heaviest = ", ".join(f"{m} {ms:.0f}" for m, ms in measured.heaviest)
            note = f" (target {target:.0f} ms: {verdict}; heaviest: {heaviest})"
        print(f"import {module}: {measured.total_ms:.0f} ms{note}", flush=True)


def import_time(module: str) -> ImportTime | None:
    """Median cumulative `-X importtime` of `module` over fresh interpreters; None if absent."""
    if _run(module) is None:  # warm-up: compile bytecode once, outside the measurement
        return None
    samples = [sample for _ in range(RUNS) if (sample := _run(module)) is not None]
    middle = sorted(samples, key=lambda s: s.total_ms)[len(samples) // 2]
    return ImportTime(statistics.median(s.total_ms for s in samples), middle.heaviest)


def _run(module: str) -> ImportTime | None:
    run = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", f"import {module}"],
        env=lambda_import_environment(),
        capture_output=True,
        text=True,
        check=False,
    )
    if run.returncode != 0:
        return None
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
    return ImportTime(total / 1000, children[:3])


if __name__ == "__main__":
    main()
