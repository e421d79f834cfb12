from __future__ import annotations

import io
import json
import threading
import zipfile
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from cronledger.aws import invoker as lambda_invoker
from cronledger.aws.invoker import (
    DISPATCH_LANES,
    MOST_PER_INVOKE,
    LambdaInvoker,
    invoke_batches,
)
from cronledger.invokers import DispatchFailed, Invoker, ThreadPoolInvoker
from cronledger.targets.clients import AwsClients
from tests.unit.fixtures_targets import Answer, RecordingServer

# --- the thread pool ----------------------------------------------------------------------


def in_flight(pool: ThreadPoolInvoker) -> int:
    """Attempts dispatched and not yet finished, queued ones included."""
    with pool._idle:
        return pool._in_flight


class Attempts:
    """A stand-in for `run_attempt` that records its ids and can be held at a gate."""

    def __init__(self, hold: bool = False) -> None:
        self.ran: list[tuple[str, str]] = []
        self.started = threading.Semaphore(0)
        self.gate = threading.Event()
        if not hold:
            self.gate.set()
        self._lock = threading.Lock()

    def __call__(self, occurrence_id: str, claimant: str) -> None:
        self.started.release()
        self.gate.wait(10)
        with self._lock:
            self.ran.append((occurrence_id, claimant))
        if occurrence_id == "explodes":
            raise RuntimeError("database went away")


def test_each_dispatched_attempt_runs_once_with_its_own_ids() -> None:
    attempts = Attempts()
    pool = ThreadPoolInvoker(attempts, max_workers=3)
    invoker: Invoker = pool

    for n in range(10):
        assert invoker.dispatch_all([f"occ-{n}"], f"claim-{n}") == {}

    assert pool.drain(5.0) is True
    assert sorted(attempts.ran) == sorted((f"occ-{n}", f"claim-{n}") for n in range(10))
    assert in_flight(pool) == 0


def test_queued_and_running_attempts_both_count_as_in_flight_until_they_finish() -> None:
    # Given two workers held busy and a third attempt queued behind them
    attempts = Attempts(hold=True)
    pool = ThreadPoolInvoker(attempts, max_workers=2)
    for n in range(3):
        pool.dispatch(f"occ-{n}", "claim")
    assert attempts.started.acquire(timeout=5) and attempts.started.acquire(timeout=5)

    # Then all three are in flight and a drain gives up at its deadline
    assert in_flight(pool) == 3
    assert pool.drain(0.05) is False

    # When the attempts may finish, the drain completes and nothing is left in flight
    attempts.gate.set()
    assert pool.drain(5.0) is True
    assert in_flight(pool) == 0
    assert len(attempts.ran) == 3


def test_an_attempt_that_raises_frees_its_slot_and_later_attempts_still_run() -> None:
    attempts = Attempts()
    pool = ThreadPoolInvoker(attempts, max_workers=1)

    pool.dispatch("explodes", "claim-1")
    pool.dispatch("occ-2", "claim-2")

    assert pool.drain(5.0) is True
    assert attempts.ran == [("explodes", "claim-1"), ("occ-2", "claim-2")]
    assert in_flight(pool) == 0


def test_after_shutdown_a_dispatch_is_refused_and_running_attempts_are_waited_for() -> None:
    attempts = Attempts(hold=True)
    pool = ThreadPoolInvoker(attempts, max_workers=1)
    pool.dispatch("occ-1", "claim-1")
    assert attempts.started.acquire(timeout=5)

    assert pool.shutdown(0.05) is False  # still running at the deadline
    with pytest.raises(DispatchFailed):
        pool.dispatch("occ-2", "claim-2")

    attempts.gate.set()
    assert pool.drain(5.0) is True
    assert attempts.ran == [("occ-1", "claim-1")]


def test_room_is_the_free_workers_and_none_once_the_pool_is_shut_down() -> None:
    # Given a pool of three with one attempt held running
    attempts = Attempts(hold=True)
    pool = ThreadPoolInvoker(attempts, max_workers=3)
    pool.dispatch("occ-1", "claim-1")
    assert attempts.started.acquire(timeout=5)
    assert pool.room == 2

    # When it is shut down, even with that attempt finished, there is no room at all
    pool.shutdown(0.0)
    attempts.gate.set()
    assert pool.drain(5.0) is True
    assert in_flight(pool) == 0
    assert pool.room == 0


