"""What every Lambda function shares: Powertools' logger, metrics and tracer, and what a
container builds once (`per_container`: settings, the ledger, its event sender…).

Importing reads only Powertools' own variables: the rest is built by the first invocation, so a
bad setting fails it naming the variable. The services' `cronledger.*` loggers go through
Powertools' JSON handler. Loops stop `LOOP_MARGIN_SECS` before the deadline, time for the round
in flight and the metrics flush.
"""

from __future__ import annotations

import functools
import gc
import threading
import time
import warnings
from collections.abc import Callable
from contextlib import ExitStack
from types import ModuleType
from typing import Any, TypeVar, cast

import sqlalchemy as sa
import wrapt
from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.utilities.typing import LambdaContext

from cronledger.aws.database import ledger_engine
from cronledger.aws.emf import EmfSink
from cronledger.aws.events import EventBridgeSender, send_after_commit
from cronledger.ledger import Ledger
from cronledger.settings import Settings

#: The metric the reconcile alarm counts (infra/cronledger_infra/monitoring.py): one per pass.
RECONCILE_SUCCEEDED = "ReconcileSucceeded"
#: Occurrences a claim invocation handed to executors.
DISPATCHED = "Dispatched"
LOOP_MARGIN_SECS = 3.0
HTTP_TARGET_MODULE = "cronledger.targets.pinned_http"

# An invocation may record only metrics with dimensions of their own: nothing for `log_metrics`.
warnings.filterwarnings("ignore", message="No application metrics to publish", category=UserWarning)

logger = Logger()
metrics = Metrics()
emf_sink = EmfSink(metrics)
tracer = Tracer(auto_patch=False)  # what is traced, and when: see the hooks below and _trace_sql


def _trace_sql(engine: sa.Engine) -> None:
    """Each statement the ledger sends becomes a `remote` subsegment with X-Ray's SQL fields
    (the database, its user and driver), never a statement's values."""
    name, url = f"{engine.url.database}@{engine.url.host}", engine.url
    sql = {
        "url": url.render_as_string(hide_password=True),
        "user": url.username or "",
        "database_type": engine.dialect.name,
        "driver_version": engine.driver,
    }

    def begin(connection: sa.Connection, *_: Any) -> None:
        statement = connection.info["xray"] = ExitStack()
        subsegment: Any = statement.enter_context(
            tracer.provider.in_subsegment(name, namespace="remote")
        )
        if subsegment is not None:  # None with no trace to join (not in an invocation)
            subsegment.set_sql(sql)

    def end(connection: sa.Connection, *_: Any) -> None:
        connection.info.pop("xray").close()

    def fail(context: sa.engine.ExceptionContext) -> None:
        statement = context.connection and context.connection.info.pop("xray", None)
        if statement is not None:
            failure = context.original_exception
            statement.__exit__(type(failure), failure, failure.__traceback__)

    sa.event.listen(engine, "before_cursor_execute", begin)
    sa.event.listen(engine, "after_cursor_execute", end)
    sa.event.listen(engine, "handle_error", fail)


def _trace_http_targets(module: ModuleType) -> None:
    """Each http target request is a `remote` subsegment named by its host, with its method,
    status and origin; never its path or query (a webhook's path is often its credential)."""
    send = module.send

    @functools.wraps(send)
    def traced(**request: Any) -> Any:
        with tracer.provider.in_subsegment(request["host"], namespace="remote") as segment:
            subsegment: Any = segment  # X-Ray's; None with no trace to join
            if subsegment is None:
                return send(**request)
            origin = f"{request['scheme']}://{request['host']}:{request['port']}"
            subsegment.put_http_meta("url", origin)
            subsegment.put_http_meta("method", request["method"])
            answer = send(**request)
            subsegment.put_http_meta("status", answer.status)
            return answer

    vars(module)["send"] = traced


# X-Ray patches botocore once a function loads its clients, never at import (patching imports
# the library, and `reconcile` loads no botocore). The http target and the ledger are traced by
# hooks of their own: X-Ray's patches miss urllib3 2 and the ledger's own connections.
wrapt.register_post_import_hook(lambda _: tracer.patch(["botocore"]), "botocore.session")
wrapt.register_post_import_hook(_trace_http_targets, HTTP_TARGET_MODULE)

# What is loaded by now lives as long as the container: the cyclic collector need not walk it.
gc.freeze()

T = TypeVar("T")
_built: dict[Callable[[], Any], Any] = {}
_building = threading.RLock()


def per_container(factory: Callable[[], T]) -> Callable[[], T]:
    """`factory`'s result, built on the first call and kept for the container's life."""

    @functools.wraps(factory)
    def get() -> T:
        with _building:
            if factory not in _built:
                _built[factory] = factory()
            return cast(T, _built[factory])

    return get


@per_container
def settings() -> Settings:
    return Settings.from_env()


@per_container
def ledger() -> Ledger:
    """The container's ledger, which sends the events a commit makes to the bus right after it
    (what misses that, the sweep sends)."""
    engine = ledger_engine()
    if not tracer.disabled:
        _trace_sql(engine)
    built = Ledger(engine)
    sender = event_sender()
    if sender is not None:
        built.events.on_events = send_after_commit(built, sender)
    return built


@per_container
def event_sender() -> EventBridgeSender | None:
    """The installation's sender; None where no bus is configured."""
    bus, installation = settings().event_bus_name, settings().installation
    return EventBridgeSender(bus, installation) if bus else None


def deadline(context: LambdaContext) -> float:
    """The invocation's end, on the monotonic clock."""
    return time.monotonic() + context.get_remaining_time_in_millis() / 1000


def loop_until(context: LambdaContext) -> float:
    """When a loop should stop starting rounds, on the monotonic clock."""
    return deadline(context) - LOOP_MARGIN_SECS
