"""Entry point for `cdk synth|deploy` (cdk.json) and `make synth` (writes `cdk.out/`)."""

import os

from cronledger_infra.application import build_app
from cronledger_infra.stack import PROJECT_ROOT

if __name__ == "__main__":
    # The CDK CLI says where to write; run directly, write where the CLI would.
    outdir = None if os.environ.get("CDK_OUTDIR") else str(PROJECT_ROOT / "cdk.out")
    build_app(outdir=outdir).synth()
