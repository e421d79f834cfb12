"""The one-process local scheduler: `cronledger dev`.

The same services that run as Lambda functions run here on threads: the API resolver behind
a plain HTTP server (each request translated into an API Gateway HTTP API v2 event, so the
resolver cannot tell the difference), the reconcile loop, the claim loop, and executors on a
thread pool. Ctrl-C stops claiming and waits at most `DRAIN_SECS` for in-flight attempts,
then exits whatever a target is doing: the leases of attempts still running are left to
expire, and a peer (or the next run) recovers them as their next attempt (or settles them
abandoned, if that was their last). A second Ctrl-C exits at once.
"""

from __future__ import annotations

import base64
import ipaddress
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from http.server import ThreadingHTTPServer
from typing import Any, TextIO, cast
from urllib.parse import unquote_plus, urlsplit

import sqlalchemy as sa

from cronledger.claim import run_claim_loop
from cronledger.errors import NotFound
from cronledger.execute import AttemptReport, Executor
from cronledger.instants import human_duration
from cronledger.invokers import ThreadPoolInvoker
from cronledger.ledger import CHANNEL_ACTIVE, Channel, Event, Ledger, Occurrence
from cronledger.local_http import READ_TIMEOUT_SECS, JsonRequestHandler, PeerSafeServer, error_body
from cronledger.outbox import Courier, event_line, local_sender
from cronledger.pacing import wait_for_interrupt
from cronledger.reconcile import PassReport, run_reconcile_loop
from cronledger.settings import Settings

log = logging.getLogger(__name__)

