"""The HTTP target against a real server on 127.0.0.1 that records every request it got."""

from __future__ import annotations

import json
import socket
import ssl
from datetime import UTC, datetime
from ipaddress import ip_address, ip_network
from pathlib import Path
from typing import Any

import pytest
import trustme

from cronledger.targets import run_target
from cronledger.targets.envelope import Envelope, build_envelope
from cronledger.targets.policy import TargetPolicy
from tests.unit.fixtures_targets import Answer, RecordingServer

#: The operator of these tests lets http targets reach this machine, where the servers are.
LOOPBACK = TargetPolicy(http_allow_networks=(ip_network("127.0.0.0/8"),))


def envelope() -> Envelope:
    return build_envelope(
        payload={"report": "nightly"},
        trigger="manual",
        occurrence_id="0190a6c3-7e2f-7c41-8b3a-2d4e5f6a7b8c",
        channel_id="ch-1",
        channel_name="nightly",
        scheduled_for=datetime(2026, 9, 1, 2, 15, tzinfo=UTC),
        started_at=datetime(2026, 9, 1, 2, 15, 1, tzinfo=UTC),
        timezone="UTC",
        attempt=1,
        singleton_key="ch-1",
        fencing_token=3,
    )


def test_the_endpoint_receives_the_envelope_as_a_json_post_and_a_2xx_is_success() -> None:
    sent = envelope()

    with RecordingServer(Answer(status=201, body=b'{"accepted": 1}')) as server:
        doc = {
            "type": "http",
            "url": f"{server.url}/hooks/nightly?team=ops",
            "headers": {"X-Team": "ops"},
        }
        outcome = run_target(doc, sent, 5.0, policy=LOOPBACK)

    assert (outcome.ok, outcome.result, outcome.error) == (True, '{"accepted": 1}', None)
    (request,) = server.received
    assert (request.method, request.path) == ("POST", "/hooks/nightly?team=ops")
    assert request.headers["Content-Type"] == "application/json"
    assert request.headers["X-Team"] == "ops"
    assert json.loads(request.body) == sent


def test_the_configured_method_is_used() -> None:
    with RecordingServer() as server:
        outcome = run_target(
            {"type": "http", "url": server.url, "method": "put"}, envelope(), 5.0, policy=LOOPBACK
        )

    assert outcome.ok
    assert [r.method for r in server.received] == ["PUT"]


@pytest.mark.parametrize("method", ["GET", "HEAD"])
def test_a_get_or_head_sends_no_body_and_says_which_run_it_is_in_headers(method: str) -> None:
    with RecordingServer(Answer(status=204)) as server:
        doc = {"type": "http", "url": f"{server.url}/warm", "method": method.lower()}
        outcome = run_target(doc, envelope(), 5.0, policy=LOOPBACK)

    assert outcome.ok, outcome.error
    (request,) = server.received
    assert (request.method, request.path, request.body) == (method, "/warm", b"")
    assert "Content-Type" not in request.headers
    assert request.headers["X-Cronledger-Occurrence-Id"] == "0190a6c3-7e2f-7c41-8b3a-2d4e5f6a7b8c"
    assert request.headers["X-Cronledger-Scheduled-For"] == "2026-09-01T02:15:00Z"
    assert request.headers["X-Cronledger-Attempt"] == "1"


def test_a_server_error_is_a_failure_that_keeps_the_answer_as_the_excerpt() -> None:
    with RecordingServer(Answer(status=500, body=b"database is down")) as server:
        outcome = run_target({"type": "http", "url": server.url}, envelope(), 5.0, policy=LOOPBACK)

    assert (outcome.ok, outcome.error, outcome.result) == (
        False,
        "HTTP 500 Internal Server Error",
        "database is down",
    )
    assert len(server.received) == 1


@pytest.mark.parametrize(("status", "permanent"), [(404, True), (410, True), (429, False)])
def test_an_endpoint_that_says_it_is_gone_is_a_permanent_failure(
    status: int, permanent: bool
) -> None:
    with RecordingServer(Answer(status=status, body=b"no such hook")) as server:
        outcome = run_target({"type": "http", "url": server.url}, envelope(), 5.0, policy=LOOPBACK)

    assert (outcome.ok, outcome.permanent) == (False, permanent)
    assert (outcome.error or "").startswith(f"HTTP {status}")


def test_a_redirect_is_not_followed_and_is_a_failure_naming_the_new_place() -> None:
    moved = Answer(status=302, body=b"", headers={"Location": "https://elsewhere.example/hook"})

    with RecordingServer(moved) as server:
        outcome = run_target({"type": "http", "url": server.url}, envelope(), 5.0, policy=LOOPBACK)

    assert not outcome.ok
    assert outcome.error == (
        "HTTP 302 Found (redirects are not followed; it points to https://elsewhere.example/hook)"
    )
    assert len(server.received) == 1


