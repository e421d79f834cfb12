"""What the stack in infra/ tells the functions, read from its source without importing CDK
(which would start a jsii kernel): the handler of each function, the names the alarms select,
and the environment a function is imported in."""

from __future__ import annotations

import ast
import os
from pathlib import Path
from typing import Any

INFRA = Path(__file__).resolve().parents[2] / "infra" / "cronledger_infra"


def constants(module: str) -> dict[str, Any]:
    """The module-level names of `infra/cronledger_infra/<module>.py` bound to literals."""
    tree = ast.parse((INFRA / f"{module}.py").read_text())
    found: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name):
                try:
                    found[target.id] = ast.literal_eval(node.value)
                except ValueError:
                    continue
    return found


def handler_modules() -> dict[str, str]:
    """Each function's name and the module its handler lives in."""
    handlers: dict[str, str] = constants("functions")["HANDLERS"]
    return {name: path.rsplit(".", 1)[0] for name, path in handlers.items()}


def lambda_import_environment() -> dict[str, str]:
    """The environment Lambda imports a handler module in, as far as import time can see it:
    the runtime's own variables and Powertools' (tracing on, as on Lambda), but no AWS
    credentials and only nonsense `CRONLEDGER_*` settings, which nothing may read yet."""
    kept = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("AWS_", "CRONLEDGER_", "POWERTOOLS_", "_X_AMZN"))
    }
    return {
        **kept,
        "LAMBDA_TASK_ROOT": "/var/task",
        "AWS_LAMBDA_FUNCTION_NAME": "cronledger-api",
        "AWS_REGION": "us-east-1",
        "POWERTOOLS_SERVICE_NAME": constants("functions")["SERVICE_NAME"],
        "POWERTOOLS_METRICS_NAMESPACE": "Cronledger",
        "POWERTOOLS_TRACER_CAPTURE_RESPONSE": "false",
        "CRONLEDGER_DATABASE_URL": "not a database url",
        "CRONLEDGER_POLL_INTERVAL_MS": "soon",
    }
