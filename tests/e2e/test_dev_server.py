"""The local API over real HTTP (`cronledger dev`'s server): a web page on another site cannot
drive it, bad text never costs a client its connection, a request that is not what it says is
a JSON 4xx and the server serves on, and `cronledger dev` starts only on loopback unless told
otherwise, printing what it allows and no password."""

from __future__ import annotations

import http.client
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from cronledger.api import create_app, handle_event
from cronledger.api.request_rules import MAX_BODY_BYTES
from cronledger.cli import main
from cronledger.ledger import Ledger
from cronledger.local import describe_policy, dev_settings
from cronledger.local_gateway import exposure_warning, serve_api
from tests.api.helpers import CHANNELS, SETTINGS, channel_document
from tests.polling import wait_until
from tests.raw_http import exchange, give_up, request


@pytest.fixture
def served(sqlite_ledger: Ledger) -> Iterator[int]:
    """The API on 127.0.0.1 behind the local server; yields its port."""
    app = create_app(sqlite_ledger, SETTINGS)
    server = serve_api(lambda event, context: handle_event(app, event, context), "127.0.0.1", 0)
    try:
        yield server.server_port
    finally:
        server.shutdown()
        server.server_close()


def send(
    port: int, method: str, path: str, body: bytes | None = None, **headers: str
) -> tuple[int, dict[str, str], Any]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        names = {k.replace("_", "-"): v for k, v in headers.items()}
        connection.request(method, path, body=body, headers=names)
        response = connection.getresponse()
        raw = response.read()
        return response.status, dict(response.getheaders()), json.loads(raw) if raw else None
    finally:
        connection.close()


def test_a_cross_site_post_without_a_content_type_creates_nothing(
    served: int, sqlite_ledger: Ledger
) -> None:
    # Given a page on another site posting a channel the way a browser does without asking
    body = json.dumps(channel_document()).encode()

    status, _, answer = send(
        served, "POST", CHANNELS, body, Host=f"127.0.0.1:{served}", Origin="http://evil.example"
    )

    assert status == 403
    assert answer["error"] == {
        "code": "forbidden",
        "message": "requests from the web page of another site (http://evil.example) are "
        "refused: the local API has no authentication",
        "details": [],
    }
    assert sqlite_ledger.channels.list_channels().total == 0


def test_even_without_an_origin_a_body_that_is_not_json_is_refused(
    served: int, sqlite_ledger: Ledger
) -> None:
    body = json.dumps(channel_document()).encode()

    status, _, answer = send(served, "POST", CHANNELS, body, Content_Type="text/plain")

    assert (status, answer["error"]["code"]) == (415, "unsupported_media_type")
    assert sqlite_ledger.channels.list_channels().total == 0


@pytest.mark.parametrize(
    "host",
    [
        "evil.example:{port}",
        "rebound.attacker.test:{port}",
        "127.0.0.1:1",
        "localhost",
        # Hosts urlsplit cannot read (an unclosed bracket, a bracketed name): refused, not a
        # dropped connection with a traceback.
        "[::1",
        "[evil.example]:{port}",
    ],
)
def test_a_host_that_does_not_name_this_server_is_refused(served: int, host: str) -> None:
    named = host.format(port=served)

    status, _, answer = send(served, "GET", "/health", Host=named)

    assert status == 403
    assert answer["error"]["message"] == (
        f"Host {named!r} does not name this server; use http://127.0.0.1:{served} or "
        f"http://localhost:{served}"
    )


@pytest.mark.parametrize("host", ["127.0.0.1:{port}", "localhost:{port}", "LOCALHOST:{port}"])
def test_this_servers_own_names_and_pages_are_answered(
    served: int, host: str, sqlite_ledger: Ledger
) -> None:
    named = host.format(port=served)
    body = json.dumps(channel_document()).encode()

    status, _, _ = send(
        served,
        "POST",
        CHANNELS,
        body,
        Host=named,
        Origin=f"http://{named}",  # the API's own /swagger page
        Content_Type="application/json",
    )

    assert status == 201
    assert sqlite_ledger.channels.list_channels().total == 1


