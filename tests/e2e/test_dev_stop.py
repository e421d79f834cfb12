"""Stopping `cronledger dev` with Ctrl-C, as a user does it: a real process, a real SIGINT.

It drains for at most 10 s and then exits, whatever a target is doing (the attempt it leaves
keeps its lease until that expires); a second Ctrl-C exits at once; either way the console
says "stopped".
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cronledger.ledger import CHANNEL_ACTIVE, RUNNING, Ledger
from cronledger.local import DRAIN_SECS
from tests.polling import wait_until

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def database(tmp_path: Path) -> Iterator[tuple[str, Ledger]]:
    url = f"sqlite:///{tmp_path / 'dev.db'}"
    ledger = Ledger.connect(url)
    ledger.migrate()
    yield url, ledger
    ledger.dispose()


def start_dev(url: str) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "CRONLEDGER_PYTHON_TARGETS": "tests.e2e.targets",
        "CRONLEDGER_POLL_INTERVAL_MS": "100",
    }
    return subprocess.Popen(
        [sys.executable, "-m", "cronledger.cli", "dev", "--database-url", url, "--port", _free()],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # the test's own Ctrl-C handling stays out of it
    )


def hanging_channel(ledger: Ledger) -> str:
    return ledger.channels.create_channel(
        "hangs",
        {"schedule": "* * * * * *"},
        {"type": "python", "callable": "tests.e2e.targets:hang"},
        120_000,
        CHANNEL_ACTIVE,
    ).channel_id


def running(ledger: Ledger) -> int:
    return sum(o.status == RUNNING for o in ledger.occurrences.list_occurrences().data)


@pytest.mark.slow
def test_ctrl_c_drains_at_most_ten_seconds_then_exits_leaving_the_lease_to_expire(
    database: tuple[str, Ledger],
) -> None:
    # Given `cronledger dev` running an attempt whose target will not return for minutes
    url, ledger = database
    hanging_channel(ledger)
    dev = start_dev(url)
    try:
        wait_until(lambda: running(ledger) >= 1, timeout=30)

        # When the user presses Ctrl-C once
        pressed = time.monotonic()
        dev.send_signal(signal.SIGINT)
        output, _ = dev.communicate(timeout=DRAIN_SECS + 30)
        took = time.monotonic() - pressed
    finally:
        _kill(dev)

    # Then it waited out the drain but not the target (two minutes), said so, and left the
    # attempt leased
    assert DRAIN_SECS - 1 <= took < 2 * DRAIN_SECS, (took, output)
    assert dev.returncode == 0, output
    assert "waiting up to 10 s" in output
    assert "their leases will expire and be recovered" in output
    assert output.rstrip().endswith("stopped."), output
    assert running(ledger) >= 1, "the abandoned attempt keeps its lease until it expires"


@pytest.mark.slow
def test_a_second_ctrl_c_exits_at_once(database: tuple[str, Ledger]) -> None:
    # Given `cronledger dev` draining after a first Ctrl-C, with a target that will not return
    url, ledger = database
    hanging_channel(ledger)
    dev = start_dev(url)
    try:
        wait_until(lambda: running(ledger) >= 1, timeout=30)
        dev.send_signal(signal.SIGINT)
        # The line is printed after the first Ctrl-C re-armed the handler: the second one
        # below can come at any moment from here, as fast as a machine allows.
        _wait_for_line(dev, "Ctrl-C again to stop at once")

        # When the user presses Ctrl-C again
        pressed = time.monotonic()
        dev.send_signal(signal.SIGINT)
        output, _ = dev.communicate(timeout=DRAIN_SECS + 30)
        took = time.monotonic() - pressed
    finally:
        _kill(dev)

    # Then it exited without waiting out the drain, said so, and claimed nothing meanwhile
    assert took < DRAIN_SECS / 2, (took, output)
    assert dev.returncode == 130, output
    assert output.rstrip().endswith("stopped."), output
    assert "returning it to pending" not in output, output


def test_with_nothing_running_ctrl_c_stops_promptly(database: tuple[str, Ledger]) -> None:
    url, _ = database
    dev = start_dev(url)
    try:
        _wait_for_line(dev, "Ctrl-C to stop.")
        pressed = time.monotonic()
        dev.send_signal(signal.SIGINT)
        output, _ = dev.communicate(timeout=DRAIN_SECS)
        took = time.monotonic() - pressed
    finally:
        _kill(dev)

    assert took < DRAIN_SECS - 1, (took, output)  # nothing to wait for: no drain
    assert dev.returncode == 0, output
    assert output.rstrip().endswith("stopped."), output


def _wait_for_line(dev: subprocess.Popen[str], text: str) -> None:
    assert dev.stdout is not None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        line = dev.stdout.readline()
        if text in line:
            return
        if not line and dev.poll() is not None:
            break
    raise AssertionError(f"cronledger dev never printed {text!r}")


def _kill(dev: subprocess.Popen[str]) -> None:
    if dev.poll() is None:
        dev.kill()
        dev.wait(10)


def _free() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return str(probe.getsockname()[1])
