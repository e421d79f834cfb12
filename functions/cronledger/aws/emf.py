"""`cronledger.metrics` as CloudWatch EMF, in the shape the stack's alarms match.

The alarms select their metrics by exactly one dimension, `service`, and one EMF document shares
one dimension set. So a value without dimensions goes to Powertools' `Metrics` (flushed by
`log_metrics`), and one with dimensions of its own to a document per dimension set, flushed when
the invocation's `recording()` block ends.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from aws_lambda_powertools import Metrics
from aws_lambda_powertools.metrics.provider.cloudwatch_emf.cloudwatch import (
    AmazonCloudWatchEMFProvider,
)

from cronledger.metrics import Dimensions, Unit, dimension_key, recording_to


class EmfSink:
    """A `cronledger.metrics` sink writing EMF through Powertools; safe across threads."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics
        self._lock = threading.Lock()
        self._dimensioned: dict[Dimensions, AmazonCloudWatchEMFProvider] = {}

    def record(self, name: str, value: float, unit: Unit, dimensions: Mapping[str, str]) -> None:
        with self._lock:
            if not dimensions:
                self._metrics.add_metric(name=name, unit=unit, value=value)
                return
            key = dimension_key(dimensions)
            document = self._dimensioned.get(key)
            if document is None:
                document = AmazonCloudWatchEMFProvider(
                    namespace=self._metrics.namespace,
                    service=self._metrics.service,
                    default_dimensions=dict(dimensions),
                )
                self._dimensioned[key] = document
            document.add_metric(name=name, unit=unit, value=value)

    @contextmanager
    def recording(self) -> Iterator[EmfSink]:
        """Be the process's metrics sink for one invocation, then print one EMF document per
        dimension set; the handler's `log_metrics` flushes the rest after it."""
        with recording_to(self):
            try:
                yield self
            finally:
                with self._lock:
                    documents, self._dimensioned = self._dimensioned, {}
                for document in documents.values():
                    if document.metric_set:
                        document.flush_metrics()
