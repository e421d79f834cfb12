"""The HTTP target against a real server on 127.0.0.1 that records every request it got."""

from __future__ import annotations

import json
import socket
from datetime import UTC, datetime

from cronledger.targets import Envelope, build_envelope, run_target
from tests.unit.fixtures_targets import Answer, RecordingServer


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
        outcome = run_target(doc, sent, 5.0)

    assert (outcome.ok, outcome.result, outcome.error) == (True, '{"accepted": 1}', None)
    (request,) = server.received
    assert (request.method, request.path) == ("POST", "/hooks/nightly?team=ops")
    assert request.headers["Content-Type"] == "application/json"
    assert request.headers["X-Team"] == "ops"
    assert json.loads(request.body) == sent


def test_the_configured_method_is_used() -> None:
    with RecordingServer() as server:
        outcome = run_target({"type": "http", "url": server.url, "method": "put"}, envelope(), 5.0)

    assert outcome.ok
    assert [r.method for r in server.received] == ["PUT"]


def test_a_server_error_is_a_failure_that_keeps_the_answer_as_the_excerpt() -> None:
    with RecordingServer(Answer(status=500, body=b"database is down")) as server:
        outcome = run_target({"type": "http", "url": server.url}, envelope(), 5.0)

    assert (outcome.ok, outcome.error, outcome.result) == (
        False,
        "HTTP 500 Internal Server Error",
        "database is down",
    )
    assert len(server.received) == 1


def test_a_redirect_is_not_followed_and_is_a_failure_naming_the_new_place() -> None:
    moved = Answer(status=302, body=b"", headers={"Location": "https://elsewhere.example/hook"})

    with RecordingServer(moved) as server:
        outcome = run_target({"type": "http", "url": server.url}, envelope(), 5.0)

    assert not outcome.ok
    assert outcome.error == (
        "HTTP 302 Found (redirects are not followed; it points to https://elsewhere.example/hook)"
    )
    assert len(server.received) == 1


def test_an_endpoint_slower_than_the_budget_times_out() -> None:
    with RecordingServer(Answer(delay_secs=1.5)) as server:
        outcome = run_target({"type": "http", "url": server.url}, envelope(), 0.25)

    assert (outcome.ok, outcome.error) == (False, "timed out after 250 ms")
    assert len(server.received) == 1


def test_an_unreachable_endpoint_is_a_failure_that_names_it() -> None:
    with socket.socket() as probe:  # a port nobody listens on once this socket is closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]

    outcome = run_target(
        {"type": "http", "url": f"http://127.0.0.1:{port}/hook?team=ops"}, envelope(), 5.0
    )

    assert not outcome.ok
    assert outcome.error is not None
    assert outcome.error.startswith(f"could not reach http://127.0.0.1:{port}/hook: ")
