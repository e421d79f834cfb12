"""What every Lambda function shares: Powertools' logger, metrics and tracer, and the things a
container builds once and keeps for its life (settings, the ledger and its event sender, an
executor, the API).

Import time reads only Powertools' own variables (`POWERTOOLS_SERVICE_NAME`, `…_NAMESPACE`,
`…_LOG_LEVEL`): a container builds the rest on its first invocation, through
`per_container` getters, so a bad setting fails that invocation naming the variable, and
nothing connects until the first handler asks. The services log through stdlib loggers under
`cronledger.*`; Powertools names its logger after the service, which the stack sets to
`cronledger`, so their lines go through the same JSON handler with the same appended keys.

Loops stop `LOOP_MARGIN_SECS` before the function's deadline, enough for the round in flight
(a batch of dispatches) and the metrics flush to finish inside it.
"""

from __future__ import annotations

import functools
import gc
import threading
import time
import warnings
from collections.abc import Callable
from types import ModuleType
from typing import Any, TypeVar, cast

import wrapt
from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.utilities.typing import LambdaContext

from cronledger.aws.database import ledger_engine
from cronledger.aws.emf import EmfSink
from cronledger.aws.events import EventBridgeSender, bus_sender, send_after_commit
from cronledger.ledger import Ledger
from cronledger.settings import Settings

#: The metric the reconcile alarm counts (infra/cronledger_infra/monitoring.py): one per pass.
RECONCILE_SUCCEEDED = "ReconcileSucceeded"
#: Occurrences a claim invocation handed to executors.
DISPATCHED = "Dispatched"
LOOP_MARGIN_SECS = 3.0
#: What X-Ray traces, as Powertools names it, and the module whose import patches it: AWS
#: calls (targets, dispatches, the API's wake: botocore's clients, made from a session).
#: Patching a library imports it, so it is patched when a function first loads it (wrapt's
#: post-import hook; X-Ray patches with wrapt), not at import: a function that never calls
#: AWS (`reconcile`) does not load botocore's clients to trace them. `claim` and `migrate`,
#: which call AWS on every invocation, load them at import. The http target is traced by
#: `_trace_http_targets`: X-Ray's own `httplib` patch wraps a method of `http.client` that
#: urllib3 2, which sends the target's requests, never calls.
TRACED_WHEN_LOADED = {"botocore": "botocore.session"}
HTTP_TARGET_MODULE = "cronledger.targets.pinned_http"

# An invocation may record only metrics with dimensions of their own (a pass that failed, an
# attempt that was no longer its own), leaving `log_metrics` nothing to flush: expected here,
# so Powertools' warning about it would only be noise in every such invocation's log.
warnings.filterwarnings("ignore", message="No application metrics to publish", category=UserWarning)

logger = Logger()
metrics = Metrics()
emf_sink = EmfSink(metrics)
# The database is traced from the start: every function connects to it.
tracer = Tracer(patch_modules=("pg8000",))


def _trace(library: str, _module: ModuleType) -> None:
    tracer.patch([library])


def _trace_http_targets(module: ModuleType) -> None:
    """Each request an http target sends becomes a `remote` subsegment named by its host, as
    X-Ray's own HTTP patches name theirs, with the method, the status and the origin. Not the
    path or the query: a webhook's path is often its credential."""
    send = module.send

    @functools.wraps(send)
    def traced(**request: Any) -> Any:
        with tracer.provider.in_subsegment(request["host"], namespace="remote") as segment:
            # X-Ray's Subsegment (Powertools types it as its own abstract segment), or None
            # with no trace to join (not in an invocation)
            subsegment: Any = segment
            if subsegment is None:
                return send(**request)
            origin = f"{request['scheme']}://{request['host']}:{request['port']}"
            subsegment.put_http_meta("url", origin)
            subsegment.put_http_meta("method", request["method"])
            answer = send(**request)
            subsegment.put_http_meta("status", answer.status)
            return answer

    vars(module)["send"] = traced


for _library, _module in TRACED_WHEN_LOADED.items():
    wrapt.register_post_import_hook(functools.partial(_trace, _library), _module)
wrapt.register_post_import_hook(_trace_http_targets, HTTP_TARGET_MODULE)

# What is loaded by now (SQLAlchemy, Powertools, pg8000, the ledger) lives as long as the
# container: frozen out of the cyclic collector's sight, it is not walked again by the full
# collections the rest of the import and every later invocation trigger (a twentieth of a
# handler's import).
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


def forget_container() -> None:
    """Drop everything built so far, closing the ledger's connections: the next call builds
    afresh, as in a new container. The tests use it between cases."""
    with _building:
        built = list(_built.values())
        _built.clear()
    for thing in built:
        if isinstance(thing, Ledger):
            thing.dispose()


@per_container
def settings() -> Settings:
    return Settings.from_env()


@per_container
def ledger() -> Ledger:
    """The container's ledger; the events a commit makes are sent to the installation's bus
    right after it, by the function that made them (what misses that, the sweep sends)."""
    built = Ledger(ledger_engine())
    sender = event_sender()
    if sender is not None:
        built.events.on_events = send_after_commit(built, sender)
    return built


@per_container
def event_sender() -> EventBridgeSender | None:
    return bus_sender(settings())


def deadline(context: LambdaContext) -> float:
    """The function's own end, on the monotonic clock."""
    return time.monotonic() + context.get_remaining_time_in_millis() / 1000


def loop_until(context: LambdaContext) -> float:
    """When a loop should stop starting rounds, on the monotonic clock."""
    return deadline(context) - LOOP_MARGIN_SECS