def test_an_endpoint_slower_than_the_budget_times_out() -> None:
    with RecordingServer(Answer(delay_secs=1.5)) as server:
        outcome = run_target({"type": "http", "url": server.url}, envelope(), 0.25, policy=LOOPBACK)

    assert (outcome.ok, outcome.error) == (False, "timed out after 250 ms")
    assert len(server.received) == 1


def test_an_unreachable_endpoint_is_a_failure_that_names_it() -> None:
    with socket.socket() as probe:  # a port nobody listens on once this socket is closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]

    outcome = run_target(
        {"type": "http", "url": f"http://127.0.0.1:{port}/hook?team=ops"},
        envelope(),
        5.0,
        policy=LOOPBACK,
    )

    assert not outcome.ok
    assert outcome.error is not None
    assert outcome.error.startswith(f"could not reach http://127.0.0.1:{port}/hook: ")
    assert "refused" in outcome.error and "timed out" not in outcome.error  # it says why


# --- addresses judged after resolution ----------------------------------------------------


class Resolver:
    """A test DNS: each name answers the addresses given, and every question is recorded."""

    def __init__(self, **answers: list[str] | Exception) -> None:
        self.answers = {name.replace("_", "."): value for name, value in answers.items()}
        self.asked: list[tuple[str, int]] = []

    def __call__(self, host: str, port: int) -> list[Any]:
        self.asked.append((host, port))
        answer = self.answers[host]
        if isinstance(answer, Exception):
            raise answer
        return [ip_address(a) for a in answer]


def policy(resolver: Resolver, *allowed: str) -> TargetPolicy:
    return TargetPolicy(
        http_allow_networks=tuple(ip_network(n) for n in allowed), resolver=resolver
    )


@pytest.mark.parametrize(
    ("answers", "message"),
    [
        (
            ["169.254.169.254"],
            "hooks.test (169.254.169.254) is a link-local (instance metadata lives there) address",
        ),
        (["127.0.0.1"], "hooks.test (127.0.0.1) is a loopback address"),
        (["10.0.0.7"], "hooks.test (10.0.0.7) is a private address"),
        (["100.100.1.1"], "hooks.test (100.100.1.1) is a CGNAT (shared address space) address"),
        (
            ["fd00:ec2::254"],
            "hooks.test (fd00:ec2::254) is a unique-local (instance metadata lives there) address",
        ),
        (["::ffff:127.0.0.1"], "hooks.test (::ffff:7f00:1) is a loopback address (127.0.0.1)"),
        (["93.184.215.14", "192.168.0.9"], "hooks.test (192.168.0.9) is a private address"),
    ],
)
def test_a_name_that_resolves_to_a_non_public_address_is_refused_without_connecting(
    answers: list[str], message: str
) -> None:
    resolver = Resolver(hooks_test=answers)

    with RecordingServer() as server:
        doc = {"type": "http", "url": f"http://hooks.test:{server.port}/hook"}
        outcome = run_target(doc, envelope(), 5.0, policy=policy(resolver))

    assert (outcome.ok, outcome.error) == (
        False,
        f"refused: {message}; http targets reach only public addresses unless "
        "CRONLEDGER_HTTP_ALLOW_NETWORKS lists the network",
    )
    assert server.received == []


def test_an_address_written_in_the_url_is_refused_at_run_time_before_any_resolution() -> None:
    resolver = Resolver()

    outcome = run_target(
        {"type": "http", "url": "http://2130706433:8080/hook"},
        envelope(),
        5.0,
        policy=policy(resolver),
    )

    assert (outcome.ok, outcome.error) == (
        False,
        "invalid target: target.url: 2130706433 (127.0.0.1) is a loopback address; http "
        "targets reach only public addresses unless CRONLEDGER_HTTP_ALLOW_NETWORKS lists the "
        "network",
    )
    assert resolver.asked == []


def test_a_name_in_an_allowed_network_is_reached_at_the_address_that_was_checked() -> None:
    # The name answers differently the second time (DNS rebinding): only the first answer,
    # the one that was checked, is ever used.
    answers = iter([["127.0.0.1"], ["169.254.169.254"]])
    asked: list[str] = []

    def rebinding(host: str, port: int) -> list[Any]:
        asked.append(host)
        return [ip_address(a) for a in next(answers)]

    with RecordingServer() as server:
        doc = {"type": "http", "url": f"http://hooks.test:{server.port}/hook?x=1"}
        outcome = run_target(
            doc,
            envelope(),
            5.0,
            policy=TargetPolicy(
                http_allow_networks=(ip_network("127.0.0.0/8"),), resolver=rebinding
            ),
        )

    assert outcome.ok, outcome.error
    assert asked == ["hooks.test"]
    (request,) = server.received
    assert request.headers["Host"] == f"hooks.test:{server.port}"
    assert request.path == "/hook?x=1"


