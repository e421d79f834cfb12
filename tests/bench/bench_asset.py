"""Deployment-size benchmark: the Lambda code asset as `make synth` builds it, and how long each
handler module takes to import in a fresh interpreter.

Asset: built with the same recipe as the CDK stack (infra/cronledger_infra/bundling.py) into a
scratch directory; the figure is its unzipped size in MiB, the unit of Lambda's own 250 MB limit
(target 25).
Import: `python -X importtime -c "import cronledger.aws.<name>"`, the module's cumulative time,
median of three fresh processes with warm bytecode caches (target 600 ms for `api`). A handler
module that does not exist yet is reported as missing.
"""

from __future__ import annotations

import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(PROJECT_ROOT / "infra"))

from cronledger_infra.bundling import build_into  # noqa: E402
from cronledger_infra.functions import HANDLERS  # noqa: E402

ASSET_TARGET_MIB = 25.0
IMPORT_TARGET_MS = {"api": 600.0}
RUNS = 3


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="cronledger-asset-") as scratch:
        asset = Path(scratch)
        build_into(asset, PROJECT_ROOT)
        size = sum(p.stat().st_size for p in asset.rglob("*") if p.is_file())
    mib = size / 2**20
    verdict = "ok" if mib <= ASSET_TARGET_MIB else "OVER"
    print(
        f"code asset, unzipped: {mib:.1f} MiB, {size:,} bytes "
        f"(target {ASSET_TARGET_MIB:.0f} MiB: {verdict})",
        flush=True,
    )
    for name, entry_point in HANDLERS.items():
        module = entry_point.rsplit(".", 1)[0]
        millis = import_time_ms(module)
        if millis is None:
            print(f"import {module}: missing", flush=True)
            continue
        target = IMPORT_TARGET_MS.get(name)
        note = (
            f" (target {target:.0f} ms: {'ok' if millis <= target else 'OVER'})" if target else ""
        )
        print(f"import {module}: {millis:.0f} ms{note}", flush=True)


def import_time_ms(module: str) -> float | None:
    """Median cumulative `-X importtime` of `module` over fresh interpreters; None if absent."""
    pattern = re.compile(rf"^import time:\s*\d+\s*\|\s*(\d+)\s*\|\s*{re.escape(module)}\s*$")
    samples = []
    for _ in range(RUNS):
        run = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", f"import {module}"],
            capture_output=True,
            text=True,
            check=False,
        )
        if run.returncode != 0:
            return None
        micros = [int(m.group(1)) for line in run.stderr.splitlines() if (m := pattern.match(line))]
        samples.append(micros[-1] / 1000)
    return statistics.median(samples)


if __name__ == "__main__":
    main()
