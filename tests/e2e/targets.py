"""Python-target callables for the end-to-end tests: each records what it received, keyed by
occurrence id, so a test can compare the envelope with the ledger row."""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

received: dict[str, list[dict[str, Any]]] = {}
_lock = threading.Lock()
#: Set by a test to make `slow` take this long.
slow_secs = 1.5
#: What `wait_for_release` blocks on: a test sets it to let a blocked target finish.
release = threading.Event()
running_now: dict[str, int] = {}
max_running: dict[str, int] = {}


def _record(event: dict[str, Any]) -> None:
    with _lock:
        received.setdefault(event["trigger"]["occurrence_id"], []).append(event)


def record(event: dict[str, Any]) -> dict[str, Any]:
    _record(event)
    return {"ok": True, "occurrence_id": event["trigger"]["occurrence_id"]}


def fail(event: dict[str, Any]) -> None:
    _record(event)
    raise RuntimeError("the report generator is out of paper")


def fail_first(event: dict[str, Any]) -> str:
    """Raise on the first attempt of an occurrence, succeed on any later one."""
    _record(event)
    if event["trigger"]["attempt"] == 1:
        _jam()
    return "printed"


def _jam() -> None:
    raise RuntimeError("the printer jammed")


def slow(event: dict[str, Any]) -> str:
    """Sleep `slow_secs`, counting how many run at once per singleton key."""
    _record(event)
    key = event["trigger"]["singleton_key"] or "-"
    with _lock:
        running_now[key] = running_now.get(key, 0) + 1
        max_running[key] = max(max_running.get(key, 0), running_now[key])
    try:
        time.sleep(slow_secs)
    finally:
        with _lock:
            running_now[key] -= 1
    return "slept"


def wait_for_release(event: dict[str, Any]) -> str:
    _record(event)
    release.wait(timeout=30)
    return "released"


def reset() -> None:
    with _lock:
        received.clear()
        running_now.clear()
        max_running.clear()
    release.clear()


def exit_process(event: dict[str, Any]) -> None:
    """What a script turned into a target does when it gives up: `sys.exit`."""
    _record(event)
    sys.exit(3)


def interrupt(event: dict[str, Any]) -> None:
    _record(event)
    raise KeyboardInterrupt("interrupted by the job itself")


def close_generator(event: dict[str, Any]) -> None:
    _record(event)
    raise GeneratorExit("generator closed")


def hang(event: dict[str, Any]) -> str:
    """A target that does not come back for two minutes (for `cronledger dev` stop tests)."""
    time.sleep(120)
    return "woke up"
