"""What `make deploy` checks before CloudFormation starts: a deploy that cannot succeed is
refused in its first minute, with the fix in the message, instead of failing (or wedging) an
hour into a stack create.

- The tools: a Python of the Lambda runtime's version, which compiles the asset's bytecode
  (bundling.py), and Node.js 22 or newer, which the CDK CLI (`npx aws-cdk@2`) needs. Each one
  missing is named, with where it is looked for.
- The account: Lambda keeps 100 of an account's concurrency unreserved, so a function's
  reserved concurrency is refused unless the account's limit holds every reservation of the
  installation plus those 100 (capacity.py). The limit is asked of Lambda
  (`GetAccountSettings`, in the deploying credentials' region), never assumed: a new account's
  holds no reservation at all.

Run as `python -m cronledger_infra.preflight [-c cronledger:<field>=<value> ...]`, with the
same context values as the deploy, so the reservations it checks are the deploy's.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from typing import Any

from cronledger_infra.bundling import PYTHON_VERSION, BundlingError, bytecode_python
from cronledger_infra.props import CronledgerProps

#: What Lambda keeps of an account's concurrency for functions without a reservation.
UNRESERVED_MINIMUM = 100
#: The oldest Node.js major the CDK CLI supports.
NODE_MAJOR = 22


class PreflightRefused(Exception):
    """A deploy that would fail; the message says why and what to do."""


def missing_tools(
    python: Callable[[], str] = bytecode_python,
    node_version: Callable[[], str | None] = lambda: _output("node", "--version"),
) -> list[str]:
    """One sentence per tool a deploy needs and this machine lacks."""
    missing = []
    try:
        python()
    except BundlingError as exc:
        missing.append(f"Python {PYTHON_VERSION}: {exc}")
    version = node_version()
    found = re.match(r"v?(\d+)\.", version or "")
    if found is None or int(found.group(1)) < NODE_MAJOR:
        missing.append(
            f"Node.js {NODE_MAJOR} or newer (found {version or 'none on PATH'}): the CDK CLI "
            "runs on it; install a current LTS release"
        )
    return missing


def check_concurrency(props: CronledgerProps, lambda_client: Any) -> str:
    """Refuse when the account cannot hold the installation's reserved concurrency; else say
    what was checked."""
    reserved = props.reserved_concurrency()
    total = sum(reserved.values())
    if not total:
        return "no reserved concurrency (reserve_concurrency=false): nothing to check"
    limit = lambda_client.get_account_settings()["AccountLimit"]["ConcurrentExecutions"]
    needed = total + UNRESERVED_MINIMUM
    terms = " + ".join(f"{name} {n}" for name, n in reserved.items())
    if limit < needed:
        raise PreflightRefused(
            f"this account's Lambda concurrency limit is {limit}, and the installation "
            f"reserves {terms} = {total}, which Lambda grants only while {UNRESERVED_MINIMUM} "
            f"stay unreserved: {needed} are needed. Either request a quota increase (Service "
            "Quotas: AWS Lambda, 'Concurrent executions', to at least "
            f"{needed}) and deploy once it is granted, or lower the reserved concurrency "
            "(-c cronledger:max_in_flight=…, api_concurrency, claim_concurrency, "
            "reconcile_concurrency, reconcile_shards), or deploy with -c cronledger:reserve_concurrency=false "
            "(then only claim's max_in_flight bounds the executors)"
        )
    return f"the account's Lambda concurrency limit {limit} holds {terms} = {total} + 100"


def _output(*command: str) -> str | None:
    if shutil.which(command[0]) is None:
        return None
    run = subprocess.run(command, capture_output=True, text=True, check=False)
    return run.stdout.strip() if run.returncode == 0 else None


def main(argv: list[str] | None = None, lambda_client: Any = None) -> int:
    parser = argparse.ArgumentParser(description="Check that a cronledger deploy can succeed.")
    parser.add_argument("-c", "--context", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--skip-tools", action="store_true", help="check the account only")
    args = parser.parse_args(argv)
    context: Mapping[str, str] = dict(pair.split("=", 1) for pair in args.context)
    props = CronledgerProps.from_context(context)
    missing = [] if args.skip_tools else missing_tools()
    for tool in missing:
        print(f"preflight: missing {tool}", file=sys.stderr)
    if lambda_client is None:
        import boto3

        lambda_client = boto3.client("lambda")
    try:
        print(f"preflight: {check_concurrency(props, lambda_client)}")
    except PreflightRefused as exc:
        print(f"preflight: refused: {exc}", file=sys.stderr)
        return 1
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
