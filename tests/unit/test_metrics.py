from __future__ import annotations

import threading
from collections.abc import Mapping

from cronledger import metrics
from cronledger.metrics import InMemoryMetrics, Unit


class ListSink:
    def __init__(self) -> None:
        self.values: list[tuple[str, float, Unit, dict[str, str]]] = []

    def record(self, name: str, value: float, unit: Unit, dimensions: Mapping[str, str]) -> None:
        self.values.append((name, value, unit, dict(dimensions)))


class BrokenSink:
    def record(self, name: str, value: float, unit: Unit, dimensions: Mapping[str, str]) -> None:
        raise ConnectionError("stdout closed")


def test_each_named_metric_reaches_the_sink_with_its_unit_and_dimensions() -> None:
    sink = ListSink()

    with metrics.recording_to(sink):
        metrics.record_schedule_lag(0.25)
        metrics.record_occurrences("completed", 3)
        metrics.record_singleton_contention()
        metrics.record_renewal_failure()
        metrics.record_reconcile_duration(0.012)
        metrics.record_oldest_pending_age(42.0)
        metrics.record_pending_count(7)
        metrics.record_db_unavailable("claim")

    assert sink.values == [
        ("ScheduleLagSeconds", 0.25, "Seconds", {}),
        ("Occurrences", 3.0, "Count", {"Status": "completed"}),
        ("SingletonContention", 1.0, "Count", {}),
        ("RenewalFailures", 1.0, "Count", {}),
        ("ReconcileDurationSeconds", 0.012, "Seconds", {}),
        ("OldestPendingAgeSeconds", 42.0, "Seconds", {}),
        ("PendingCount", 7.0, "Count", {}),
        ("DbUnavailable", 1.0, "Count", {"Operation": "claim"}),
    ]


def test_the_in_memory_recorder_sums_counters_and_keeps_the_newest_gauge_per_dimension() -> None:
    recorder = InMemoryMetrics()

    with metrics.recording_to(recorder):
        metrics.record_occurrences("completed")
        metrics.record_occurrences("completed", 2)
        metrics.record_occurrences("failed")
        metrics.record_pending_count(10)
        metrics.record_pending_count(4)

    assert recorder.total(metrics.OCCURRENCES, Status="completed") == 3
    assert recorder.total(metrics.OCCURRENCES, Status="failed") == 1
    assert recorder.total(metrics.OCCURRENCES, Status="cancelled") == 0
    assert recorder.last(metrics.PENDING_COUNT) == 4
    assert recorder.last(metrics.OLDEST_PENDING_AGE) is None


def test_the_recorder_keeps_individual_values_for_percentiles_but_only_the_most_recent() -> None:
    recorder = InMemoryMetrics(keep_values=3)

    with metrics.recording_to(recorder):
        for lag in (0.1, 0.2, 0.3, 0.4):
            metrics.record_schedule_lag(lag)

    assert recorder.values(metrics.SCHEDULE_LAG) == [0.2, 0.3, 0.4]
    assert recorder.total(metrics.SCHEDULE_LAG) == 0.1 + 0.2 + 0.3 + 0.4


def test_counts_from_many_threads_are_not_lost() -> None:
    recorder = InMemoryMetrics()

    def count() -> None:
        for _ in range(2000):
            metrics.record_renewal_failure()

    with metrics.recording_to(recorder):
        threads = [threading.Thread(target=count) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    assert recorder.total(metrics.RENEWAL_FAILURES) == 16_000


def test_a_failing_sink_does_not_fail_the_caller() -> None:
    with metrics.recording_to(BrokenSink()):
        metrics.record_db_unavailable("reconcile")  # must not raise


def test_the_previous_sink_is_restored_after_a_recording_block() -> None:
    outer, inner = ListSink(), ListSink()

    with metrics.recording_to(outer):
        with metrics.recording_to(inner):
            metrics.record_pending_count(1)
        metrics.record_pending_count(2)

    assert [v[1] for v in inner.values] == [1.0]
    assert [v[1] for v in outer.values] == [2.0]


def test_the_default_sink_is_the_process_wide_in_memory_recorder() -> None:
    default = metrics.DEFAULT_RECORDER
    before = default.total(metrics.SINGLETON_CONTENTION)

    metrics.record_singleton_contention(2)

    assert default.total(metrics.SINGLETON_CONTENTION) == before + 2
