"""`cronledger dev`: the Lambda services on threads of one process, the API behind a plain
HTTP server (`local_gateway`), each ended attempt printed as a line (`local_printer`).

Ctrl-C stops claiming and waits at most `DRAIN_SECS` for in-flight attempts: the leases still
held expire and a peer (or the next run) recovers them. A second Ctrl-C exits at once.
"""

from __future__ import annotations

import ipaddress
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from typing import Any, Final

import sqlalchemy as sa

from cronledger.claim import run_claim_loop
from cronledger.errors import NotFound
from cronledger.execute import AttemptReport, Executor
from cronledger.invokers import ThreadPoolInvoker
from cronledger.ledger import CHANNEL_ACTIVE, Channel, Event, Ledger
from cronledger.local_gateway import exposure_warning, serve_api
from cronledger.local_printer import console_printer, line_printer
from cronledger.outbox import Courier, event_line, local_sender
from cronledger.pacing import wait_for_interrupt
from cronledger.reconcile import PassReport, run_reconcile_loop
from cronledger.settings import Settings

DEMO_CHANNEL: Final[dict[str, Any]] = {
    "name": "demo",
    "transport_config": {
        "schedule": "*/5 * * * * *",
        "timezone": "UTC",
        "payload": {"greeting": "hello from cronledger"},
    },
    "target": {"type": "python", "callable": "cronledger.demo:hello"},
    "timeout_ms": 10_000,
}
#: How long Ctrl-C waits for in-flight attempts before leaving their leases to expire.
DRAIN_SECS = 10.0
#: `cronledger dev` materialises this far ahead unless CRONLEDGER_LOOKAHEAD_SECS says otherwise.
DEV_LOOKAHEAD_SECS = 3
#: The local pool's size: claims never exceed what can start at once.
MAX_LOCAL_WORKERS = 16
#: What `--demo` lets python targets call: the demo's own module, nothing else.
DEMO_MODULE = "cronledger.demo"
#: `cronledger dev` lets http targets reach this machine (a service under development)
#: unless CRONLEDGER_HTTP_ALLOW_NETWORKS says otherwise, and says so when it starts.
DEV_ALLOW_NETWORKS = (ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128"))


def ensure_demo_channel(ledger: Ledger) -> Channel:
    """The demo channel, created active if no channel has its name. Once it exists it is the
    operator's: paused or archived, it stays so on every restart."""
    try:
        return ledger.channels.get_channel_by_name(DEMO_CHANNEL["name"])
    except NotFound:
        return ledger.channels.create_channel(**DEMO_CHANNEL, status=CHANNEL_ACTIVE)


@dataclass
class LocalScheduler:
    """The scheduler's loops and executors in this process (no HTTP)."""

    ledger: Ledger
    settings: Settings
    on_settled: Callable[[AttemptReport], None] | None = None
    stop: threading.Event = field(default_factory=threading.Event)
    workers: int = MAX_LOCAL_WORKERS
    #: Shown each delivered event (`cronledger dev` prints it).
    on_event: Callable[[Event], None] | None = None

    def __post_init__(self) -> None:
        self.executor = Executor(self.ledger, self.settings)
        self.invoker = ThreadPoolInvoker(self._attempt, max_workers=self.workers)
        sender = local_sender(self.settings, self.on_event)
        # Without a destination events are still written, and listed; nothing sends them.
        self.courier = Courier(self.ledger, sender) if sender is not None else None
        self._threads: list[threading.Thread] = []
        # Set by the reconciler when it materialised rows, and by shutdown: ends a claim nap.
        self._wake = threading.Event()

    def _reconciled(self, report: PassReport) -> None:
        if report.inserted:
            self._wake.set()

    def _attempt(self, occurrence_id: str, claimant: str) -> AttemptReport:
        report = self.executor.run_attempt(occurrence_id, claimant)
        if self.on_settled is not None:
            self.on_settled(report)
        return report

    def start(self) -> None:
        forever, ledger, settings = float("inf"), self.ledger, self.settings
        loops: dict[str, Callable[[], object]] = {
            "reconcile": lambda: run_reconcile_loop(
                ledger, settings, forever, self.stop, on_pass=self._reconciled
            ),
            # A claim's lease starts ticking at once: claim no more than there are free workers.
            "claim": lambda: run_claim_loop(
                ledger,
                settings,
                self.invoker,
                forever,
                self.stop,
                room=lambda: self.invoker.room,
                wake=self._wake,
            ),
        }
        for name, loop in loops.items():
            thread = threading.Thread(target=loop, name=f"cronledger-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)
        if self.courier is not None:
            ledger.events.on_events = self.courier.submit
            self.courier.start()

    def shutdown(self, drain_secs: float = DRAIN_SECS) -> bool:
        """Stop the loops and wait for in-flight attempts, `drain_secs` at most in all.
        Answers whether every attempt finished (False: some leases are left to expire)."""
        deadline = time.monotonic() + drain_secs
        self.stop.set()
        self._wake.set()
        for thread in self._threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        drained = self.invoker.shutdown(max(0.0, deadline - time.monotonic()))
        if self.courier is not None:
            # Last: the drained attempts' events go out now; what does not waits in the outbox.
            if self.ledger.events.on_events == self.courier.submit:
                self.ledger.events.on_events = None
            self.courier.stop(max(0.5, deadline - time.monotonic()))
        return drained


def dev_settings(
    database_url: str, demo: bool, environ: Mapping[str, str] = os.environ
) -> Settings:
    """The settings `cronledger dev` runs with: the environment's, with its own defaults where
    the environment is silent (see the constants above), and the demo's module allowed."""
    settings = Settings.from_env(environ).replace(database_url=database_url)
    if "CRONLEDGER_LOOKAHEAD_SECS" not in environ:
        # Rows a moment ahead let the claim loop sleep until exactly when each is due, instead
        # of finding it up to one reconcile tick late.
        settings = settings.replace(lookahead_secs=DEV_LOOKAHEAD_SECS)
    if "CRONLEDGER_HTTP_ALLOW_NETWORKS" not in environ:
        settings = settings.replace(http_allow_networks=DEV_ALLOW_NETWORKS)
    if demo and DEMO_MODULE not in settings.python_targets:
        settings = settings.replace(python_targets=(*settings.python_targets, DEMO_MODULE))
    return settings


def describe_policy(settings: Settings) -> list[str]:
    """What targets may reach beyond themselves, as `cronledger dev` prints it at start."""
    networks = ", ".join(map(str, settings.http_allow_networks)) or "public addresses only"
    if settings.http_allow_networks == DEV_ALLOW_NETWORKS:
        networks += (
            " (loopback: cronledger dev's default; CRONLEDGER_HTTP_ALLOW_NETWORKS replaces it)"
        )
    modules = ", ".join(settings.python_targets) or "none (CRONLEDGER_PYTHON_TARGETS lists modules)"
    return [
        f"http targets may reach non-public addresses in: {networks}",
        f"python targets may call functions in: {modules}",
    ]


def run_dev(database_url: str, host: str, port: int, demo: bool, allow_remote: bool) -> None:
    """`cronledger dev`: migrate, serve the API, run the scheduler until Ctrl-C. The API listens
    beyond this machine only with `allow_remote`, and then says loudly that it does."""
    warning = exposure_warning(host, allow_remote)
    settings = dev_settings(database_url, demo)
    ledger = Ledger.connect(
        database_url,
        statement_timeout_ms=settings.db_statement_timeout_ms,
        socket_timeout_secs=settings.db_socket_timeout_secs,
    )
    ledger.migrate()
    demo_status = ensure_demo_channel(ledger).status if demo else None
    server = _serve(ledger, settings, host, port)
    _arm_first_stop()
    say = line_printer(sys.stdout)
    scheduler = LocalScheduler(
        ledger,
        settings,
        on_settled=console_printer(ledger, say),
        on_event=lambda event: say(event_line(event)),
    )
    shown_url = sa.make_url(database_url).render_as_string(hide_password=True)
    say(
        f"cronledger dev: API on http://{host}:{port}  (database {shown_url})",
        *([warning] if warning else []),
        *_said_at_start(settings, demo_status),
    )
    try:
        # Inside the try: a Ctrl-C sent as this line is read, or as the first attempt runs,
        # must still drain.
        say("Ctrl-C to stop.")
        scheduler.start()
        wait_for_interrupt()
    except KeyboardInterrupt:
        say(
            f"\nstopping: waiting up to {DRAIN_SECS:.0f} s for running attempts "
            "(Ctrl-C again to stop at once)…"
        )
    server.shutdown()
    if not scheduler.shutdown(DRAIN_SECS):
        say("some attempts were still running; their leases will expire and be recovered.")
        # Their threads cannot be stopped, and the interpreter would wait for them at exit.
        _stop_now(0)
    ledger.dispose()
    say("stopped.")


def _serve(ledger: Ledger, settings: Settings, host: str, port: int) -> ThreadingHTTPServer:
    """The API over `ledger`, served on `host:port` on a thread of its own."""
    from cronledger.api import create_app, handle_event  # Powertools: only when serving

    app = create_app(ledger, settings)
    try:
        return serve_api(lambda event, context: handle_event(app, event, context), host, port)
    except OSError as exc:
        raise OSError(
            f"cannot serve the API on {host}:{port} ({exc.strerror}); pass --port"
        ) from exc


def _said_at_start(settings: Settings, demo_status: str | None) -> list[str]:
    """What targets may reach, where events go, and how the demo channel stands."""
    webhook = settings.events_webhook_url
    lines = [
        *describe_policy(settings),
        f"events: printed below{f' and POSTed to {webhook}' if webhook else ''} "
        "(CRONLEDGER_EVENTS_WEBHOOK_URL sends them to a webhook)",
    ]
    if demo_status == CHANNEL_ACTIVE:
        lines.append("demo channel 'demo' fires every 5 seconds; settled occurrences print below.")
    elif demo_status is not None:
        lines.append(
            f"demo channel 'demo' is {demo_status}, as you left it "
            "(`cronledger channels resume demo` runs it again)."
        )
    return lines


def _arm_first_stop() -> None:
    """Make the first Ctrl-C or SIGTERM drain: its handler re-arms both to end the process at
    once before it interrupts the main thread, so no second signal can find the default
    handler and escape as a KeyboardInterrupt that leaves the loops running."""

    def at_once(signum: int, frame: object) -> None:
        _stop_now(130)

    def first(signum: int, frame: object) -> None:
        signal.signal(signal.SIGINT, at_once)
        signal.signal(signal.SIGTERM, at_once)
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, first)
    signal.signal(signal.SIGTERM, first)


def _stop_now(code: int) -> None:
    """End the process now, whatever its threads do (running attempts keep their leases until
    they expire); it exits even if saying so fails (a signal mid-write finds stdout busy)."""
    try:
        print("stopped.", flush=True)
        sys.stderr.flush()
    finally:
        os._exit(code)