@pytest.mark.parametrize(
    "document",
    [
        '{"name": "x", "transport_config": {"schedule": "\\ud800"}, "target": {}}',
        '{"name": "x", "transport_config": {"schedule": "* * * * * *", "timezone": "\\udfff"}}',
        '{"name": "x", "transport_config": {"payload": {"\\ud800": 1}}}',
        '{"name": "x", "target": {"type": "http", "url": "https://e.com", "headers": {"\\ud800": "1"}}}',
    ],
)
def test_a_lone_surrogate_is_answered_with_a_400_over_the_connection(
    served: int, document: str
) -> None:
    status, headers, answer = send(
        served, "POST", CHANNELS, document.encode(), Content_Type="application/json"
    )

    assert status == 400
    assert answer["error"]["code"] == "validation_failed"
    assert "lone surrogate" in answer["error"]["details"][0]["message"]
    assert int(headers["content-length"]) > 0


def test_head_answers_like_get_without_a_body(served: int) -> None:
    status, headers, body = send(served, "HEAD", "/health")

    assert (status, body) == (200, None)
    assert headers["Content-Type"] == "application/json"


# --- requests that are not what they say -------------------------------------------------


def _posting(port: int, body: bytes = b"{}", **headers: str) -> bytes:
    return request("POST", CHANNELS, port, body, Content_Type="application/json", **headers)


@pytest.mark.parametrize("length", ["-1", "abc", "+12", "1_0", "0x10", "12, 12", "²"])
def test_a_content_length_that_is_no_size_is_a_json_400_and_the_server_serves_on(
    served: int, sqlite_ledger: Ledger, length: str
) -> None:
    answer = exchange(served, _posting(served, Content_Length=length))

    assert (answer.status, answer.headers["connection"]) == (400, "close")
    assert answer.json == {
        "error": {
            "code": "malformed_request",
            "message": f"Content-Length must be a number of bytes, not {length!r}",
            "details": [],
        }
    }
    assert send(served, "GET", "/health")[0] == 200
    assert sqlite_ledger.channels.list_channels().total == 0


def test_two_content_lengths_that_differ_are_a_json_400(served: int) -> None:
    raw = _posting(served, Content_Length="2").replace(
        b"Content-Length: 2", b"Content-Length: 2\r\nContent-Length: 3"
    )

    answer = exchange(served, raw)

    assert answer.status == 400
    assert answer.json["error"]["message"] == "Content-Length is given more than once, differently"


@pytest.mark.parametrize("length", [str(MAX_BODY_BYTES + 1), "9" * 5000])
def test_a_body_over_the_cap_is_a_json_413_before_a_byte_of_it_is_read(
    served: int, length: str
) -> None:
    # No body follows: the answer comes from the header alone
    answer = exchange(served, _posting(served, b"", Content_Length=length))

    assert (answer.status, answer.json["error"]["code"]) == (413, "too_large")
    assert answer.json["error"]["message"].endswith(f"at most {MAX_BODY_BYTES} are accepted")
    assert send(served, "GET", "/health")[0] == 200


def test_a_body_sent_in_chunks_is_a_json_411(served: int) -> None:
    answer = exchange(
        served, _posting(served, b"2\r\n{}\r\n0\r\n\r\n", Transfer_Encoding="chunked")
    )

    assert (answer.status, answer.json["error"]["code"]) == (411, "length_required")


def test_a_body_that_ends_before_its_length_is_a_json_400(served: int) -> None:
    answer = exchange(served, _posting(served, b'{"na', Content_Length="10"), half_close=True)

    assert answer.status == 400
    assert answer.json["error"]["message"] == (
        "the body ended after 4 of its 10 bytes (Content-Length)"
    )
    assert send(served, "GET", "/health")[0] == 200


