"""The execute function: an asynchronous invocation of ids runs one attempt to a settled row,
every line it logs says which occurrence, channel, attempt and fencing token it is about, and
the events its settle makes are on the installation's bus when it returns."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from cronledger.aws import execute
from cronledger.ledger import CHANNEL_ACTIVE, CLAIMED, COMPLETED, FAILED, Ledger, NewOccurrence
from tests.aws import targets
from tests.aws.bus import BUS, INSTALLATION, bus_to_queue, received
from tests.aws.conftest import SERVICE
from tests.aws.invocations import FakeContext, emf_documents, log_lines, metric_values
from tests.unit.fixtures_targets import Answer, RecordingServer, forget_cached_secrets

# Pytest resets the warning filters runtime.py sets; an invocation that records only
# dimensioned metrics (or none) is expected, and Powertools would warn about it.
pytestmark = pytest.mark.filterwarnings("ignore:No application metrics to publish")

TRACE_ROOT = "1-67890abc-0123456789abcdef01234567"
TRACE_HEADER = f"Root={TRACE_ROOT};Parent=53995c3f42cd8ad8;Sampled=1"


def claimed_occurrence(
    ledger: Ledger, target: str = "record", document: dict[str, Any] | None = None, **config: Any
) -> tuple[str, str]:
    """An occurrence of an active channel, due and claimed as a dispatch would leave it;
    answers its id and the claimant. Its target is the Python function `target` of
    tests.aws.targets, or the target `document`."""
    channel = ledger.channels.create_channel(
        f"ledger-{target}",
        {"schedule": "0 0 2 * * *", **config},
        document or {"type": "python", "callable": f"tests.aws.targets:{target}"},
        timeout_ms=10_000,
        status=CHANNEL_ACTIVE,
    )
    new = NewOccurrence(
        channel.channel_id, channel.name, channel.version, ledger.db_now().replace(microsecond=0)
    )
    assert ledger.occurrences.insert_occurrence(new)
    (claimed,) = ledger.attempts.claim("claim-7f3a", 1, 60).leased
    return claimed.id, "claim-7f3a"


def invoke(event: Any) -> dict[str, Any]:
    answer: dict[str, Any] = execute.handler(event, FakeContext("cronledger-execute", 30_000))
    return answer


def test_a_dispatched_occurrence_runs_its_python_target_to_completed_under_the_xray_trace(
    container: Ledger, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a claimed occurrence, and Lambda's trace header for this invocation
    occurrence_id, claimant = claimed_occurrence(container)
    monkeypatch.setenv("_X_AMZN_TRACE_ID", TRACE_HEADER)

    # When the executor is invoked with the dispatch's ids
    answer = invoke({"occurrence_id": occurrence_id, "claimant": claimant})

    # Then the row is completed with the target's result, under the invocation's trace
    row = container.occurrences.get_occurrence(occurrence_id)
    assert answer["status"] == row.status == COMPLETED
    assert row.attempt == 1 and row.completed_at is not None
    assert row.trace_id == TRACE_ROOT
    assert row.result is not None and occurrence_id in row.result
    assert [e["trigger"]["occurrence_id"] for e in targets.received] == [occurrence_id]

    # And the settled status is counted in EMF, by status
    documents = emf_documents(capsys.readouterr().out)
    assert metric_values(documents, "Occurrences", {"service": SERVICE, "Status": COMPLETED}) == [
        1.0
    ]
    assert len(metric_values(documents, "ScheduleLagSeconds", {"service": SERVICE})) == 1


def test_every_line_of_an_attempt_names_its_occurrence_channel_attempt_and_fencing_token(
    container: Ledger,
) -> None:
    # Given a claimed occurrence of a singleton channel whose target fails (and is not retried)
    occurrence_id, claimant = claimed_occurrence(
        container, "fail", concurrency={"policy": "forbid"}, retry={"max_attempts": 1}
    )

    # When the executor runs it
    with log_lines() as lines:
        invoke({"occurrence_id": occurrence_id, "claimant": claimant})

    # Then the target module's warning and the handler's summary both carry the attempt's keys
    row = container.occurrences.get_occurrence(occurrence_id)
    assert row.status == FAILED and row.fencing_token is not None
    expected = {
        "occurrence_id": occurrence_id,
        "claimant": claimant,
        "channel_id": row.channel_id,
        "attempt": row.attempt,
        "fencing_token": row.fencing_token,
    }
    messages = [line["message"] for line in lines]
    assert any("python target" in m and "failed" in m for m in messages), messages
    assert "attempt finished" in messages
    for line in lines:
        assert {key: line.get(key) for key in expected} == expected, line
        assert line["service"] == SERVICE and line["function_name"] == "cronledger-execute"


@pytest.fixture
def secrets_from_aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The stack's secret source, and (for a test endpoint on this machine) loopback allowed."""
    monkeypatch.setenv("CRONLEDGER_SECRETS", "aws")
    monkeypatch.setenv("CRONLEDGER_HTTP_ALLOW_NETWORKS", "127.0.0.0/8")
    forget_cached_secrets()
    yield
    forget_cached_secrets()


