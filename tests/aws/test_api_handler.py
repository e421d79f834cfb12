"""The api function: HTTP API (payload v2) events, as API Gateway delivers them after IAM
authorisation, answered by the operator API over the container's ledger."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from sqlalchemy import event

from cronledger.api import PREFIX
from cronledger.aws import api, runtime
from cronledger.ledger import CHANNEL_ACTIVE, Ledger
from tests.aws.invocations import FakeContext, http_api_event, log_lines
from tests.ledger.helpers import seed_due


def invoke(method: str, path: str, body: Any = None) -> tuple[int, Any]:
    answer = api.handler(http_api_event(method, path, body), FakeContext("cronledger-api", 29_000))
    return int(answer["statusCode"]), json.loads(answer["body"]) if answer.get("body") else None


def test_a_health_request_is_answered_with_the_data_envelope_from_the_ledger(
    container: Ledger,
) -> None:
    seed_due(container, ago=timedelta(minutes=1))

    status, body = invoke("GET", "/health")

    assert status == 200
    assert body["data"]["database"] == "reachable"
    assert body["data"]["pending"] == 1
    assert body["data"]["oldest_pending_secs"] >= 60


def test_a_channel_created_through_the_function_is_in_the_ledger_and_the_request_id_is_logged(
    container: Ledger,
) -> None:
    document = {
        "name": "month-end",
        "status": "active",
        "transport_config": {"schedule": "0 0 6 1 * *", "timezone": "Europe/London"},
        "target": {"type": "python", "callable": "tests.aws.targets:record"},
        "timeout_ms": 60_000,
    }

    with log_lines() as lines:
        status, body = invoke("POST", f"{PREFIX}/channels", document)

    assert status == 201, body
    stored = container.channels.get_channel(body["data"]["channel_id"])
    assert (stored.name, stored.status, stored.version) == ("month-end", CHANNEL_ACTIVE, 1)
    assert stored.transport_config["timezone"] == "Europe/London"
    (summary,) = [line for line in lines if line["message"] == "request answered"]
    assert (summary["method"], summary["path"], summary["status"]) == (
        "POST",
        f"{PREFIX}/channels",
        201,
    )
    assert all(line["correlation_id"] == "JKJaXmPLvHcESHA=" for line in lines)


def test_an_unknown_path_is_a_404_in_the_error_envelope(container: Ledger) -> None:
    status, body = invoke("GET", f"{PREFIX}/nothing-here")

    assert status == 404
    assert set(body["error"]) >= {"code", "message"}


def test_one_container_answers_many_requests_over_the_connection_it_opened_first(
    container: Ledger,
) -> None:
    # Given a cold container, counting the connections its ledger opens
    opened: list[object] = []
    event.listen(runtime.ledger().engine, "connect", lambda conn, _record: opened.append(conn))

    # When it answers several requests
    answers = [invoke("GET", "/health")[0] for _ in range(3)]
    answers.append(invoke("GET", f"{PREFIX}/channels")[0])

    # Then one connection served them all
    assert answers == [200, 200, 200, 200]
    assert len(opened) == 1
