"""Pacing for the service loops: how often housekeeping runs, how long a loop sleeps, and how
it backs off while the database is away.

A loop runs until a monotonic deadline. While the database is away it waits longer after each
failure (`Backoff`), logging only the outage's start and end, and probes the database every
poll interval, so it resumes within a probe of its return. Every wait and reading of the time
goes through a `Clock`, so a test runs a loop's pacing on a fake one without sleeping.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import NoReturn

#: How often a loop records that it is alive (the health endpoint reads it).
JOB_HEARTBEAT_EVERY_SECS = 15.0
#: The longest a loop waits between two tries while the database is away.
MAX_BACKOFF_SECS = 30.0
#: The longest between two probes of a database that is away (`Backoff.wait`).
PROBE_EVERY_SECS = 1.0
#: How often a main thread waiting for Ctrl-C looks for a signal that another thread took.
SIGNAL_LOOK_SECS = 0.5


@dataclass(frozen=True, slots=True)
class Clock:
    """Where a loop reads the monotonic time and waits: `wait(event, secs)` waits up to
    `secs` for `event` and answers whether it was set (`threading.Event.wait`)."""

    monotonic: Callable[[], float] = time.monotonic
    wait: Callable[[threading.Event, float], bool] = threading.Event.wait

    def sleep(self, secs: float) -> None:
        """Wait `secs`, with nothing to cut it short."""
        self.wait(threading.Event(), secs)


SYSTEM_CLOCK = Clock()


class Every:
    """True at most once per `secs` (and on the first call): housekeeping that must happen
    regularly but not on every tick of a one-second loop."""

    def __init__(self, secs: float, clock: Clock = SYSTEM_CLOCK) -> None:
        self._secs = secs
        self._clock = clock
        self._last: float | None = None

    def due(self) -> bool:
        now = self._clock.monotonic()
        if self._last is None or now - self._last >= self._secs:
            self._last = now
            return True
        return False

    def again(self) -> None:
        """Make the next `due()` true: the work it paces stopped before it was done."""
        self._last = None


class Backoff:
    """The wait after each consecutive database failure of one loop: `first_secs`, doubled
    each time, at most `MAX_BACKOFF_SECS`; the first success resets it. Logs the outage's
    start (with the error) and its end (with how many tries failed), nothing in between."""

    def __init__(
        self, job: str, first_secs: float, log: logging.Logger, clock: Clock = SYSTEM_CLOCK
    ) -> None:
        self.job = job
        self.first_secs = first_secs
        self.failures = 0
        self._log = log
        self._clock = clock

    def failed(self, error: BaseException) -> float:
        """Count a failure; answer how long to wait before the next try."""
        self.failures += 1
        if self.failures == 1:
            self._log.warning(
                "%s: the database is unavailable (%s); retrying with backoff up to %.0f s",
                self.job,
                error,
                MAX_BACKOFF_SECS,
            )
        return min(MAX_BACKOFF_SECS, self.first_secs * 2.0 ** (self.failures - 1))

    def wait(
        self,
        error: BaseException,
        stop: threading.Event,
        until: float,
        probe: Callable[[], object],
    ) -> None:
        """Count a failure and wait before the next try, cut short by `stop`, by the deadline
        `until`, and by the first success of `probe` (one cheap statement, run every
        `first_secs`, at most every `PROBE_EVERY_SECS`; a failing one is not counted)."""
        clock = self._clock
        end = min(until, clock.monotonic() + self.failed(error))
        every = min(self.first_secs, PROBE_EVERY_SECS)
        while not clock.wait(stop, max(0.0, min(every, end - clock.monotonic()))):
            if clock.monotonic() >= end:
                return
            try:
                probe()
            except Exception:
                continue
            return

    def succeeded(self) -> None:
        if self.failures:
            self._log.warning(
                "%s: the database is back after %d failed tr%s",
                self.job,
                self.failures,
                "y" if self.failures == 1 else "ies",
            )
        self.failures = 0


def sleep_until_next(
    stop: threading.Event, secs: float, until: float, clock: Clock = SYSTEM_CLOCK
) -> None:
    """Sleep `secs`, cut short by `stop` and never past the monotonic deadline `until`."""
    clock.wait(stop, max(0.0, min(secs, until - clock.monotonic())))


def wait_for_interrupt() -> NoReturn:
    """Block the main thread until a signal's handler raises (Ctrl-C's: KeyboardInterrupt).

    CPython runs a handler only when the main thread next runs Python, and a signal may land
    on another thread, which does not wake a main thread waiting without end; so it sleeps
    in short steps, and a signal that landed elsewhere is acted on within one."""
    while True:
        time.sleep(SIGNAL_LOOK_SECS)
