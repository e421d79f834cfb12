"""Python target: `package.module:function`, called in-process with the envelope; its return
value, as JSON, is the result.

Running a named function is running code, so only the operator's choice counts: the module must
fall under a prefix of `CRONLEDGER_PYTHON_TARGETS` before it is imported, and the attribute must
be a public, synchronous function *defined* there, checked at save and again at each attempt
(the list may have narrowed). A call cannot be interrupted: the executor's deadline bounds it.
"""

from __future__ import annotations

import importlib
import inspect
import json
import keyword
import re
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Literal, cast

from pydantic import ValidationInfo, field_validator

from cronledger.targets.envelope import Envelope
from cronledger.targets.fields import TargetDocument, policy_of, text
from cronledger.targets.interface import Delivery, TargetOutcome
from cronledger.targets.policy import PYTHON_TARGETS, TargetPolicy
from cronledger.validation import refused

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_CALLABLE = re.compile(rf"{_NAME}(\.{_NAME})*:{_NAME}")


class Unresolved(Exception):
    """The callable cannot be used; the message says why and how to fix it."""


class PythonTarget(TargetDocument):
    ref_format: ClassVar[str] = "python:{callable}"

    type: Literal["python"]
    callable: text(  # type: ignore[valid-type]
        "reports.nightly:run",
        256,
        _CALLABLE,
        "must be a module path and a function name joined by ':'",
    )

    @field_validator("callable")
    @classmethod
    def _allowed(cls, spec: str, info: ValidationInfo) -> str:
        if any(keyword.iskeyword(part) for part in re.split(r"[.:]", spec)):
            raise refused("invalid", f"callable {spec!r} uses a Python keyword as a name")
        try:
            resolve_function(spec, policy_of(info))
        except Unresolved as exc:
            raise refused("invalid", str(exc)) from None
        return spec

    @classmethod
    def run(cls, doc: Mapping[str, Any], delivery: Delivery) -> TargetOutcome:
        # `run_target` found the document valid under this policy: the function resolves.
        function = resolve_function(str(doc["callable"]), delivery.policy)
        value = function(delivery.envelope)
        if value is None:
            return TargetOutcome(ok=True)
        # Whatever the callable returns is kept as text; an odd type must not fail a finished run.
        return TargetOutcome(ok=True, result=json.dumps(value, default=str, ensure_ascii=False))


def resolve_function(spec: str, policy: TargetPolicy) -> Callable[[Envelope], Any]:
    """The function `spec` names, if the policy allows it; `Unresolved` otherwise."""
    module_name, _, attribute = spec.partition(":")
    if not policy.allows_module(module_name):
        allowed = ", ".join(policy.python_modules) or "none"
        raise Unresolved(
            f"{module_name} is not in {PYTHON_TARGETS} (allowed: {allowed}); the operator "
            "lists the modules whose functions python targets may call"
        )
    if attribute.startswith("_"):
        raise Unresolved(f"{spec} is private (its name starts with '_'); name a public function")
    try:
        module = importlib.import_module(module_name)
    except (Exception, SystemExit) as exc:
        raise Unresolved(f"cannot import {module_name}: {type(exc).__name__}: {exc}") from None
    function = getattr(module, attribute, None)
    if function is None:
        raise Unresolved(f"{module_name} has no function {attribute!r}")
    if not inspect.isfunction(function) or inspect.iscoroutinefunction(function):
        kind = "an async function" if inspect.isfunction(function) else type(function).__name__
        raise Unresolved(f"{spec} is {kind}, not a plain function defined with def")
    if not policy.allows_module(getattr(function, "__module__", None) or ""):
        raise Unresolved(
            f"{spec} is {function.__module__}.{function.__qualname__}, defined outside "
            f"{PYTHON_TARGETS}; name the function where it is defined"
        )
    return cast("Callable[[Envelope], Any]", function)