# --- lambda -------------------------------------------------------------------------------


@pytest.fixture
def moto_lambda(aws_env: None) -> Iterator[str]:
    config: Any = {"lambda": {"use_docker": False}}
    with mock_aws(config=config):
        role = boto3.client("iam").create_role(RoleName="executor", AssumeRolePolicyDocument="{}")
        code = io.BytesIO()
        with zipfile.ZipFile(code, "w") as archive:
            archive.writestr("handler.py", "def handle(event, context):\n    return None\n")
        boto3.client("lambda").create_function(
            FunctionName="cronledger-execute",
            Runtime="python3.11",
            Role=role["Role"]["Arn"],
            Handler="handler.handle",
            Code={"ZipFile": code.getvalue()},
        )
        yield "cronledger-execute"


def test_a_lambda_dispatch_is_an_event_invocation_accepted_with_the_ids_only(
    moto_lambda: str,
) -> None:
    client = boto3.client("lambda")
    answers: list[dict[str, Any]] = []

    def keep(parsed: dict[str, Any], **_: Any) -> None:
        # moto's Docker-less Lambda echoes the payload it accepted
        answers.append({"status": parsed["StatusCode"], "payload": parsed["Payload"].read()})

    client.meta.events.register("after-call.lambda.Invoke", keep)

    assert LambdaInvoker(moto_lambda, client=client).dispatch_all(["occ-1"], "claim-abc") == {}

    assert [a["status"] for a in answers] == [202]
    assert json.loads(answers[0]["payload"]) == {"occurrence_id": "occ-1", "claimant": "claim-abc"}


def test_the_lambda_api_receives_an_asynchronous_invoke_of_the_named_function(
    aws_env: None,
) -> None:
    with RecordingServer(Answer(status=202, body=b"")) as lambda_api:
        client = boto3.client("lambda", endpoint_url=lambda_api.url)
        invoker = LambdaInvoker("cronledger-execute", client=client)
        assert invoker.dispatch_all(["occ-1"], "claim-abc") == {}

    (request,) = lambda_api.received
    assert request.path == "/2015-03-31/functions/cronledger-execute/invocations"
    assert request.headers["X-Amz-Invocation-Type"] == "Event"
    assert json.loads(request.body) == {"occurrence_id": "occ-1", "claimant": "claim-abc"}


@pytest.mark.parametrize(
    "answer",
    [
        Answer(status=200, body=b"{}"),  # ran synchronously: not the asynchronous hand-over
        Answer(
            status=404,
            body=b'{"Message": "Function not found"}',
            headers={"X-Amzn-ErrorType": "ResourceNotFoundException"},
        ),
    ],
)
def test_anything_but_a_202_is_a_failed_dispatch(aws_env: None, answer: Answer) -> None:
    with RecordingServer(answer) as lambda_api:
        client = boto3.client("lambda", endpoint_url=lambda_api.url)
        invoker = LambdaInvoker("cronledger-execute", client=client)
        (failed,) = invoker.dispatch_all(["occ-1"], "claim-abc").items()
    assert failed[0] == "occ-1"
    assert "cronledger-execute" in failed[1]


@pytest.mark.parametrize(("retried", "requests"), [(True, 3), (False, 1)])
def test_a_dispatch_is_retried_and_a_synchronous_target_invoke_never_is(
    aws_env: None, retried: bool, requests: int
) -> None:
    unavailable = Answer(
        status=503,
        body=b'{"Message": "busy"}',
        headers={"X-Amzn-ErrorType": "ServiceException"},
    )
    with RecordingServer(unavailable) as lambda_api:
        client = AwsClients(endpoint_url=lambda_api.url).lambda_(timeout_secs=5, retried=retried)
        invoker = LambdaInvoker("cronledger-execute", client=client)
        assert list(invoker.dispatch_all(["occ-1"], "claim-abc")) == ["occ-1"]
    assert len(lambda_api.received) == requests


