"""A module a test operator allows (`tests.unit`), holding things that are not allowed targets:
a name it merely imported, a private helper, a class, an instance, an async function, a builtin."""

from __future__ import annotations

from subprocess import getoutput  # noqa: F401  (imported, not defined here)
from typing import Any

print = print  # a builtin, re-bound here


def run(envelope: dict[str, Any]) -> str:
    return "ran"


def _helper(envelope: dict[str, Any]) -> None:
    return None


class Job:
    def __call__(self, envelope: dict[str, Any]) -> None:
        return None


instance = Job()


async def later(envelope: dict[str, Any]) -> None:
    return None
