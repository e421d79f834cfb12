"""Entry point for `cdk synth|deploy` (cdk.json) and `make synth` (writes `cdk.out/`).

Run directly it takes context values as the CDK CLI does, `-c cronledger:profile=lean`
(`make synth PROFILE=lean`); the CLI passes its own through the environment.
"""

import argparse
import os

from cronledger_infra.application import build_app
from cronledger_infra.stack import PROJECT_ROOT

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Synthesize the cronledger stack.")
    parser.add_argument("-c", "--context", action="append", default=[], metavar="KEY=VALUE")
    context = dict(pair.split("=", 1) for pair in parser.parse_args().context)
    # The CDK CLI says where to write; run directly, write where the CLI would.
    outdir = None if os.environ.get("CDK_OUTDIR") else str(PROJECT_ROOT / "cdk.out")
    build_app(context, outdir=outdir).synth()
