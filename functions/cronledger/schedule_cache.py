"""Compiled schedules, cached per process by (channel id, version).

A channel version is immutable, so compiling it once per process is enough: a reconcile pass
over thousands of channels, and every executor in the process, share one compile each.
"""

from __future__ import annotations

import threading

from cronledger.ledger import Channel, DueChannel
from cronledger.schedule import Schedule, compile_schedule


class ScheduleCache:
    """Compiled schedules by (channel id, version): a version is immutable, so compiling it
    once per process is enough, and a pass over thousands of channels does not re-parse them."""

    def __init__(self, capacity: int = 50_000) -> None:
        self._capacity = capacity
        self._compiled: dict[tuple[str, int], Schedule] = {}
        self._lock = threading.Lock()

    def get(self, channel: Channel | DueChannel) -> Schedule:
        key = (channel.channel_id, channel.version)
        with self._lock:
            found = self._compiled.get(key)
        if found is not None:
            return found
        schedule = compile_schedule(channel.transport_config, channel_id=channel.channel_id)
        with self._lock:
            if len(self._compiled) >= self._capacity:
                self._compiled.clear()
            self._compiled[key] = schedule
        return schedule


#: One per process: reconcile passes and executors in it compile each channel version once
#: between them (a per-second schedule takes several milliseconds to compile).
SHARED_SCHEDULES = ScheduleCache()