def test_the_claim_dispatches_through_a_retried_client_with_a_short_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[dict[str, Any]] = []

    class Clients:
        def lambda_(self, **options: Any) -> Any:
            asked.append(options)
            return self

        def invoke(self, **_call: Any) -> dict[str, int]:
            return {"StatusCode": 202}

    monkeypatch.setattr(lambda_invoker, "default_clients", Clients)
    assert LambdaInvoker("cronledger-execute").dispatch_all(["occ-1"], "claim-abc") == {}
    assert asked == [
        {
            "timeout_secs": lambda_invoker.DISPATCH_TIMEOUT_SECS,
            "retried": True,
            "connections": lambda_invoker.DISPATCH_LANES,
        }
    ]
    assert lambda_invoker.DISPATCH_TIMEOUT_SECS <= 10


def test_budgets_within_one_second_share_a_client(aws_env: None) -> None:
    clients = AwsClients()
    first = clients.sqs(timeout_secs=57.3)
    assert clients.sqs(timeout_secs=57.8) is first  # deadline-cut budgets differ every call
    assert first.meta.config.read_timeout == 58
    assert clients.sqs(timeout_secs=58.2) is not first


# --- bursts -------------------------------------------------------------------------------


@pytest.mark.parametrize("count", [1, DISPATCH_LANES, DISPATCH_LANES + 1, 500, 10_000])
def test_a_claim_is_split_into_invokes_holding_each_occurrence_once_in_order(count: int) -> None:
    ids = [f"occ-{n}" for n in range(count)]

    batches = invoke_batches(ids)

    assert [i for batch in batches for i in batch] == ids
    assert max(map(len, batches)) <= MOST_PER_INVOKE
    if count <= DISPATCH_LANES:
        assert all(len(batch) == 1 for batch in batches)  # one executor per occurrence
    else:
        # as few invokes as the lanes allow, never more than a batch each
        assert len(batches) >= min(DISPATCH_LANES, -(-count // MOST_PER_INVOKE))
        assert len(batches) <= max(DISPATCH_LANES, -(-count // MOST_PER_INVOKE)) + 1


def test_a_burst_reaches_the_lambda_api_as_concurrent_batches_each_id_once(
    aws_env: None,
) -> None:
    # Given a Lambda API that takes 50 ms to accept each invoke
    ids = [f"occ-{n}" for n in range(200)]
    with RecordingServer(Answer(status=202, body=b"", delay_secs=0.05)) as lambda_api:
        client = AwsClients(endpoint_url=lambda_api.url).lambda_(
            timeout_secs=5, retried=True, connections=DISPATCH_LANES
        )

        # When one claim's 200 occurrences are dispatched
        failed = LambdaInvoker("cronledger-execute", client=client).dispatch_all(ids, "claim-b")

    # Then every occurrence reached the executor exactly once, in batches under one claimant
    payloads = [json.loads(r.body) for r in lambda_api.received]
    assert failed == {}
    assert sorted(i for p in payloads for i in p["occurrence_ids"]) == sorted(ids)
    assert {p["claimant"] for p in payloads} == {"claim-b"}
    assert len(payloads) == len(invoke_batches(ids)) < len(ids)
    assert all(r.headers["X-Amz-Invocation-Type"] == "Event" for r in lambda_api.received)


def test_a_refused_batch_reports_each_of_its_occurrences_and_only_those(aws_env: None) -> None:
    refused = Answer(
        status=429,
        body=b'{"Message": "Rate exceeded"}',
        headers={"X-Amzn-ErrorType": "TooManyRequestsException"},
    )
    with RecordingServer(refused) as lambda_api:
        client = AwsClients(endpoint_url=lambda_api.url).lambda_(timeout_secs=5, retried=False)
        ids = [f"occ-{n}" for n in range(3 * DISPATCH_LANES)]

        failed = LambdaInvoker("cronledger-execute", client=client).dispatch_all(ids, "claim-r")

    assert sorted(failed) == sorted(ids)
    assert all("cronledger-execute" in why for why in failed.values())


def test_the_claim_service_loads_no_aws_sdk() -> None:
    # The Lambda invoker lives under cronledger.aws: the service itself (and the local
    # runner's claim loop) never pays botocore's import.
    import os
    import subprocess
    import sys
    from pathlib import Path

    import cronledger

    probe = (
        "import sys, cronledger.claim, cronledger.invokers; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('boto3', 'botocore')))"
    )
    this_tree = {"PYTHONPATH": str(Path(cronledger.__file__).parents[1])}
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        env={**os.environ, **this_tree},
    )
    assert done.stdout.strip() == "[]"