def test_a_secret_from_secrets_manager_reaches_the_endpoint_and_no_log_line_row_or_answer(
    container: Ledger, secrets_from_aws: None, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a secret in Secrets Manager, named by an http channel whose endpoint echoes it
    secret = "Bearer 9f1c-aws-secret-77d0"
    arn = boto3.client("secretsmanager").create_secret(Name="hook", SecretString=secret)["ARN"]
    echo = Answer(status=500, body=json.dumps({"you sent": secret}).encode())
    with RecordingServer(echo) as server:
        target = {"type": "http", "url": server.url, "secret_headers": {"Authorization": arn}}
        occurrence_id, claimant = claimed_occurrence(
            container, "hook", target, retry={"max_attempts": 1}
        )

        # When the executor runs it
        with log_lines() as lines:
            answer = invoke({"occurrence_id": occurrence_id, "claimant": claimant})

    # Then the endpoint got the secret, the attempt failed on its answer, scrubbed of it
    (request,) = server.received
    assert request.headers["Authorization"] == secret
    row = container.occurrences.get_occurrence(occurrence_id)
    assert (row.status, row.error_message) == (
        FAILED,
        "HTTP 500 Internal Server Error (after 1 attempt)",
    )
    assert row.result == '{"you sent": "[secret]"}'
    # and the secret is nowhere else: not in a log line, the function's output or its answer
    printed = capsys.readouterr()
    assert any(line["message"] == "attempt finished" for line in lines)
    for text in (json.dumps(lines), printed.out, printed.err, json.dumps(answer), repr(row)):
        assert "9f1c-aws-secret" not in text


def test_a_dispatch_whose_claim_has_moved_on_writes_nothing(container: Ledger) -> None:
    # Given an occurrence claimed under one claimant
    occurrence_id, claimant = claimed_occurrence(container)

    # When an invocation arrives naming another (a stale or duplicate dispatch)
    answer = invoke({"occurrence_id": occurrence_id, "claimant": "claim-superseded"})

    # Then the attempt is lost, the row is still the real claimant's, and no target ran
    row = container.occurrences.get_occurrence(occurrence_id)
    assert answer["outcome"] == "lost" and answer["status"] is None
    assert (row.status, row.claimed_by) == (CLAIMED, claimant)
    assert targets.received == []


@pytest.mark.parametrize(
    "event",
    [
        {"occurrence_id": "0190f7a2-0000-7000-8000-000000000001"},
        {"occurrence_id": "", "claimant": "claim-1"},
        {"payload": {"report": "nightly"}},
        ["0190f7a2-0000-7000-8000-000000000001", "claim-1"],
    ],
)
def test_an_event_that_is_not_a_dispatch_of_two_ids_fails_the_invocation(
    container: Ledger, event: Any
) -> None:
    with pytest.raises(execute.MalformedDispatch, match="occurrence_id"):
        invoke(event)


def test_a_batch_runs_its_occurrences_side_by_side_each_to_its_own_row_and_log_keys(
    container: Ledger,
) -> None:
    # Given two claimed occurrences of different channels, under one claimant (a burst's batch)
    first, claimant = claimed_occurrence(container, "record")
    channel = container.channels.create_channel(
        "ledger-other",
        {"schedule": "0 0 3 * * *"},
        {"type": "python", "callable": "tests.aws.targets:record"},
        timeout_ms=10_000,
        status=CHANNEL_ACTIVE,
    )
    assert container.occurrences.insert_occurrence(
        NewOccurrence(
            channel.channel_id, channel.name, 1, container.db_now().replace(microsecond=0)
        )
    )
    (second,) = container.attempts.claim(claimant, 1, 60).leased

    # When one invocation carries both
    with log_lines() as lines:
        answer = invoke({"occurrence_ids": [first, second.id], "claimant": claimant})

    # Then each ran once to completed, and each summary line names its own occurrence
    assert [a["occurrence_id"] for a in answer["attempts"]] == [first, second.id]
    for occurrence_id in (first, second.id):
        assert container.occurrences.get_occurrence(occurrence_id).status == COMPLETED
    assert sorted(e["trigger"]["occurrence_id"] for e in targets.received) == sorted(
        [first, second.id]
    )
    finished = {line["occurrence_id"] for line in lines if line["message"] == "attempt finished"}
    assert finished == {first, second.id}


@pytest.mark.parametrize(
    "event",
    [
        {"occurrence_ids": [], "claimant": "claim-1"},
        {"occurrence_ids": ["a", "a"], "claimant": "claim-1"},
        {"occurrence_ids": ["a", 7], "claimant": "claim-1"},
    ],
)
def test_a_batch_that_is_empty_repeats_an_id_or_holds_a_non_id_is_refused(
    container: Ledger, event: Any
) -> None:
    with pytest.raises(execute.MalformedDispatch, match="occurrence_ids"):
        invoke(event)


def test_a_target_that_fails_its_last_attempt_is_on_the_bus_when_the_executor_returns(
    container: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the installation's bus forwarding to a queue, and a claimed occurrence whose
    # target fails on its only attempt
    monkeypatch.setenv("CRONLEDGER_EVENT_BUS_NAME", BUS)
    monkeypatch.setenv("CRONLEDGER_INSTALLATION", INSTALLATION)
    queue = bus_to_queue()
    occurrence_id, claimant = claimed_occurrence(container, "fail", retry={"max_attempts": 1})

    # When the executor is invoked with the dispatch's ids
    answer = invoke({"occurrence_id": occurrence_id, "claimant": claimant})

    # Then its failure was sent right after the settle, by the executor: no sweep has run,
    # and nothing waits in the outbox
    (message,) = received(queue)
    assert answer["status"] == FAILED
    assert message["detail-type"] == "Occurrence Failed"
    assert message["detail"]["occurrence_id"] == occurrence_id
    assert "the ledger printer is jammed" in message["detail"]["error"]
    assert container.events.outbox().undelivered == 0
