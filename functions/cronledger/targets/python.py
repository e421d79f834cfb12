"""Python target: `package.module:function`, called in-process with the envelope.

The spelling is checked when the channel is saved, but nothing is imported until an attempt
runs, so the API process never executes scheduled code. The callable's return value, as JSON,
is the result excerpt. A Python call cannot be interrupted, so this target does not enforce the
time budget itself: it runs in the caller's thread and the executor's deadline bounds it.
"""

from __future__ import annotations

import importlib
import json
import keyword
import re
from collections.abc import Mapping
from typing import Any

from cronledger.errors import FieldError
from cronledger.targets.clients import AwsClients
from cronledger.targets.envelope import Envelope
from cronledger.targets.fields import DocumentChecks
from cronledger.targets.interface import TargetKind, TargetOutcome

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_CALLABLE = re.compile(rf"{_NAME}(\.{_NAME})*:{_NAME}")


def errors(doc: Mapping[str, Any]) -> list[FieldError]:
    checks = DocumentChecks(doc)
    spec = checks.string(
        "callable",
        example="reports.nightly:run",
        max_len=256,
        pattern=_CALLABLE,
        pattern_hint="must be a module path and a function name joined by ':'",
    )
    if spec and any(keyword.iskeyword(part) for part in re.split(r"[.:]", spec)):
        checks.fail("callable", "invalid", f"callable {spec!r} uses a Python keyword as a name")
    return checks.errors


def ref(doc: Mapping[str, Any]) -> str:
    return f"python:{doc['callable']}"


def run(
    doc: Mapping[str, Any], envelope: Envelope, timeout_secs: float, clients: AwsClients
) -> TargetOutcome:
    module_name, _, attribute = str(doc["callable"]).partition(":")
    function = getattr(importlib.import_module(module_name), attribute, None)
    if not callable(function):
        return TargetOutcome(ok=False, error=f"{module_name} has no callable {attribute!r}")
    value = function(envelope)
    if value is None:
        return TargetOutcome(ok=True)
    # Whatever the callable returns is kept as text; an odd type must not fail a finished run.
    return TargetOutcome(ok=True, result=json.dumps(value, default=str, ensure_ascii=False))


KIND = TargetKind(
    type="python", keys=frozenset({"type", "callable"}), errors=errors, ref=ref, run=run
)