def test_a_name_that_does_not_resolve_is_a_failure_that_names_it() -> None:
    resolver = Resolver(nowhere_test=socket.gaierror(-2, "Name or service not known"))

    outcome = run_target(
        {"type": "http", "url": "https://nowhere.test/hook"},
        envelope(),
        5.0,
        policy=policy(resolver),
    )

    assert (outcome.ok, outcome.error) == (
        False,
        "could not resolve nowhere.test: [Errno -2] Name or service not known",
    )


def test_a_redirect_to_the_metadata_service_is_not_followed() -> None:
    moved = Answer(status=307, body=b"", headers={"Location": "http://169.254.169.254/latest/"})

    with RecordingServer(moved) as server:
        outcome = run_target({"type": "http", "url": server.url}, envelope(), 5.0, policy=LOOPBACK)

    assert outcome.error == (
        "HTTP 307 Temporary Redirect (redirects are not followed; it points to "
        "http://169.254.169.254/latest/)"
    )
    assert len(server.received) == 1


# --- TLS to a pinned address --------------------------------------------------------------


@pytest.fixture
def certificate_authority(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> trustme.CA:
    """A test CA that this process trusts (as the system trust store would be)."""
    authority = trustme.CA()
    bundle = tmp_path / "ca.pem"
    authority.cert_pem.write_to_path(str(bundle))
    monkeypatch.setenv("SSL_CERT_FILE", str(bundle))
    return authority


def tls_for(authority: trustme.CA, name: str) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    authority.issue_cert(name).configure_cert(context)
    return context


def test_https_goes_to_the_checked_address_with_the_urls_name_for_sni_and_the_certificate(
    certificate_authority: trustme.CA,
) -> None:
    resolver = Resolver(hooks_test=["127.0.0.1"])

    with RecordingServer(tls=tls_for(certificate_authority, "hooks.test")) as server:
        doc = {"type": "http", "url": f"https://hooks.test:{server.port}/hook"}
        outcome = run_target(doc, envelope(), 5.0, policy=policy(resolver, "127.0.0.0/8"))

    assert (outcome.ok, outcome.error) == (True, None)
    assert server.server_names == ["hooks.test"]
    assert [r.headers["Host"] for r in server.received] == [f"hooks.test:{server.port}"]


def test_https_to_an_address_whose_certificate_names_another_host_fails_verification(
    certificate_authority: trustme.CA,
) -> None:
    resolver = Resolver(hooks_test=["127.0.0.1"])

    with RecordingServer(tls=tls_for(certificate_authority, "other.test")) as server:
        doc = {"type": "http", "url": f"https://hooks.test:{server.port}/hook"}
        outcome = run_target(doc, envelope(), 5.0, policy=policy(resolver, "127.0.0.0/8"))

    assert not outcome.ok
    assert outcome.error is not None
    assert outcome.error.startswith(f"could not reach https://hooks.test:{server.port}/hook: ")
    assert "hostname" in outcome.error.lower() or "certificate" in outcome.error.lower()
    assert server.received == []


# --- secret headers -----------------------------------------------------------------------

SECRET = "Bearer s3cr3t-value-0123456789"


def test_a_secret_header_reaches_the_target_and_an_echo_of_it_is_scrubbed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CRONLEDGER_SECRET_HOOK_TOKEN", SECRET)
    echo = Answer(status=500, body=f'{{"you sent": "{SECRET}"}}'.encode())
    doc_headers = {"secret_headers": {"Authorization": "env:CRONLEDGER_SECRET_HOOK_TOKEN"}}

    with RecordingServer(echo) as server:
        doc = {"type": "http", "url": server.url, **doc_headers}
        outcome = run_target(doc, envelope(), 5.0, policy=LOOPBACK)

    (request,) = server.received
    assert request.headers["Authorization"] == SECRET
    assert (outcome.ok, outcome.error, outcome.result) == (
        False,
        "HTTP 500 Internal Server Error",
        '{"you sent": "[secret]"}',
    )


def test_a_secret_that_is_not_set_fails_the_attempt_naming_the_reference_only() -> None:
    with RecordingServer() as server:
        doc = {
            "type": "http",
            "url": server.url,
            "secret_headers": {"Authorization": "env:CRONLEDGER_SECRET_NOT_SET_ANYWHERE"},
        }
        outcome = run_target(doc, envelope(), 5.0, policy=LOOPBACK)

    assert (outcome.ok, outcome.error) == (
        False,
        "secret env:CRONLEDGER_SECRET_NOT_SET_ANYWHERE is not set in the scheduler's environment",
    )
    assert server.received == []


def test_a_secret_value_that_could_split_the_request_is_not_sent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CRONLEDGER_SECRET_HOOK_TOKEN", "abc\r\nX-Evil: 1")

    with RecordingServer() as server:
        doc = {
            "type": "http",
            "url": server.url,
            "secret_headers": {"X-Token": "env:CRONLEDGER_SECRET_HOOK_TOKEN"},
        }
        outcome = run_target(doc, envelope(), 5.0, policy=LOOPBACK)

    assert (outcome.ok, outcome.error) == (
        False,
        "the secret for X-Token is not one line of printable ASCII",
    )
    assert server.received == []
