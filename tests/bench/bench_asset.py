"""Deployment-size benchmark: the Lambda code asset as `make synth` builds it.

Built with the same recipe as the CDK stack (infra/cronledger_infra/bundling.py) into a scratch
directory; the figures are its unzipped size in MiB, of which the bytecode, and the size of
the zip CDK uploads (deflated, as CDK zips an asset).

A figure, not a target. Lambda's one limit is 250 MB unzipped (the function and its layers),
which the asset is far below. What a cold start pays for is what a function imports
(bench_handlers.py measures it), not the bytes beside it: a module no function imports costs
only its share of the zip Lambda fetches and unpacks when it creates an execution environment.
So the recipe trims what no function imports and is sure never to
(`NEVER_IMPORTED`, `UNUSED_DISTRIBUTIONS`: tests/infra/test_bundling.py runs every function
without them), and keeps the bytecode, which makes the asset larger and every import shorter.
"""

from __future__ import annotations

import sys
import tempfile
import zipfile
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(PROJECT_ROOT / "infra"))

from cronledger_infra.bundling import build_into  # noqa: E402

#: Lambda's limit on a function's unzipped code, layers included.
LAMBDA_LIMIT_MB = 250


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="cronledger-asset-") as scratch:
        asset = Path(scratch, "asset")
        build_into(asset, PROJECT_ROOT)
        files = [p for p in asset.rglob("*") if p.is_file()]
        size = sum(p.stat().st_size for p in files)
        bytecode = sum(p.stat().st_size for p in files if p.suffix == ".pyc")
        archive = Path(scratch, "asset.zip")
        with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zipped:
            for path in files:
                zipped.write(path, path.relative_to(asset))
        zipped_size = archive.stat().st_size
    print(
        f"code asset: {size / 2**20:.1f} MiB unzipped ({size / 10**6 / LAMBDA_LIMIT_MB:.0%} of "
        f"Lambda's {LAMBDA_LIMIT_MB} MB limit), of which bytecode {bytecode / 2**20:.1f} MiB; "
        f"{zipped_size / 2**20:.1f} MiB zipped",
        flush=True,
    )


if __name__ == "__main__":
    main()
