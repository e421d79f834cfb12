"""A manual trigger on AWS starts within seconds: once the API has answered a request that made
runs due now, it wakes the claim function with an asynchronous invoke (and only then)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from cronledger.api.models import PREFIX
from cronledger.aws import api
from cronledger.aws.invoker import dispatch_client
from cronledger.aws.wake import CLAIM_FUNCTION_NAME, makes_due_runs
from cronledger.ledger import Ledger
from tests.aws.invocations import FakeContext, forget_container, http_api_event, moto_function

pytestmark = pytest.mark.filterwarnings("ignore:No application metrics to publish")

CLAIM = "cronledger-claim"


@pytest.fixture
def wakes(container: Ledger, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[dict[str, Any]]]:
    """The claim function in moto, named where the stack names it; every invoke of it."""
    moto_function(CLAIM)
    monkeypatch.setenv(CLAIM_FUNCTION_NAME, CLAIM)
    forget_container()
    made: list[dict[str, Any]] = []
    client = dispatch_client()

    def asked(params: dict[str, Any], **_: Any) -> None:
        made.append(dict(params))

    client.meta.events.register("provide-client-params.lambda.Invoke", asked, "test-wake")
    yield made
    client.meta.events.unregister("provide-client-params.lambda.Invoke", unique_id="test-wake")


def call(method: str, path: str, body: Any = None) -> dict[str, Any]:
    answer: dict[str, Any] = api.handler(
        http_api_event(method, path, body), FakeContext("cronledger-api", 10_000)
    )
    return answer


def test_a_manual_trigger_wakes_claim_once_and_a_read_or_a_refusal_does_not(
    wakes: list[dict[str, Any]],
) -> None:
    created = call(
        "POST",
        f"{PREFIX}/channels",
        {
            "name": "nightly",
            "transport_config": {"schedule": "0 0 2 * * *"},
            "target": {"type": "python", "callable": "tests.aws.targets:record"},
            "status": "active",
        },
    )
    channel_id = json.loads(created["body"])["data"]["channel_id"]
    call("GET", f"{PREFIX}/channels")
    call("POST", f"{PREFIX}/channels/no-such-channel/trigger")
    assert wakes == []

    answer = call("POST", f"{PREFIX}/channels/{channel_id}/trigger")

    assert answer["statusCode"] == 202
    assert [(w["FunctionName"], w["InvocationType"]) for w in wakes] == [(CLAIM, "Event")]


@pytest.mark.parametrize(
    ("method", "path", "status", "wakes"),
    [
        ("POST", f"{PREFIX}/channels/c1/trigger", 202, True),
        ("POST", f"{PREFIX}/channels/c1/backfill", 202, True),
        ("POST", f"{PREFIX}/cron/occurrences/o1/retry", 200, True),
        ("POST", f"{PREFIX}/cron/occurrences/o1/cancel", 200, False),
        ("POST", f"{PREFIX}/channels/c1/trigger", 409, False),
        ("GET", f"{PREFIX}/channels/c1/trigger", 405, False),
    ],
)
def test_only_a_successful_trigger_backfill_or_retry_makes_runs_due_now(
    method: str, path: str, status: int, wakes: bool
) -> None:
    assert makes_due_runs(method, path, status) is wakes
