"""`cronledger dev` and `cronledger console` as real processes, outliving every peer that goes
away: the database cutting their connections, an HTTP target hanging up mid-request, clients
giving up before their answer or sending what is not a request.

Invariant: whichever peer goes away, its exchange fails as an ordinary error (the attempt
fails, the request is answered or dropped with one log line), and the process goes on
serving: it is still running and answers `GET /health` afterwards.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import sqlalchemy as sa

from cronledger.ledger import CHANNEL_ACTIVE, COMPLETED, FAILED, Ledger, OccurrenceFilter
from tests.conftest import PG_SERVER_URL
from tests.pg import scratch_database
from tests.polling import wait_until
from tests.raw_http import HangUp, give_up, request

REPO = Path(__file__).resolve().parents[2]
CHANNELS = "/api/v1/admin/channels"
#: The test's own connections to the dev server's database, which no cut may touch.
TEST_CONNECTIONS = "cronledger-test"


@dataclass
class Served:
    """A `cronledger dev` or `cronledger console` process, its port and what it printed."""

    process: subprocess.Popen[bytes]
    port: int
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def health(self) -> int:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            connection.request("GET", "/health")
            response = connection.getresponse()
            response.read()
            return response.status
        finally:
            connection.close()

    def answers_health(self) -> bool:
        try:
            return self.health() == 200
        except OSError:
            return False

    def alive(self) -> bool:
        return self.process.poll() is None


def _start(command: list[str], port: int, log: Path, ready: str) -> Served:
    env = {
        **os.environ,
        "CRONLEDGER_PYTHON_TARGETS": "tests.e2e.targets",
        "CRONLEDGER_POLL_INTERVAL_MS": "100",
    }
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "cronledger.cli", *command, "--port", str(port)],
            cwd=REPO,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    served = Served(process, port, log)
    try:
        wait_until(lambda: ready in served.output() or not served.alive(), timeout=60)
        assert served.alive(), served.output()
    except BaseException:
        _stop(served)
        raise
    return served


def _stop(served: Served) -> None:
    if served.alive():
        served.process.kill()
    served.process.wait(timeout=30)


@pytest.fixture
def start(tmp_path: Path) -> Iterator[object]:
    """`start(command…)`: a `cronledger` command serving on a free port, stopped at the end."""
    started: list[Served] = []

    def run(*command: str, ready: str = "Ctrl-C to stop.") -> Served:
        served = _start(list(command), _free_port(), tmp_path / f"{len(started)}.log", ready)
        started.append(served)
        return served

    yield run
    for served in started:
        _stop(served)


@pytest.fixture
def sqlite_url(tmp_path: Path) -> Iterator[tuple[str, Ledger]]:
    url = f"sqlite:///{tmp_path / 'dev.db'}"
    ledger = Ledger.connect(url)
    ledger.migrate()
    yield url, ledger
    ledger.dispose()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _still_serving(served: Served) -> None:
    wait_until(served.answers_health, timeout=30)
    assert served.alive(), served.output()
    assert "Traceback" not in served.output(), served.output()


def test_a_broken_pipe_is_an_error_to_dev_and_console_never_their_end(
    start: object, sqlite_url: tuple[str, Ledger]
) -> None:
    # Given both serving (the console in front of the dev server's API)
    url, _ = sqlite_url
    dev = start("dev", "--database-url", url)  # type: ignore[operator]
    console = start(  # type: ignore[operator]
        "console", "--api-url", f"http://127.0.0.1:{dev.port}", ready="cronledger console:"
    )

    # When each gets the signal a write to a broken pipe or socket raises
    for served in (dev, console):
        os.kill(served.process.pid, signal.SIGPIPE)

    # Then it is no reason to stop: both still run and answer
    _still_serving(dev)
    _still_serving(console)


# --- the database --------------------------------------------------------------------------


@pytest.mark.slow
def test_dev_and_a_console_in_front_of_it_outlive_the_database_cutting_every_connection(
    start: object,
) -> None:
    with scratch_database(PG_SERVER_URL, "peers") as url:
        # Given `cronledger dev` on PostgreSQL running a channel every second, and
        # `cronledger console` in front of its API
        own = {"connect_args": {"application_name": TEST_CONNECTIONS}}
        ledger = Ledger.connect(url, **own)
        ledger.migrate()
        ledger.channels.create_channel(
            "every-second",
            {"schedule": "* * * * * *"},
            {"type": "python", "callable": "tests.e2e.targets:record"},
            5000,
            CHANNEL_ACTIVE,
        )
        dev = start("dev", "--database-url", url)  # type: ignore[operator]
        console = start(  # type: ignore[operator]
            "console", "--api-url", f"http://127.0.0.1:{dev.port}", ready="cronledger console:"
        )
        wait_until(lambda: _completed(ledger) >= 1, timeout=30)

        # When the database terminates every backend of the dev server, three times, while
        # its loops, executors and API use them
        admin = sa.create_engine(sa.make_url(url), **own)
        try:
            for _ in range(3):
                with admin.connect() as conn:
                    cut = conn.execute(
                        sa.text(
                            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                            "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                            "AND application_name <> :own"
                        ),
                        {"own": TEST_CONNECTIONS},
                    ).scalar_one()
                assert cut >= 1
                time.sleep(0.5)
                assert dev.alive(), (dev.process.returncode, dev.output())
                assert {dev.health() for _ in range(3)} <= {200, 503}
        finally:
            admin.dispose()
        after_cuts = _completed(ledger)

        # Then both still run and answer, and the scheduler goes on completing occurrences
        _still_serving(dev)
        _still_serving(console)
        wait_until(lambda: _completed(ledger) > after_cuts + 1, timeout=30)
        ledger.dispose()


def _completed(ledger: Ledger) -> int:
    return ledger.occurrences.list_occurrences(OccurrenceFilter(status=COMPLETED)).total


# --- an HTTP target ------------------------------------------------------------------------


@pytest.mark.slow
def test_dev_outlives_an_http_target_that_hangs_up_mid_request(
    start: object, sqlite_url: tuple[str, Ledger]
) -> None:
    url, ledger = sqlite_url
    with HangUp() as target:
        # Given a channel whose target hangs up once the request starts, with a large payload
        # (the more there is to send, the likelier the hang-up meets the writer)
        channel = ledger.channels.create_channel(
            "hangs-up",
            {"schedule": "0 0 0 1 1 *", "payload": {"blob": "x" * 200_000},
             "retry": {"max_attempts": 1}},
            {"type": "http", "url": f"http://127.0.0.1:{target.port}/hook"},
            5000,
            CHANNEL_ACTIVE,
        )  # fmt: skip
        dev = start("dev", "--database-url", url)  # type: ignore[operator]

        # When it is triggered three times
        for _ in range(3):
            connection = http.client.HTTPConnection("127.0.0.1", dev.port, timeout=10)
            connection.request(
                "POST", f"{CHANNELS}/{channel.channel_id}/trigger", b"{}",
                {"Content-Type": "application/json"},
            )  # fmt: skip
            response = connection.getresponse()
            response.read()
            assert response.status == 202
            connection.close()
            time.sleep(0.01)  # a distinct instant for each manual run
        wait_until(lambda: _failed(ledger) == 3, timeout=30)

    # Then each attempt failed naming the endpoint, and the server still runs and answers
    assert target.hung_up >= 3
    errors = {o.error_message for o in ledger.occurrences.list_occurrences().data}
    assert all(
        e and e.startswith(f"could not reach http://127.0.0.1:{target.port}/hook") for e in errors
    ), errors
    _still_serving(dev)


def _failed(ledger: Ledger) -> int:
    return ledger.occurrences.list_occurrences(OccurrenceFilter(status=FAILED)).total


# --- clients -------------------------------------------------------------------------------


def _many_channels(ledger: Ledger) -> None:
    """Enough channels that listing them is an answer larger than a socket's buffers."""
    document = {"schedule": "0 0 0 1 1 *", "payload": {"blob": "x" * 2000}}
    target = {"type": "python", "callable": "tests.e2e.targets:record"}
    for number in range(300):
        ledger.channels.create_channel(f"channel-{number:03}", document, target, 5000)