def test_a_body_that_never_arrives_is_a_json_408_after_the_read_timeout(
    sqlite_ledger: Ledger,
) -> None:
    app = create_app(sqlite_ledger, SETTINGS)
    server = serve_api(
        lambda event, context: handle_event(app, event, context), "127.0.0.1", 0, 0.5
    )
    try:
        port = server.server_port
        answer = exchange(port, _posting(port, b'{"na', Content_Length="10"))
        health = send(port, "GET", "/health")[0]
    finally:
        server.shutdown()
        server.server_close()

    assert (answer.status, answer.headers["connection"]) == (408, "close")
    assert answer.json["error"] == {
        "code": "request_timeout",
        "message": "the body did not arrive within 0.5 s",
        "details": [],
    }
    assert health == 200
    assert sqlite_ledger.channels.list_channels().total == 0


def test_a_client_that_goes_away_mid_body_costs_one_log_line_and_nothing_else(
    served: int, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG, logger="cronledger"):
        give_up(served, _posting(served, b'{"na', Content_Length="10"), abort=True)
        wait_until(lambda: any("went away" in r.getMessage() for r in caplog.records))
        health = send(served, "GET", "/health")[0]

    said = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert [r.getMessage().split(": ")[0] for r in said] == [
        "client 127.0.0.1 went away mid-request"
    ]
    assert said[0].exc_info is None  # one line, no traceback
    assert health == 200


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [("BREW", "/health", "GET, HEAD"), ("FOO", CHANNELS, "GET, HEAD, POST"),
     ("TRACE", "/health", "GET, HEAD"), ("POST", "/console", "GET, HEAD"),
     ("BREW", "/console/console.js", "GET, HEAD")],
)  # fmt: skip
def test_a_method_no_route_takes_is_a_json_405_naming_those_it_does(
    served: int, method: str, path: str, allowed: str
) -> None:
    status, headers, answer = send(served, method, path)

    assert (status, headers["Allow"]) == (405, allowed)
    assert answer["error"]["code"] == "method_not_allowed"


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        (b"GET /health HTTP/1.x\r\n\r\n", 400),
        (b"GET /health HTTP/1.1\r\n" + b"X: 1\r\n" * 101 + b"\r\n", 431),
        (b"GET /" + b"x" * 70_000 + b" HTTP/1.1\r\n\r\n", 414),
    ],
    ids=["bad version", "too many headers", "path too long"],
)
def test_what_the_http_library_refuses_is_answered_in_the_error_shape(
    served: int, raw: bytes, status: int
) -> None:
    answer = exchange(served, raw)

    assert answer.status == status
    assert answer.headers["content-type"] == "application/json"
    assert set(answer.json["error"]) == {"code", "message", "details"}
    assert send(served, "GET", "/health")[0] == 200


# --- cronledger dev -----------------------------------------------------------------------


