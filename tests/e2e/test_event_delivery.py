"""Events reach their webhook at least once, none lost, each channel's sequence without gaps:
through a receiver that is down for a while, a scheduler killed before it could deliver, and
two schedulers on one database. Time is real: the receiver is down for 30 s."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cronledger.ledger import CHANNEL_ACTIVE, CHANNEL_PAUSED, Event, EventFilter, Ledger
from cronledger.local import DEV_ALLOW_NETWORKS, LocalScheduler
from tests.conftest import PG_SERVER_URL
from tests.e2e.receiver import Receiver
from tests.e2e.test_scheduler import FAST
from tests.pg import scratch_database
from tests.polling import wait_until

DOWN_SECS = 30
FAILING = {"schedule": "* * * * * *", "retry": {"max_attempts": 1}, "alerts": {"on": ["failed"]}}


def delivered_kinds(ledger: Ledger) -> dict[str, Event]:
    """The events of the ledger that are to be delivered, by id."""
    page = ledger.events.list_events(EventFilter(limit=1000))
    return {e.event_id: e for e in page.data if e.deliver}


def assert_every_event_arrived(ledger: Ledger, receiver: Receiver) -> int:
    expected = delivered_kinds(ledger)
    got = receiver.events()
    assert expected, "the failing channel made events"
    assert set(expected) <= set(got), f"missing: {sorted(set(expected) - set(got))[:5]}"
    for channel, numbers in receiver.sequences().items():
        assert numbers == list(range(1, len(numbers) + 1)), f"a gap in {channel}'s sequence"
    for event_id, event in expected.items():
        assert got[event_id]["kind"] == event.kind
        assert got[event_id]["sequence"] == event.sequence
    return len(expected)


def dead_url() -> str:
    """An http URL on loopback where nothing listens: every request to it fails."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}/report"


@pytest.mark.slow
def test_a_receiver_down_for_30_seconds_loses_nothing_and_sees_no_gap(
    sqlite_ledger: Ledger,
) -> None:
    # Given a channel failing every second and a webhook receiver that is down
    receiver = Receiver()
    settings = FAST.replace(events_webhook_url=receiver.url, http_allow_networks=DEV_ALLOW_NETWORKS)
    channel = sqlite_ledger.channels.create_channel(
        "nightly-report",
        FAILING,
        {"type": "python", "callable": "tests.e2e.targets:fail"},
        5000,
        CHANNEL_ACTIVE,
    )
    scheduler = LocalScheduler(sqlite_ledger, settings)
    scheduler.start()
    try:
        # When it runs for 30 s with nowhere to deliver, then the receiver comes up
        time.sleep(DOWN_SECS)
        undelivered = sqlite_ledger.events.outbox().undelivered
        sqlite_ledger.channels.set_channel_status(channel.channel_id, CHANNEL_PAUSED)
        receiver.up()
        wait_until(lambda: sqlite_ledger.events.outbox().undelivered == 0, timeout=90, every=0.5)
    finally:
        scheduler.shutdown(5)
        receiver.down()
    # Then every event arrived, in a gapless sequence
    assert undelivered >= DOWN_SECS // 2
    assert assert_every_event_arrived(sqlite_ledger, receiver) >= undelivered


def start_dev(database_url: str, webhook: str) -> subprocess.Popen[str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    environ = {k: v for k, v in os.environ.items() if not k.startswith("CRONLEDGER_")}
    environ["CRONLEDGER_EVENTS_WEBHOOK_URL"] = webhook
    process = subprocess.Popen(
        [sys.executable, "-m", "cronledger.cli", "dev", "--port", str(port),
         "--database-url", database_url],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=environ,
    )  # fmt: skip
    assert process.stdout is not None
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(process.stdout), daemon=True).start()  # type: ignore[arg-type]
    process.lines = lines  # type: ignore[attr-defined]
    return process


def stop(process: subprocess.Popen[str]) -> str:
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return "".join(process.lines)  # type: ignore[attr-defined]


@pytest.fixture
def failing_channel_ledger(tmp_path: Path) -> Iterator[tuple[Ledger, str]]:
    url = f"sqlite:///{tmp_path / 'events.db'}"
    ledger = Ledger.connect(url)
    ledger.migrate()
    ledger.channels.create_channel(
        "nightly-report", FAILING, {"type": "http", "url": dead_url()}, 2000, CHANNEL_ACTIVE
    )
    yield ledger, url
    ledger.dispose()


@pytest.mark.slow
def test_an_event_made_before_a_kill_9_arrives_after_the_restart(
    failing_channel_ledger: tuple[Ledger, str],
) -> None:
    ledger, url = failing_channel_ledger
    receiver = Receiver()
    # Given cronledger dev failing a channel while its webhook is down
    first = start_dev(url, receiver.url)
    try:
        wait_until(lambda: len(delivered_kinds(ledger)) >= 2, timeout=60, every=0.2)
        wait_until(
            lambda: all(e.send_attempts or e.last_error for e in delivered_kinds(ledger).values()),
            timeout=30,
            every=0.2,
        )
    finally:
        # When it is killed before it could deliver them
        first.kill()
        first.wait()
    made = delivered_kinds(ledger)
    assert made and not receiver.events()
    # and started again once the receiver is up
    receiver.up()
    second = start_dev(url, receiver.url)
    try:
        # Then the events made before the kill arrive
        wait_until(lambda: set(made) <= set(receiver.events()), timeout=90, every=0.5)
    finally:
        output = stop(second)
        receiver.down()
    assert "event occurrence.failed" in output
    for event_id, event in made.items():
        assert receiver.events()[event_id]["sequence"] == event.sequence


@pytest.mark.slow
def test_two_dev_schedulers_on_one_postgresql_deliver_each_event_at_least_once() -> None:
    receiver = Receiver().up()
    with scratch_database(PG_SERVER_URL, "two_devs") as url:
        ledger = Ledger.connect(url)
        ledger.migrate()
        channel = ledger.channels.create_channel(
            "nightly-report", FAILING, {"type": "http", "url": dead_url()}, 2000, CHANNEL_ACTIVE
        )
        # Given two schedulers on one database, one channel failing every second
        devs = [start_dev(url, receiver.url), start_dev(url, receiver.url)]
        try:
            wait_until(lambda: len(delivered_kinds(ledger)) >= 8, timeout=60, every=0.2)
            ledger.channels.set_channel_status(channel.channel_id, CHANNEL_PAUSED)
            # When both have delivered what there is
            wait_until(lambda: ledger.events.outbox().undelivered == 0, timeout=90, every=0.5)
            wait_until(lambda: set(delivered_kinds(ledger)) <= set(receiver.events()), 30)
        finally:
            outputs = [stop(dev) for dev in devs]
            receiver.down()
        # Then each arrived at least once, a receiver deduplicates by event_id, and the
        # channel's sequence has no gap
        count = assert_every_event_arrived(ledger, receiver)
        assert count >= 8
        assert all("cronledger dev: API on" in output for output in outputs)
        ledger.dispose()