def _misbehave(port: int) -> None:
    """Clients that give up before their answer, stop halfway through a body, or send a
    `Content-Length` that is no size, ten of each."""
    big = request("GET", f"{CHANNELS}?limit=1000", port)
    half = request("POST", CHANNELS, port, b'{"na', Content_Type="application/json",
                   Content_Length="100")  # fmt: skip
    for _ in range(10):
        for abort in (False, True):
            give_up(port, big, abort=abort)
            give_up(port, big, after_secs=0.05, abort=abort)
            give_up(port, half, abort=abort)
            for length in ("-1", "abc", str(1 << 40)):
                give_up(port, request("POST", CHANNELS, port, Content_Length=length), abort=abort)


def test_dev_outlives_clients_that_give_up_or_send_broken_requests(
    start: object, sqlite_url: tuple[str, Ledger]
) -> None:
    url, ledger = sqlite_url
    _many_channels(ledger)
    dev = start("dev", "--database-url", url)  # type: ignore[operator]

    _misbehave(dev.port)

    _still_serving(dev)


def test_console_outlives_clients_that_give_up_or_send_broken_requests(
    start: object, sqlite_url: tuple[str, Ledger]
) -> None:
    url, ledger = sqlite_url
    _many_channels(ledger)
    dev = start("dev", "--database-url", url)  # type: ignore[operator]
    console = start(  # type: ignore[operator]
        "console", "--api-url", f"http://127.0.0.1:{dev.port}", ready="cronledger console:"
    )

    _misbehave(console.port)

    _still_serving(console)
    _still_serving(dev)


def test_console_outlives_an_api_that_hangs_up_mid_request(start: object) -> None:
    with HangUp() as api:
        # Given the console in front of an "API" that hangs up on every request
        console = start(  # type: ignore[operator]
            "console", "--api-url", f"http://127.0.0.1:{api.port}", ready="cronledger console:"
        )

        # When a large body is passed on to it, three times
        body = json.dumps({"name": "x", "payload": "x" * 500_000}).encode()
        answers = []
        for _ in range(3):
            connection = http.client.HTTPConnection("127.0.0.1", console.port, timeout=10)
            connection.request("POST", CHANNELS, body, {"Content-Type": "application/json"})
            response = connection.getresponse()
            answers.append((response.status, json.loads(response.read())["error"]["code"]))
            connection.close()

        # Then each is a 502 in the error shape, and the console still runs and serves its page
        assert answers == [(502, "refused")] * 3
        assert console.alive(), console.output()
        page = http.client.HTTPConnection("127.0.0.1", console.port, timeout=10)
        page.request("GET", "/console")
        assert page.getresponse().status == 200
        page.close()
        assert "Traceback" not in console.output(), console.output()