DEMO_CHANNEL = {
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
#: Attempts that ended writing nothing, which the console still shows (SPEC §5: they say so).
STOPPED_OUTCOMES = ("stopped", "superseded")
#: The local pool's size: claims never exceed what can start at once.
MAX_LOCAL_WORKERS = 16
#: What `--demo` lets python targets call: the demo's own module, nothing else.
DEMO_MODULE = "cronledger.demo"
#: `cronledger dev` lets http targets reach this machine (a service under development)
#: unless CRONLEDGER_HTTP_ALLOW_NETWORKS says otherwise, and says so when it starts.
DEV_ALLOW_NETWORKS = (ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128"))


def ensure_demo_channel(ledger: Ledger) -> Channel:
    """Create the demo channel, active, if no channel has its name; answer it as it is. Once
    it exists it is the operator's: a demo they paused or archived stays so on every restart
    (the caller says how to resume it) rather than firing again behind their back."""
    try:
        return ledger.get_channel_by_name(DEMO_CHANNEL["name"])  # type: ignore[arg-type]
    except NotFound:
        return ledger.create_channel(
            name=DEMO_CHANNEL["name"],  # type: ignore[arg-type]
            transport_config=DEMO_CHANNEL["transport_config"],  # type: ignore[arg-type]
            target=DEMO_CHANNEL["target"],  # type: ignore[arg-type]
            timeout_ms=DEMO_CHANNEL["timeout_ms"],  # type: ignore[arg-type]
            status=CHANNEL_ACTIVE,
        )


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

    def _room(self) -> int:
        # A claim's lease starts ticking at once: claim no more than there are free workers.
        return self.invoker.room

    def start(self) -> None:
        forever = float("inf")
        loops: list[tuple[str, Callable[[], object]]] = [
            (
                "reconcile",
                lambda: run_reconcile_loop(
                    self.ledger, self.settings, forever, self.stop, on_pass=self._reconciled
                ),
            ),
            (
                "claim",
                lambda: run_claim_loop(
                    self.ledger,
                    self.settings,
                    self.invoker,
                    forever,
                    self.stop,
                    room=self._room,
                    wake=self._wake,
                ),
            ),
        ]
        for name, loop in loops:
            thread = threading.Thread(target=loop, name=f"cronledger-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)
        if self.courier is not None:
            self.ledger.on_events = self.courier.submit
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
            if self.ledger.on_events == self.courier.submit:
                self.ledger.on_events = None
            self.courier.stop(max(0.5, deadline - time.monotonic()))
        return drained


def v2_event(method: str, target: str, headers: dict[str, str], body: bytes) -> dict[str, Any]:
    """An API Gateway HTTP API (payload v2) event for one plain HTTP request."""
    parts = urlsplit(target)
    query: dict[str, str] = {}
    for pair in filter(None, parts.query.split("&")):
        key, _, value = pair.partition("=")
        key, value = unquote_plus(key), unquote_plus(value)
        query[key] = f"{query[key]},{value}" if key in query else value
    try:  # text as text, as API Gateway passes it; anything that is not UTF-8 as base64
        text, is_text = body.decode("utf-8"), True
    except UnicodeDecodeError:
        text, is_text = "", False
    return {
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": parts.path or "/",
        "rawQueryString": parts.query,
        "headers": {k.lower(): v for k, v in headers.items()},
        "queryStringParameters": query or None,
        "requestContext": {
            "http": {
                "method": method,
                "path": parts.path or "/",
                "protocol": "HTTP/1.1",
                "sourceIp": "127.0.0.1",
                "userAgent": headers.get("user-agent", ""),
            },
            "requestId": f"local-{time.time_ns()}",
            "routeKey": "$default",
            "stage": "$default",
            "timeEpoch": int(time.time() * 1000),
        },
        "body": text if is_text else base64.b64encode(body).decode(),
        "isBase64Encoded": not is_text,
    }


class _LocalContext:
    """The few attributes of a Lambda context anything may read locally."""

    function_name = "cronledger-local"
    memory_limit_in_mb = 0
    invoked_function_arn = "arn:aws:lambda:local:000000000000:function:cronledger-local"
    aws_request_id = "local"

    @staticmethod
    def get_remaining_time_in_millis() -> int:
        return 900_000


def serve_api(
    answer: Callable[[dict[str, Any], Any], dict[str, Any]],
    host: str,
    port: int,
    read_timeout_secs: float = READ_TIMEOUT_SECS,
) -> ThreadingHTTPServer:
    """An HTTP server on `host:port` answering every request through `answer(event, context)`,
    except those a web page on another site may have sent (`foreign_request`): 403. A client
    that misbehaves or goes away fails only its own request (`cronledger.local_http`)."""
    from cronledger.api.errors import forbidden  # Powertools: only when serving
    from cronledger.api.request_rules import MAX_BODY_BYTES

    class Handler(JsonRequestHandler):
        timeout = read_timeout_secs
        max_body = MAX_BODY_BYTES

        def handle_method(self) -> None:
            # Every method goes to the resolver, which answers one no route takes with a 405
            # naming those the path does.
            body = self.read_body()
            if body is None:
                return
            served_port = cast(ThreadingHTTPServer, self.server).server_port
            refusal = foreign_request(
                self.headers.get("host"), self.headers.get("origin"), host, served_port
            )
            if refusal is not None:
                self._send(forbidden(refusal))
                return
            event = v2_event(self.command, self.path, dict(self.headers.items()), body)
            try:
                response = answer(event, _LocalContext())
            except Exception:  # the resolver maps errors; this is the last line of defence
                log.exception("unhandled error answering %s %s", self.command, self.path)
                response = {
                    "statusCode": 500,
                    "headers": {"content-type": "application/json"},
                    "body": error_body("internal", "internal error").decode(),
                }
            self._send(response)

        def _send(self, response: dict[str, Any]) -> None:
            raw = response.get("body") or ""
            # "replace": a lone surrogate in an answer must not cost the client its connection.
            payload = (
                base64.b64decode(raw)
                if response.get("isBase64Encoded")
                else raw.encode("utf-8", "replace")
            )
            headers = {name: str(value) for name, value in (response.get("headers") or {}).items()}
            self.answer(int(response.get("statusCode", 200)), headers, payload)

    server = PeerSafeServer((host, port), Handler)
    threading.Thread(target=server.serve_forever, name="cronledger-http", daemon=True).start()
    return server


def foreign_request(
    host_header: str | None, origin: str | None, served_host: str, served_port: int
) -> str | None:
    """Why a request may come from a web page of another site, or None.

    The local API has no authentication: what keeps a web page the user happens to visit from
    driving it is that the browser names the page's site in `Origin` (so only this server's
    own pages, such as /swagger, pass), and that `Host` names this server by address, as
    `localhost` or as the name it was started with (so a DNS name rebound to 127.0.0.1 by an
    attacker does not pass). Clients that are not browsers send no `Origin`."""
    if not host_header:
        return "a request must say which host it is for (Host)"
    try:
        parts = urlsplit(f"//{host_header}")
        name = (parts.hostname or "").rstrip(".")
        port = parts.port or 80
    except ValueError:  # an unclosed `[`, a bracketed name, a port that is no number
        name, port = "", -1
    if port != served_port or not (name in ("localhost", served_host.lower()) or _is_address(name)):
        return (
            f"Host {host_header!r} does not name this server; use "
            f"http://127.0.0.1:{served_port} or http://localhost:{served_port}"
        )
    if origin is not None and origin.lower() != f"http://{host_header.lower()}":
        return (
            f"requests from the web page of another site ({origin}) are refused: the local API "
            "has no authentication"
        )
    return None


def _is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def is_loopback(host: str) -> bool:
    """Whether `host` (what `--host` names) is only reachable from this machine."""
    return host.lower() == "localhost" or (
        _is_address(host) and ipaddress.ip_address(host).is_loopback
    )


def exposure_warning(host: str, allow_remote: bool) -> str | None:
    """What `cronledger dev` must say before listening on `host` (None: nothing, it is this
    machine's); `ValueError` when `host` is not loopback and `allow_remote` was not given."""
    if is_loopback(host):
        return None
    if not allow_remote:
        raise ValueError(
            f"refusing to serve the API on {host}: it has no authentication, so anyone who can "
            "reach it can run what your targets allow; pass --allow-remote to do it anyway"
        )
    return (
        f"WARNING: the API listens on {host}, beyond this machine, with no authentication: "
        "anyone who can reach it can create channels and run what your targets allow."
    )


def console_printer(ledger: Ledger, out: TextIO = sys.stdout) -> Callable[[AttemptReport], None]:
    """Print each attempt that ended as one line, in columns that line up whatever the trigger:
    the instant (to the second), channel, trigger, what the attempt came to (`stopped` and
    `superseded` too: they wrote nothing, and say so), the attempt of those allowed, lag (started
    - due) and duration as a person reads them ("3.2 s", "2 d"), the id; then why, indented."""
    lock = threading.Lock()

    def show(report: AttemptReport) -> None:
        stopped = report.outcome in STOPPED_OUTCOMES
        if report.status is None and not stopped:
            return
        try:
            row: Occurrence | None = ledger.get_occurrence(report.occurrence_id)
        except Exception:
            row = None  # gone meanwhile (a purge): the report alone still says what happened
        text = _console_line(report, row, stopped)
        with lock:
            print(text, file=out, flush=True)

    return show


def _console_line(report: AttemptReport, row: Occurrence | None, stopped: bool) -> str:
    attempt = report.attempt if report.attempt is not None else row.attempt if row else 0
    if row is None:
        instant, channel, trigger, allowed = "-", "-", "-", "?"
    else:
        instant = f"{row.scheduled_for:%Y-%m-%dT%H:%M:%SZ}"
        channel, trigger, allowed = row.channel_name, row.trigger, str(row.allowed_attempts)
    status = report.outcome if stopped else report.status or "-"
    if report.retry_in is not None:
        status = "failed"  # written back to pending, for its next attempt
    lag = took = "-"
    if row is not None and row.started_at is not None and not stopped:
        lag = human_duration((row.started_at - row.due_at).total_seconds() * 1000)
        if row.completed_at is not None:
            took = human_duration((row.completed_at - row.started_at).total_seconds() * 1000)
    line = (
        f"{instant:<20}  {_fit(channel, 16):<16}  {trigger:<8}  {status:<17}  "
        f"attempt {f'{attempt}/{allowed}':<5}  lag {lag:>7}  took {took:>7}  {report.occurrence_id}"
    )
    why = report.error if stopped else (row.error_message if row is not None else report.error)
    if report.retry_in is not None:
        why = f"{why or 'failed'} (next attempt in {human_duration(report.retry_in * 1000)})"
    if why and status != "completed":
        line += f"\n    {why}"
    return line


def _fit(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def dev_settings(
    database_url: str, demo: bool, environ: Mapping[str, str] = os.environ
) -> Settings:
    """The settings `cronledger dev` runs with: the environment's, with its own defaults where
    the environment is silent (see the constants above), and the demo's module allowed."""
    settings = replace(Settings.from_env(environ), database_url=database_url)
    if "CRONLEDGER_LOOKAHEAD_SECS" not in environ:
        # Rows a moment ahead let the claim loop sleep until exactly when each is due, instead
        # of finding it up to one reconcile tick late.
        settings = replace(settings, lookahead_secs=DEV_LOOKAHEAD_SECS)
    if "CRONLEDGER_HTTP_ALLOW_NETWORKS" not in environ:
        settings = replace(settings, http_allow_networks=DEV_ALLOW_NETWORKS)
    if demo and DEMO_MODULE not in settings.python_targets:
        settings = replace(settings, python_targets=(*settings.python_targets, DEMO_MODULE))
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


def run_dev(
    database_url: str,
    host: str,
    port: int,
    demo: bool,
    out: TextIO = sys.stdout,
    allow_remote: bool = False,
) -> int:
    """`cronledger dev`: migrate, serve the API, run the scheduler until Ctrl-C. The API listens
    beyond this machine only with `allow_remote`, and then says loudly that it does."""
    warning = exposure_warning(host, allow_remote)
    from cronledger.api import create_app, handle_event  # Powertools: only when serving

    settings = dev_settings(database_url, demo)
    ledger = Ledger.connect(
        database_url,
        statement_timeout_ms=settings.db_statement_timeout_ms,
        socket_timeout_secs=settings.db_socket_timeout_secs,
    )
    ledger.migrate()
    demo_status = ensure_demo_channel(ledger).status if demo else None
    app = create_app(ledger, settings)
    try:
        server = serve_api(lambda event, context: handle_event(app, event, context), host, port)
    except OSError as exc:
        raise OSError(
            f"cannot serve the API on {host}:{port} ({exc.strerror}); pass --port"
        ) from exc
    # The first Ctrl-C (or SIGTERM, from a process manager or `kill`) drains; any after it
    # ends the process on the spot.
    first = _first_stop(out)
    signal.signal(signal.SIGINT, first)
    signal.signal(signal.SIGTERM, first)
    lock = threading.Lock()

    def show_event(event: Event) -> None:
        with lock:
            print(event_line(event), file=out, flush=True)

    scheduler = LocalScheduler(
        ledger, settings, on_settled=console_printer(ledger, out), on_event=show_event
    )
    shown_url = sa.make_url(database_url).render_as_string(hide_password=True)
    print(f"cronledger dev: API on http://{host}:{port}  (database {shown_url})", file=out)
    if warning:
        print(warning, file=out)
    for line in describe_policy(settings):
        print(line, file=out)
    webhook = settings.events_webhook_url
    print(
        f"events: printed below{f' and POSTed to {webhook}' if webhook else ''} "
        "(CRONLEDGER_EVENTS_WEBHOOK_URL sends them to a webhook)",
        file=out,
    )
    if demo_status == CHANNEL_ACTIVE:
        print(
            "demo channel 'demo' fires every 5 seconds; settled occurrences print below.", file=out
        )
    elif demo:
        print(
            f"demo channel 'demo' is {demo_status}, as you left it "
            "(`cronledger channels resume demo` runs it again).",
            file=out,
        )
    try:
        # Inside the try: a Ctrl-C sent the moment this line is read, or as soon as the first
        # attempt runs, must still drain.
        print("Ctrl-C to stop.", file=out, flush=True)
        scheduler.start()
        wait_for_interrupt()
    except KeyboardInterrupt:
        print(
            f"\nstopping: waiting up to {DRAIN_SECS:.0f} s for running attempts "
            "(Ctrl-C again to stop at once)…",
            file=out,
            flush=True,
        )
    server.shutdown()
    drained = scheduler.shutdown(DRAIN_SECS)
    if not drained:
        print(
            "some attempts were still running; their leases will expire and be recovered.", file=out
        )
        # Their threads cannot be stopped, and the interpreter would wait for them at exit.
        _stop_now(out, 0)
    ledger.dispose()
    print("stopped.", file=out, flush=True)
    return 0


def _first_stop(out: TextIO) -> Callable[[int, object], None]:
    """The handler of the first Ctrl-C or SIGTERM: it makes any later one end the process at
    once, before it interrupts the main thread to drain. Re-armed here, in the handler, there
    is no moment at which a second signal finds the default handler and escapes as an
    uncaught KeyboardInterrupt: that left the interpreter waiting at exit for a target that
    would not return, while the claim loop, never told to stop, claimed what it could no
    longer dispatch, over and over."""

    def at_once(signum: int, frame: object) -> None:
        _stop_now(out, 130)

    def first(signum: int, frame: object) -> None:
        signal.signal(signal.SIGINT, at_once)
        signal.signal(signal.SIGTERM, at_once)
        raise KeyboardInterrupt

    return first


def _stop_now(out: TextIO, code: int) -> None:
    """End the process now, whatever its threads are doing (the attempts left running keep
    their leases until those expire). It exits even if saying so fails (a signal that came
    while this thread was writing to `out` finds the stream busy)."""
    try:
        print("stopped.", file=out, flush=True)
        sys.stderr.flush()
    finally:
        os._exit(code)
