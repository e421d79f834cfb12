"""Pacing for the service loops: how often housekeeping runs, and how long a loop sleeps.

Both loops (reconcile, claim) run until a monotonic deadline, so a Lambda invocation ends
before its timeout and a local run stops promptly on Ctrl-C.
"""

from __future__ import annotations

import threading
import time

#: How often a loop records that it is alive (the health endpoint reads it).
JOB_HEARTBEAT_EVERY_SECS = 15.0


class Every:
    """True at most once per `secs` (and on the first call): housekeeping that must happen
    regularly but not on every tick of a one-second loop."""

    def __init__(self, secs: float) -> None:
        self._secs = secs
        self._last: float | None = None

    def due(self) -> bool:
        now = time.monotonic()
        if self._last is None or now - self._last >= self._secs:
            self._last = now
            return True
        return False


def sleep_until_next(stop: threading.Event, secs: float, until: float) -> None:
    """Sleep `secs`, cut short by `stop` and never past the monotonic deadline `until`."""
    stop.wait(max(0.0, min(secs, until - time.monotonic())))
