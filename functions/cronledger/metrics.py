"""Metrics: every number the scheduler reports goes through the named functions below.

A sink takes a value as CloudWatch EMF has it: a name, a number, a unit and dimensions;
whether a name is a counter or a gauge is fixed here, by the function that records it. The
default sink is an in-memory recorder (tests, the local runner); the AWS entry points install
an EMF sink. Recording never raises: a broken sink's errors are logged and dropped.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict, deque
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal, Protocol

Unit = Literal["Count", "Seconds", "Milliseconds"]

SCHEDULE_LAG = "ScheduleLagSeconds"  # started minus scheduled, one value per started attempt
OCCURRENCES = "Occurrences"  # counter, dimension Status
SINGLETON_CONTENTION = "SingletonContention"  # counter: a start refused because the key was held
RENEWAL_FAILURES = "RenewalFailures"  # counter: a renewal call that failed (not "not yours")
RECONCILE_DURATION = "ReconcileDurationSeconds"  # one value per reconcile pass
OLDEST_PENDING_AGE = "OldestPendingAgeSeconds"  # gauge
PENDING_COUNT = "PendingCount"  # gauge
DB_UNAVAILABLE = "DbUnavailable"  # counter, dimension Operation
EVENT_DELIVERY_LAG = "EventDeliveryLagSeconds"  # delivered minus written, one value per event
EVENTS_DELIVERED = "EventsDelivered"  # counter, dimension Kind
EVENT_DELIVERY_FAILURES = "EventDeliveryFailures"  # counter: a send the destination refused
OLDEST_UNDELIVERED_EVENT_AGE = "OldestUndeliveredEventAgeSeconds"  # gauge
UNDELIVERED_EVENTS = "UndeliveredEvents"  # gauge

_log = logging.getLogger(__name__)
Dimensions = tuple[tuple[str, str], ...]


class MetricsSink(Protocol):
    def record(self, name: str, value: float, unit: Unit, dimensions: Mapping[str, str]) -> None:
        """Take one value. Must be safe to call from several threads at once."""


class InMemoryMetrics:
    """Per metric name and dimension set: the running total, and the most recent values
    (bounded, so a long local run does not grow without limit)."""

    def __init__(self, keep_values: int = 10_000) -> None:
        self._lock = threading.Lock()
        self._keep = keep_values
        self._totals: dict[tuple[str, Dimensions], float] = defaultdict(float)
        self._values: dict[tuple[str, Dimensions], deque[float]] = {}

    def record(self, name: str, value: float, unit: Unit, dimensions: Mapping[str, str]) -> None:
        key = (name, dimension_key(dimensions))
        with self._lock:
            self._totals[key] += value
            self._values.setdefault(key, deque(maxlen=self._keep)).append(value)

    def total(self, name: str, **dimensions: str) -> float:
        """The sum of every value recorded: the reading of a counter (0 if never recorded)."""
        with self._lock:
            return self._totals.get((name, dimension_key(dimensions)), 0.0)

    def last(self, name: str, **dimensions: str) -> float | None:
        """The newest value: the reading of a gauge (None if never recorded)."""
        with self._lock:
            values = self._values.get((name, dimension_key(dimensions)))
            return values[-1] if values else None

    def values(self, name: str, **dimensions: str) -> list[float]:
        """The most recent values, oldest first, e.g. to take percentiles of schedule lag."""
        with self._lock:
            return list(self._values.get((name, dimension_key(dimensions)), ()))


def dimension_key(dimensions: Mapping[str, str]) -> Dimensions:
    return tuple(sorted(dimensions.items()))


#: The process-wide in-memory recorder, the sink until another is installed.
DEFAULT_RECORDER = InMemoryMetrics()
_sink: MetricsSink = DEFAULT_RECORDER
_sink_lock = threading.Lock()


@contextmanager
def recording_to(sink: MetricsSink) -> Iterator[MetricsSink]:
    """Send every value to `sink` for the duration of a block (a test, one invocation)."""
    global _sink
    with _sink_lock:
        previous, _sink = _sink, sink
    try:
        yield sink
    finally:
        with _sink_lock:
            _sink = previous


def _record(
    name: str, value: float, unit: Unit, dimensions: Mapping[str, str] | None = None
) -> None:
    try:
        _sink.record(name, float(value), unit, dimensions or {})
    except Exception:
        _log.warning("metrics sink failed to record %s", name, exc_info=True)


@dataclass(frozen=True, slots=True)
class _Metric:
    """A metric without dimensions of its own, recorded in its unit (a counter counts 1 by
    default)."""

    name: str
    unit: Unit

    def __call__(self, value: float = 1) -> None:
        _record(self.name, value, self.unit)


#: How late an attempt started against its `due_at` (the instant, plus any jitter).
record_schedule_lag = _Metric(SCHEDULE_LAG, "Seconds")
record_singleton_contention = _Metric(SINGLETON_CONTENTION, "Count")
record_renewal_failure = _Metric(RENEWAL_FAILURES, "Count")
record_reconcile_duration = _Metric(RECONCILE_DURATION, "Seconds")
#: Age of the oldest due `pending` row by the DB clock; 0 when there is none.
record_oldest_pending_age = _Metric(OLDEST_PENDING_AGE, "Seconds")
record_pending_count = _Metric(PENDING_COUNT, "Count")
record_event_delivery_failures = _Metric(EVENT_DELIVERY_FAILURES, "Count")


def record_occurrences(status: str, count: int = 1) -> None:
    """Occurrences that reached `status` (settled, skipped, cancelled…)."""
    _record(OCCURRENCES, count, "Count", {"Status": status})


def record_db_unavailable(operation: str) -> None:
    """A database call failed; `operation` names the loop or step (`reconcile`, `claim`, …)."""
    _record(DB_UNAVAILABLE, 1, "Count", {"Operation": operation})


def record_event_delivered(kind: str, written_at: datetime) -> None:
    """An event its destination accepted, and how long after it was written."""
    _record(EVENTS_DELIVERED, 1, "Count", {"Kind": kind})
    _record(EVENT_DELIVERY_LAG, (datetime.now(UTC) - written_at).total_seconds(), "Seconds")


def record_outbox(undelivered: int, oldest_age_secs: float | None) -> None:
    """Events waiting for delivery, and the oldest one's age (0 when none waits)."""
    _record(UNDELIVERED_EVENTS, undelivered, "Count")
    _record(OLDEST_UNDELIVERED_EVENT_AGE, oldest_age_secs or 0.0, "Seconds")