def test_dev_refuses_a_non_loopback_host_without_the_explicit_flag(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code = main(["dev", "--host", "0.0.0.0", "--database-url", f"sqlite:///{tmp_path / 'x.db'}"])

    assert code == 1
    assert capsys.readouterr().err == (
        "cronledger: error: refusing to serve the API on 0.0.0.0: it has no authentication, so "
        "anyone who can reach it can run what your targets allow; pass --allow-remote to do it "
        "anyway\n"
    )
    assert not (tmp_path / "x.db").exists()  # nothing started


def test_migrate_prints_the_database_url_without_its_password(
    capsys: pytest.CaptureFixture[str], pg_database_url: str
) -> None:
    with_password = sa.make_url(pg_database_url).set(password="hunter2")

    code = main(["migrate", "--database-url", with_password.render_as_string(False)])

    out = capsys.readouterr().out
    assert code == 0
    assert "hunter2" not in out
    assert out == f"migrated {with_password.render_as_string(hide_password=True)}\n"


@pytest.mark.slow
def test_dev_shows_the_demo_says_what_it_allows_and_hides_the_password(
    pg_database_url: str,
) -> None:
    # Given `make run`'s command, on PostgreSQL with a password in the URL (trust auth ignores it)
    url = sa.make_url(pg_database_url).set(password="hunter2").render_as_string(False)
    environ = {k: v for k, v in os.environ.items() if not k.startswith("CRONLEDGER_")}
    process = subprocess.Popen(
        [sys.executable, "-m", "cronledger.cli", "dev", "--demo", "--port", str(free_port()),
         "--database-url", url],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=environ,
    )  # fmt: skip
    lines: list[str] = []
    assert process.stdout is not None
    reader = threading.Thread(target=lambda: lines.extend(process.stdout), daemon=True)  # type: ignore[arg-type]
    reader.start()
    try:
        # When it has started and settled a demo occurrence
        wait_until(lambda: any(" demo " in line and "completed" in line for line in lines), 30)
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=30)
        reader.join(timeout=5)
    output = "".join(lines)

    # Then it printed the demo, what targets may reach, and never the password
    assert process.returncode == 0, output
    assert "hunter2" not in output
    assert ":***@" in output
    assert (
        "http targets may reach non-public addresses in: 127.0.0.0/8, ::1/128 (loopback: "
        "cronledger dev's default; CRONLEDGER_HTTP_ALLOW_NETWORKS replaces it)"
    ) in output
    assert "python targets may call functions in: cronledger.demo" in output


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.parametrize(
    ("environ", "networks", "printed"),
    [
        (
            {},
            ("127.0.0.0/8", "::1/128"),
            "http targets may reach non-public addresses in: 127.0.0.0/8, ::1/128 (loopback: "
            "cronledger dev's default; CRONLEDGER_HTTP_ALLOW_NETWORKS replaces it)",
        ),
        (
            {"CRONLEDGER_HTTP_ALLOW_NETWORKS": ""},
            (),
            "http targets may reach non-public addresses in: public addresses only",
        ),
        (
            {"CRONLEDGER_HTTP_ALLOW_NETWORKS": "10.20.0.0/16"},
            ("10.20.0.0/16",),
            "http targets may reach non-public addresses in: 10.20.0.0/16",
        ),
    ],
)
def test_dev_allows_loopback_unless_the_setting_says_otherwise_and_prints_which(
    environ: dict[str, str], networks: tuple[str, ...], printed: str
) -> None:
    settings = dev_settings("sqlite:///x.db", demo=False, environ=environ)

    assert tuple(map(str, settings.http_allow_networks)) == networks
    assert describe_policy(settings)[0] == printed


def test_the_demo_adds_its_own_module_to_what_the_operator_allows() -> None:
    plain = dev_settings("sqlite:///x.db", demo=False, environ={})
    demo = dev_settings(
        "sqlite:///x.db", demo=True, environ={"CRONLEDGER_PYTHON_TARGETS": "reports.jobs"}
    )

    assert plain.python_targets == ()
    assert describe_policy(plain)[1] == (
        "python targets may call functions in: none (CRONLEDGER_PYTHON_TARGETS lists modules)"
    )
    assert demo.python_targets == ("reports.jobs", "cronledger.demo")


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "localhost", "LOCALHOST"])
def test_a_loopback_host_needs_no_flag_and_no_warning(host: str) -> None:
    assert exposure_warning(host, allow_remote=False) is None


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.20", "mybox.lan"])
def test_any_other_host_needs_the_flag_and_then_is_warned_about(host: str) -> None:
    with pytest.raises(ValueError, match="pass --allow-remote"):
        exposure_warning(host, allow_remote=False)

    assert exposure_warning(host, allow_remote=True) == (
        f"WARNING: the API listens on {host}, beyond this machine, with no authentication: "
        "anyone who can reach it can create channels and run what your targets allow."
    )
