"""`cronledger console`'s proxy on 127.0.0.1, in front of the real API (local HTTP, SQLite).

Invariant: it serves the page from the package and passes the API's own paths on, signed
(SigV4) when the API is API Gateway's; it answers nothing addressed to another host, sent from
another site's page, or carrying a body that is not JSON, and passes nothing else on. A request
that is not what it says, or an API that answers no HTTP, is a JSON 4xx or 502, and the proxy
serves on.
"""

from __future__ import annotations

import http.client
import json
import signal
import socket
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cronledger.api import create_app
from cronledger.api_client import ApiClient
from cronledger.console.proxy import MAX_BODY, start_proxy
from cronledger.ledger import Ledger
from tests.api.helpers import CHANNELS, SETTINGS, channel_document
from tests.api.http import serving
from tests.raw_http import exchange, request


@dataclass
class Proxy:
    port: int
    ledger: Ledger

    def send(
        self, method: str, path: str, body: bytes | None = None, **headers: str
    ) -> tuple[int, dict[str, str], bytes]:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            names = {"Host": f"127.0.0.1:{self.port}"}
            names |= {k.replace("_", "-"): v for k, v in headers.items()}
            connection.request(method, path, body=body, headers=names)
            response = connection.getresponse()
            return response.status, dict(response.getheaders()), response.read()
        finally:
            connection.close()


@pytest.fixture
def proxy(sqlite_ledger: Ledger) -> Iterator[Proxy]:
    with serving(create_app(sqlite_ledger, SETTINGS)) as url:
        server = start_proxy(ApiClient(url), 0)
        try:
            yield Proxy(server.server_port, sqlite_ledger)
        finally:
            server.shutdown()
            server.server_close()


def test_the_page_and_its_files_come_from_the_package(proxy: Proxy) -> None:
    page = proxy.send("GET", "/console")
    script = proxy.send("GET", "/console/console.js")
    root = proxy.send("GET", "/")
    missing = proxy.send("GET", "/console/nope.js")
    sneaky = proxy.send("GET", "/console/..%2f__init__.py")

    assert page[0] == 200 and page[1]["content-type"].startswith("text/html")
    assert b'<script src="/console/console.js" defer>' in page[2]
    assert "default-src 'none'" in page[1]["Content-Security-Policy"]
    assert script[0] == 200 and script[1]["content-type"].startswith("text/javascript")
    assert (root[0], root[1]["location"]) == (302, "/console")
    assert (missing[0], sneaky[0]) == (404, 404)


def test_api_requests_pass_through_to_the_api(proxy: Proxy) -> None:
    body = json.dumps(channel_document()).encode()

    created = proxy.send("POST", CHANNELS, body, Content_Type="application/json")
    listed = proxy.send("GET", f"{CHANNELS}?name=nightly")
    refused = proxy.send("POST", CHANNELS, body, Content_Type="application/json")
    health = proxy.send("GET", "/health")

    assert created[0] == 201
    assert json.loads(listed[2])["data"][0]["name"] == "nightly"
    assert refused[0] == 409 and json.loads(refused[2])["error"]["code"] == "conflict"
    assert health[0] == 200
    assert proxy.ledger.channels.list_channels().total == 1


@pytest.mark.parametrize(
    ("headers", "said"),
    [
        ({"Host": "evil.example:80"}, "addressed to it"),
        ({"Host": "127.0.0.1:1"}, "addressed to it"),
        ({"Origin": "http://evil.example"}, "another site"),
        ({"Sec_Fetch_Site": "cross-site"}, "another site"),
        ({"Content_Type": "text/plain"}, "application/json"),
    ],
)
def test_requests_that_are_not_its_own_pages_are_refused(
    proxy: Proxy, headers: dict[str, str], said: str
) -> None:
    body = json.dumps(channel_document()).encode()
    headers = {"Content_Type": "application/json", **headers}

    status, _, answer = proxy.send("POST", CHANNELS, body, **headers)

    assert status == 403
    assert said in json.loads(answer)["error"]["message"]
    assert proxy.ledger.channels.list_channels().total == 0


def test_only_the_apis_own_paths_are_passed_on(proxy: Proxy) -> None:
    status, _, answer = proxy.send("GET", "/swagger")

    assert status == 404
    assert json.loads(answer)["error"]["message"] == "no such path"


@pytest.mark.parametrize(
    ("length", "status", "code"),
    [("-1", 400, "malformed_request"), ("abc", 400, "malformed_request"),
     (str(MAX_BODY + 1), 413, "too_large")],
)  # fmt: skip
def test_a_content_length_that_is_no_size_or_too_large_is_a_json_4xx_and_it_serves_on(
    proxy: Proxy, length: str, status: int, code: str
) -> None:
    raw = request("POST", CHANNELS, proxy.port, Content_Type="application/json",
                  Content_Length=length)  # fmt: skip

    answer = exchange(proxy.port, raw)

    assert (answer.status, answer.json["error"]["code"]) == (status, code)
    assert answer.headers["connection"] == "close"
    assert proxy.send("GET", "/health")[0] == 200
    assert proxy.ledger.channels.list_channels().total == 0


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("POST", "/console", "GET, HEAD"),
        ("BREW", "/console/console.js", "GET, HEAD"),
        ("BREW", "/health", "DELETE, GET, HEAD, PATCH, POST, PUT"),
    ],
)
def test_a_method_it_does_not_take_is_a_json_405_naming_those_it_does(
    proxy: Proxy, method: str, path: str, allowed: str
) -> None:
    status, headers, answer = proxy.send(method, path)

    assert (status, headers["allow"]) == (405, allowed)
    assert json.loads(answer)["error"]["code"] == "method_not_allowed"


