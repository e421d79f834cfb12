"""Compiled schedules, cached per process by their document.

A channel version is immutable, and channels very often share a document (thousands of
customers' digests at 09:00 in one zone), so a document is compiled once per process and each
channel gets that schedule with its own id (`Schedule.channel_id` spreads its jitter, and is
the default concurrency key). The cache keeps the documents used most recently: when full it
forgets the least recent one, never all of them, so a pass over more channels than it holds
still finds every shared document compiled.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict

from cronledger.cron import Schedule, compile_schedule
from cronledger.ledger import Channel, DueChannel

#: The channel id a document is compiled under: not a lock name (`concurrency.key` refuses
#: `*`), so a concurrency key equal to it is the default one, the channel's own id.
TEMPLATE_ID = "*"
#: Documents kept; each channel that shares one costs nothing more.
DEFAULT_CAPACITY = 100_000


class ScheduleCache:
    """Compiled schedules by document text, the least recently used forgotten first."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        if capacity < 1:
            raise ValueError(f"a schedule cache holds at least one document, not {capacity}")
        self._capacity = capacity
        self._compiled: OrderedDict[str, Schedule] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, channel: Channel | DueChannel) -> Schedule:
        if isinstance(channel, DueChannel):
            document = channel.transport_config_json
        else:
            document = json.dumps(channel.transport_config, sort_keys=True)
        with self._lock:
            template = self._compiled.get(document)
            if template is not None:
                self._compiled.move_to_end(document)
        if template is None:
            template = compile_schedule(channel.transport_config, channel_id=TEMPLATE_ID)
            with self._lock:
                self._compiled[document] = template
                if len(self._compiled) > self._capacity:
                    self._compiled.popitem(last=False)
        return _for_channel(template, channel.channel_id)


def _for_channel(template: Schedule, channel_id: str) -> Schedule:
    """The template with the channel's id (and its default concurrency key): a copy of its
    attributes, which a pass makes for every due channel, rather than `dataclasses.replace`,
    which runs the constructor again and costs several times as much."""
    key = channel_id if template.concurrency_key == TEMPLATE_ID else template.concurrency_key
    schedule: Schedule = object.__new__(Schedule)
    vars(schedule).update(vars(template), channel_id=channel_id, concurrency_key=key)
    return schedule


#: One per process: reconcile passes and executors in it compile each document once
#: between them (a per-second schedule takes several milliseconds to compile).
SHARED_SCHEDULES = ScheduleCache()
