"""Waiting in tests for something another thread does, without a fixed sleep."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(predicate: Callable[[], object], timeout: float = 15.0, every: float = 0.05) -> None:
    """Return once `predicate()` is true; fail the test if it is not within `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(every)
    raise AssertionError(f"condition not met within {timeout} s")