def test_a_wrong_method_on_an_api_path_gets_the_apis_own_405(proxy: Proxy) -> None:
    status, headers, answer = proxy.send("DELETE", "/health")

    assert (status, headers["allow"]) == (405, "GET, HEAD")
    assert json.loads(answer)["error"]["message"] == "/health answers GET, HEAD, not DELETE"


def test_a_body_that_never_arrives_is_a_json_408_after_the_read_timeout(
    sqlite_ledger: Ledger,
) -> None:
    with serving(create_app(sqlite_ledger, SETTINGS)) as url:
        server = start_proxy(ApiClient(url), 0, read_timeout_secs=0.5)
        try:
            port = server.server_port
            raw = request("POST", CHANNELS, port, b'{"na', Content_Type="application/json",
                          Content_Length="10")  # fmt: skip
            answer = exchange(port, raw)
            health = Proxy(port, sqlite_ledger).send("GET", "/health")[0]
        finally:
            server.shutdown()
            server.server_close()

    assert (answer.status, answer.json["error"]["code"]) == (408, "request_timeout")
    assert health == 200
    assert sqlite_ledger.channels.list_channels().total == 0


def test_an_api_that_answers_no_http_is_a_json_502() -> None:
    # Given an "API" that answers every request with a line that is not HTTP, and hangs up
    listener = socket.create_server(("127.0.0.1", 0))

    def answer_nonsense() -> None:
        while True:
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            with connection:
                connection.recv(65536)
                connection.sendall(b"nonsense\r\n")

    threading.Thread(target=answer_nonsense, daemon=True).start()
    server = start_proxy(ApiClient(f"http://127.0.0.1:{listener.getsockname()[1]}"), 0)
    try:
        proxy = Proxy(server.server_port, None)  # type: ignore[arg-type]
        status, _, body = proxy.send("GET", "/health")
        page = proxy.send("GET", "/console")[0]
    finally:
        server.shutdown()
        server.server_close()
        listener.close()

    assert status == 502
    assert json.loads(body)["error"]["message"].startswith("cannot reach the cronledger API")
    assert page == 200


def test_requests_to_api_gateway_are_signed_on_the_way(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Given an API Gateway URL (never reached: the send is captured) and credentials
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    sent: list[urllib.request.Request] = []

    def send(
        request: urllib.request.Request, timeout: float
    ) -> tuple[int, Mapping[str, str], bytes]:
        sent.append(request)
        return 202, {"Content-Type": "application/json", "X-Amzn-Trace-Id": "x"}, b'{"data": 1}'

    api = ApiClient("https://abc123defg.execute-api.eu-west-1.amazonaws.com", send=send)
    server = start_proxy(api, 0)
    try:
        # When the page triggers a channel through the proxy
        answer: Any = Proxy(server.server_port, None).send(  # type: ignore[arg-type]
            "POST", f"{CHANNELS}/c1/trigger?x=1", b"{}", Content_Type="application/json"
        )
    finally:
        server.shutdown()
        server.server_close()

    # Then the request went on signed, and its answer came back as it was
    (request,) = sent
    assert request.full_url.endswith(f"{CHANNELS}/c1/trigger?x=1")
    assert request.get_method() == "POST" and request.data == b"{}"
    authorization = request.get_header("Authorization")
    assert authorization.startswith("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/")
    assert "/eu-west-1/execute-api/aws4_request" in authorization
    assert answer[0] == 202 and answer[2] == b'{"data": 1}'
    assert "X-Amzn-Trace-Id" not in answer[1]  # only the answer's own headers come back


def _ended(process: subprocess.Popen[str], timeout: float = 20) -> tuple[str, int | None]:
    """What the process printed from here on, and its exit code: None if it did not end
    within `timeout` (it is killed then, so a test fails instead of hanging)."""
    try:
        rest, _ = process.communicate(timeout=timeout)
        return rest, process.returncode
    except subprocess.TimeoutExpired:
        process.kill()
        rest, _ = process.communicate()
        return rest, None


def _ignoring_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.parametrize(
    ("stop", "started_with"),
    [
        (signal.SIGINT, None),
        (signal.SIGINT, _ignoring_sigint),  # a shell script's background job: SIGINT ignored
        (signal.SIGTERM, None),
    ],
    ids=["ctrl-c", "ctrl-c in a background job", "sigterm"],
)
def test_cronledger_console_serves_until_interrupted(
    sqlite_ledger: Ledger, stop: signal.Signals, started_with: Any
) -> None:
    with serving(create_app(sqlite_ledger, SETTINGS)) as url:
        # Given `cronledger console --api-url URL` on any free port
        command = [sys.executable, "-m", "cronledger.cli", "console", "--api-url", url]
        with subprocess.Popen(
            [*command, "--port", "0"], stdout=subprocess.PIPE, text=True, preexec_fn=started_with
        ) as process:
            assert process.stdout is not None
            first = process.stdout.readline()
            try:
                # When the page and the API are asked for through it
                page_url = first.split()[2]
                with urllib.request.urlopen(page_url, timeout=10) as page:
                    html = page.read()
                health_url = page_url.replace("/console", "/health")
                with urllib.request.urlopen(health_url, timeout=10) as health:
                    reachable = json.loads(health.read())["data"]["database"]
            finally:
                process.send_signal(stop)
                rest, code = _ended(process)

    # Then it said where, served both, and stopped cleanly on the signal
    assert first.startswith("cronledger console: http://127.0.0.1:")
    assert f"(API: {url})" in first
    assert b"<title>cronledger console</title>" in html
    assert reachable == "reachable"
    assert (code, rest.splitlines()[-1]) == (0, "stopped")
