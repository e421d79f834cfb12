"""Delivering events at least once, each marked delivered only when its destination took it.

The function that made an event hands it to `deliver` right after its commit (`on_events`);
what does not land, `sweep` (from the reconcile pass on AWS, a `Courier` thread locally) takes
from the outbox once its lease runs out. A crash between a send and its mark sends it again
with the same `event_id` and gapless `sequence`, so a receiver orders and deduplicates.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from cronledger import metrics
from cronledger.ledger import DatabaseUnavailable, Event, Ledger
from cronledger.ports import OutboxPort
from cronledger.settings import Settings
from cronledger.targets.policy import TargetPolicy

log = logging.getLogger(__name__)

WEBHOOK_TIMEOUT_SECS = 10.0  # one POST
#: How often the local courier sweeps the outbox when nothing wakes it.
SWEEP_INTERVAL_SECS = 1.0


class Sender(Protocol):
    def send(self, events: Sequence[Event]) -> dict[str, str | None]:
        """Per `event_id`: None when the destination accepted it, or why it did not."""


@dataclass(frozen=True, slots=True)
class Delivery:
    """Events one delivery had accepted, and refused (or not reached)."""

    delivered: int = 0
    failed: int = 0

    def __add__(self, other: Delivery) -> Delivery:
        return Delivery(self.delivered + other.delivered, self.failed + other.failed)


def detail_type(kind: str) -> str:
    """`occurrence.attempt_failed` → "Occurrence Attempt Failed"."""
    return " ".join(word.capitalize() for word in kind.replace(".", "_").split("_"))


def in_sequence(events: Sequence[Event]) -> list[Event]:
    """Events in the order a receiver reads them: by channel, then the channel's sequence."""
    return sorted(events, key=lambda e: (e.channel_id, e.sequence or 0))


def event_json(event: Event) -> str:
    return json.dumps(event.document, separators=(",", ":"))


def deliver(ledger: OutboxPort, sender: Sender, events: Sequence[Event]) -> Delivery:
    """Send `events` and mark the accepted ones delivered; the rest stay for the sweep."""
    if not events:
        return Delivery()
    try:
        answers = sender.send(events)
    except Exception as exc:
        log.warning("sending %d event(s) failed: %s", len(events), exc)
        answers = {e.event_id: f"{type(exc).__name__}: {exc}" for e in events}
    accepted = [e for e in events if e.event_id in answers and answers[e.event_id] is None]
    refused = {i: error or "not answered" for i, error in answers.items() if error is not None}
    refused |= {e.event_id: "not answered" for e in events if e.event_id not in answers}
    ledger.events.mark_delivered(e.event_id for e in accepted)
    if refused:
        ledger.events.mark_undelivered(refused)
    for event in accepted:
        metrics.record_event_delivered(event.kind, event.at)
    if refused:
        metrics.record_event_delivery_failures(len(refused))
    return Delivery(len(accepted), len(refused))


def sweep(ledger: OutboxPort, sender: Sender, *, until: float, batch: int = 100) -> Delivery:
    """Deliver the outbox's events whose lease ran out, a batch at a time, until none is
    left, a batch fails whole, or the monotonic `until` passed."""
    done = Delivery()
    while time.monotonic() < until:
        taken = ledger.events.take_outbox(batch)
        if not taken:
            break
        report = deliver(ledger, sender, taken)
        done += report
        if report.delivered == 0 or len(taken) < batch:
            break
    return done


@dataclass(frozen=True, slots=True)
class WebhookSender:
    """POSTs each event's JSON to one URL, in sequence, under the address rules of `http`
    targets; a 2xx answer is acceptance."""

    url: str
    policy: TargetPolicy
    timeout_secs: float = WEBHOOK_TIMEOUT_SECS

    def send(self, events: Sequence[Event]) -> dict[str, str | None]:
        from cronledger.targets import http

        doc = {"type": "http", "url": self.url}
        answers: dict[str, str | None] = {}
        for event in in_sequence(events):
            body = event_json(event).encode()
            deadline = time.monotonic() + self.timeout_secs
            headers = {"Content-Type": http.JSON}
            outcome = http.post(doc, body, self.timeout_secs, deadline, headers, self.policy)
            answers[event.event_id] = None if outcome.ok else (outcome.error or "refused")
            if not outcome.ok:
                # The receiver is down or refusing: the rest wait for the sweep, in order.
                for rest in events:
                    answers.setdefault(rest.event_id, "not sent: an earlier event was refused")
                break
        return answers


@dataclass(frozen=True, slots=True)
class PrintSender:
    """Events as lines for a person watching `cronledger dev`, once another sender (a
    webhook) accepted them, or as the only destination."""

    write: Callable[[Event], None]
    then: Sender | None = None

    def send(self, events: Sequence[Event]) -> dict[str, str | None]:
        alone: dict[str, str | None] = dict.fromkeys(e.event_id for e in events)
        answers = alone if self.then is None else self.then.send(events)
        for event in events:
            if event.event_id in answers and answers[event.event_id] is None:
                self.write(event)
        return answers


class Courier:
    """Local delivery on a thread of its own: a commit's events are sent at once, and every
    `SWEEP_INTERVAL_SECS` the overdue watch runs and the outbox is swept. The ledger's
    writers only queue, so a receiver that is down never slows an attempt."""

    def __init__(self, ledger: Ledger, sender: Sender):
        self.ledger = ledger
        self.sender = sender
        self._fresh: list[Event] = []
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cronledger-courier", daemon=True)

    def submit(self, events: Sequence[Event]) -> None:
        """Queue events a commit just made (the ledger's `on_events`)."""
        with self._lock:
            self._fresh.extend(events)
        self._wake.set()

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.ident is not None:  # stopped before it started: nothing to wait for
            self._thread.join(timeout)

    def _deliver_fresh(self) -> None:
        with self._lock:
            fresh, self._fresh = self._fresh, []
        deliver(self.ledger, self.sender, fresh)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(SWEEP_INTERVAL_SECS)
            self._wake.clear()
            try:
                self._deliver_fresh()
                # What the watch writes it announces (`on_events`): queued here, sent next.
                self.ledger.events.detect_overdue()
                sweep(self.ledger, self.sender, until=time.monotonic() + SWEEP_INTERVAL_SECS * 5)
            except DatabaseUnavailable as exc:
                log.warning("event delivery paused: %s", exc)
            except Exception:
                log.exception("event delivery failed")
        try:  # what a drained attempt just made; what fails here waits in the outbox
            self._deliver_fresh()
        except Exception as exc:
            log.warning("events left for the next start's sweep: %s", exc)


def local_sender(settings: Settings, show: Callable[[Event], None] | None = None) -> Sender | None:
    """Where events go locally: the webhook, if set, and `show`, if given (alone, printing
    counts as delivery). None: nowhere; they stay listed."""
    url = settings.events_webhook_url
    webhook = WebhookSender(url, TargetPolicy.from_settings(settings)) if url else None
    return webhook if show is None else PrintSender(show, then=webhook)


def event_line(event: Event) -> str:
    """An event as `cronledger dev` prints it: kind, channel, instant, attempt, why."""
    d = event.document
    parts = [f"event {event.kind}", f"channel {d.get('channel_name') or event.channel_id!s}"]
    if d.get("scheduled_for"):
        parts.append(str(d["scheduled_for"]))
    if d.get("attempt") is not None:
        parts.append(f"attempt {d['attempt']}/{d.get('max_attempts')}")
    if d.get("count") is not None:
        parts.append(f"{d['count']} instant(s)")
    line = "  ".join(parts)
    if d.get("error"):
        line += f"\n    {d['error']}"
    return line
