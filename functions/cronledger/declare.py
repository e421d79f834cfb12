"""Channels declared beside the function they run: `@cronledger.cron(...)`.

Decorating a module-level function records one channel document (a `python` target naming the
function) and returns the function unchanged; `cronledger channels apply --from-module MODULE`
imports the module and applies what it declares. Each document carries its module under
`MODULE_LABEL`, so `--prune` archives only the channels that module no longer declares.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Mapping
from typing import Any, Final, TypeVar

#: The label every declared channel carries: the module that declares it.
MODULE_LABEL: Final = "cronledger.dev/module"

F = TypeVar("F", bound=Callable[..., Any])

_declared: dict[str, dict[str, dict[str, Any]]] = {}
_UNSAFE_NAME_CHARS = re.compile(r"[^A-Za-z0-9_.-]")


def schedule(
    expression: str,
    *,
    timezone: str = "UTC",
    name: str | None = None,
    payload: Any = None,
    timeout_ms: int | None = None,
    labels: Mapping[str, str] | None = None,
    status: str = "active",
    **transport: Any,
) -> Callable[[F], F]:
    """Declare a channel running the decorated function on a six-field cron `expression` in
    `timezone`. `name` defaults to the function's module and name; other keywords
    (`misfire_policy`, `concurrency`, `retry`, `alerts`, …) go into `transport_config` as
    written, and are judged by the API when applied, as any document is."""

    def declare(function: F) -> F:
        module, qualname = function.__module__, function.__qualname__
        if "." in qualname or qualname.startswith("_"):
            raise TypeError(
                f"@cronledger.cron needs a public module-level function, not {qualname!r}"
            )
        channel = name or _UNSAFE_NAME_CHARS.sub("-", f"{module}.{qualname}")
        config: dict[str, Any] = {"schedule": expression, "timezone": timezone, **transport}
        if payload is not None:
            config["payload"] = payload
        document: dict[str, Any] = {
            "name": channel,
            "transport_config": config,
            "target": {"type": "python", "callable": f"{module}:{qualname}"},
            "labels": {**(labels or {}), MODULE_LABEL: module},
            "status": status,
        }
        if timeout_ms is not None:
            document["timeout_ms"] = timeout_ms
        _declared.setdefault(module, {})[channel] = document
        return function

    return declare


def declared_by(module: str) -> list[dict[str, Any]]:
    """Import `module` and answer the channel documents it declares, in declaration order.
    ImportError (with the module's own message) if it cannot be imported."""
    importlib.import_module(module)
    return [dict(document) for document in _declared.get(module, {}).values()]
