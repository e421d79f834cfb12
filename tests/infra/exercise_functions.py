"""Invoke every function's entry point once, in a process that cannot import what the code
asset drops (`python -m tests.infra.exercise_functions DATABASE_URL MODULE...`): a module
named on the command line, or inside one, raises ImportError, as it would on Lambda.

Migrate; the API (a channel created, a bad one refused, the listing, the OpenAPI document);
a channel declared in CDK applied by the channels function; a reconcile pass; the claim module imported (its invocations need AWS); one attempt through
the execute function. Prints "every function ran" at the end.
"""

from __future__ import annotations

import importlib.abc
import json
import os
import sys
from typing import Any


class _Dropped(importlib.abc.MetaPathFinder):
    def __init__(self, names: list[str]) -> None:
        self.names = names

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> None:
        if any(fullname == name or fullname.startswith(f"{name}.") for name in self.names):
            raise ImportError(f"{fullname} is not in the code asset")
        return None


def main(database_url: str, dropped: list[str]) -> None:
    sys.meta_path.insert(0, _Dropped(dropped))
    os.environ.update(
        {
            "CRONLEDGER_DATABASE_URL": database_url,
            "CRONLEDGER_POLL_INTERVAL_MS": "100",
            "CRONLEDGER_PYTHON_TARGETS": "cronledger.demo",
            "POWERTOOLS_SERVICE_NAME": "cronledger",
            "POWERTOOLS_METRICS_NAMESPACE": "Cronledger",
            "AWS_DEFAULT_REGION": "us-east-1",
        }
    )
    from cronledger.api.models import PREFIX
    from cronledger.aws import api, channel_resource, claim, execute, migrate, reconcile  # noqa: F401
    from tests.aws.invocations import FakeContext, http_api_event, scheduled_event

    def context(name: str) -> FakeContext:
        # The reconcile function loops until 3 s before its end: one second of passes.
        # migrate keeps a margin of its own before its deadline, as its function's timeout
        # (minutes) allows
        left = {"reconcile": 4_000, "migrate": 60_000}.get(name, 10_000)
        return FakeContext(f"cronledger-{name}", left)

    assert migrate.handler({"RequestType": "Create"}, context("migrate")) == {"migrated": True}

    channel = {
        "name": f"asset-check-{os.getpid()}",
        "transport_config": {"schedule": "* * * * * *"},
        "target": {"type": "python", "callable": "cronledger.demo:hello"},
        "timeout_ms": 5000,
        "status": "active",
    }
    answers = [
        api.handler(http_api_event("POST", f"{PREFIX}/channels", channel), context("api")),
        api.handler(http_api_event("POST", f"{PREFIX}/channels", {"name": 7}), context("api")),
        api.handler(http_api_event("GET", f"{PREFIX}/channels"), context("api")),
        api.handler(http_api_event("GET", "/openapi.json"), context("api")),
    ]
    statuses = [a["statusCode"] for a in answers]
    assert statuses == [201, 400, 200, 200], [a["body"][:300] for a in answers]

    declared = {**channel, "name": f"declared-{os.getpid()}"}
    properties = {"Document": json.dumps(declared), "Removal": "purge", "Deployer": "asset-check"}
    applied = channel_resource.handler(
        {"RequestType": "Create", "ResourceProperties": properties}, context("channels")
    )
    assert applied["Data"]["Outcome"] == "created", applied
    channel_resource.handler(
        {
            "RequestType": "Delete",
            "PhysicalResourceId": applied["PhysicalResourceId"],
            "ResourceProperties": properties,
        },
        context("channels"),
    )

    reconcile.handler(scheduled_event("cronledger-reconcile"), context("reconcile"))
    from cronledger.aws import runtime

    ledger = runtime.ledger()
    claimed = []
    while not claimed:  # the cursor starts at the next second
        claimed = ledger.attempts.claim("asset-check", 1, 60).leased
        if not claimed:
            reconcile.handler(scheduled_event("cronledger-reconcile"), context("reconcile"))
    answer = execute.handler(
        {"occurrence_id": claimed[0].id, "claimant": "asset-check"}, context("execute")
    )
    assert answer["status"] == "completed", answer
    print("every function ran")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
