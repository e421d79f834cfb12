"""Deployment-size benchmark: the Lambda code asset as `make synth` builds it.

Built with the same recipe as the CDK stack (infra/cronledger_infra/bundling.py) into a scratch
directory; the figure is its unzipped size in MiB, the unit of Lambda's own 250 MB limit
(target 25). How long each handler module takes to import is bench_handlers.py.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(PROJECT_ROOT / "infra"))

from cronledger_infra.bundling import build_into  # noqa: E402

ASSET_TARGET_MIB = 25.0


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="cronledger-asset-") as scratch:
        asset = Path(scratch)
        build_into(asset, PROJECT_ROOT)
        size = sum(p.stat().st_size for p in asset.rglob("*") if p.is_file())
        bytecode = sum(p.stat().st_size for p in asset.rglob("*.pyc"))
    mib = size / 2**20
    verdict = "ok" if mib <= ASSET_TARGET_MIB else "OVER"
    print(
        f"code asset, unzipped: {mib:.1f} MiB, {size:,} bytes, of which bytecode "
        f"{bytecode / 2**20:.1f} MiB (target {ASSET_TARGET_MIB:.0f} MiB: {verdict}; without "
        f"the bytecode {(size - bytecode) / 2**20:.1f} MiB)",
        flush=True,
    )


if __name__ == "__main__":
    main()
