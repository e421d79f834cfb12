"""A credential given by reference (SPEC §10): it reaches the target, and appears nowhere else:
not in the ledger's rows, not in any API answer, not in a log line, not in the result excerpt
(even when the endpoint echoes it back). A secret bound to hosts by its tag is refused, when a
channel is saved, for any other host."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from ipaddress import ip_network
from typing import Any

import boto3
import pytest
import sqlalchemy as sa
from moto import mock_aws

from cronledger.api import create_app
from cronledger.ledger import Ledger
from cronledger.ledger.tables import metadata
from tests.api.helpers import CHANNELS, OCCURRENCES, SETTINGS, Scheduler
from tests.api.http import Answer, call
from tests.unit.fixtures_targets import Answer as Endpoint, RecordingServer, forget_cached_secrets

SECRET = "Bearer xyzzy-7b1e-secret-4e0c"
REFERENCE = "env:CRONLEDGER_SECRET_REPORTS_TOKEN"
#: This test's operator: python targets of the suite, and http targets on this machine.
LOOPBACK = SETTINGS.replace(http_allow_networks=(ip_network("127.0.0.0/8"),))


@pytest.mark.parametrize("status", [200, 500])
def test_a_secret_header_reaches_the_target_and_appears_nowhere_else(
    ledger: Ledger,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    status: int,
) -> None:
    # Given a secret in the scheduler's environment, and an endpoint that echoes it back
    monkeypatch.setenv("CRONLEDGER_SECRET_REPORTS_TOKEN", SECRET)
    caplog.set_level(logging.DEBUG)
    app = create_app(ledger, LOOPBACK)
    scheduler = Scheduler(ledger, LOOPBACK)
    echo = Endpoint(status=status, body=json.dumps({"authorization": SECRET}).encode())
    answers: list[Answer] = []

    with RecordingServer(echo) as server:
        # When a channel names it by reference, and a manual run goes to the endpoint
        created = call(
            app,
            "POST",
            CHANNELS,
            body={
                "name": "reports",
                "status": "active",
                "transport_config": {"schedule": "0 0 3 * * *", "retry": {"max_attempts": 1}},
                "target": {
                    "type": "http",
                    "url": f"{server.url}/reports",
                    "headers": {"X-Team": "ops"},
                    "secret_headers": {"Authorization": REFERENCE},
                },
            },
        )
        assert created.status == 201, created.body
        channel_id = created.data["channel_id"]
        answers.append(created)
        answers.append(call(app, "POST", f"{CHANNELS}/{channel_id}/trigger"))
        scheduler.run_due()

    # Then the endpoint got the secret
    (request,) = server.received
    assert request.headers["Authorization"] == SECRET
    # ... and the occurrence settled, with the echo scrubbed from its result
    answers += [
        call(app, "GET", f"{CHANNELS}/{channel_id}"),
        call(app, "GET", OCCURRENCES),
        call(app, "GET", f"{OCCURRENCES}/{answers[1].data['id']}"),
        call(app, "GET", f"{CHANNELS}", {"name": "reports"}),
    ]
    occurrence = answers[-2].data
    assert occurrence["status"] == ("completed" if status == 200 else "failed")
    assert occurrence["result"] == '{"authorization": "[secret]"}'
    # ... the reference is what the definition keeps
    assert answers[2].data["target"]["secret_headers"] == {"Authorization": REFERENCE}
    # ... and the secret is in no row, no answer and no log line
    secret_part = SECRET.split()[-1]
    with ledger.engine.connect() as connection:
        for table in metadata.sorted_tables:
            for row in connection.execute(sa.select(table)):
                assert secret_part not in repr(tuple(row)), table.name
    for answer in answers:
        assert secret_part not in json.dumps(answer.body)
        assert secret_part not in json.dumps(answer.headers)
    assert caplog.records, "the scheduler logged nothing at all"
    for record in caplog.records:
        assert secret_part not in record.getMessage()
        assert secret_part not in (record.exc_text or "")


@pytest.fixture
def secrets_manager(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Secrets Manager (moto), in the region the API's clients use."""
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    forget_cached_secrets()
    with mock_aws():
        yield boto3.client("secretsmanager")
    forget_cached_secrets()


def new_http_channel(app: Any, name: str, url: str, reference: str) -> Answer:
    return call(
        app,
        "POST",
        CHANNELS,
        body={
            "name": name,
            "transport_config": {"schedule": "0 0 3 * * *"},
            "target": {"type": "http", "url": url, "secret_headers": {"Authorization": reference}},
        },
    )


def test_a_channel_that_would_send_a_bound_secret_to_another_host_is_refused_when_saved(
    sqlite_ledger: Ledger, secrets_manager: Any
) -> None:
    # Given the stack's secret source and a secret its tag binds to the reports host
    arn = secrets_manager.create_secret(
        Name="reports-token",
        SecretString=SECRET,
        Tags=[{"Key": "cronledger:secret-hosts", "Value": "reports.example.com"}],
    )["ARN"]
    app = create_app(sqlite_ledger, SETTINGS.replace(secrets="aws"))

    # When channels name it for another host, and for its own
    elsewhere = new_http_channel(app, "leak", "https://collector.example.net/in", arn)
    its_own = new_http_channel(app, "reports", "https://reports.example.com/hooks/nightly", arn)

    # Then the first is refused at the reference, naming the binding, and never stored
    assert elsewhere.status == 400, elsewhere.body
    assert elsewhere.error["details"] == [
        {
            "path": "target.secret_headers.Authorization",
            "code": "invalid",
            "message": f"secret {arn} may be sent only to reports.example.com (its tag "
            "cronledger:secret-hosts), not to collector.example.net",
        }
    ]
    assert its_own.status == 201, its_own.body
    listed = call(app, "GET", CHANNELS).data
    assert [c["name"] for c in listed] == ["reports"]
