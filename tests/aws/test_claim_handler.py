"""The claim function: an EventBridge tick leases what is due and hands each occurrence to the
executor function as an asynchronous invocation carrying ids only; what it settles as
abandoned is on the installation's bus when it returns."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from cronledger.aws import claim
from cronledger.aws.invoker import dispatch_client
from cronledger.errors import CronledgerError
from cronledger.ledger import CLAIMED, FAILED, Ledger, NewOccurrence
from tests.aws.bus import BUS, INSTALLATION, bus_to_queue, received
from tests.aws.invocations import FakeContext, moto_function, scheduled_event
from tests.ledger.helpers import LEASE, active_channel, expire_claim, seed_due, start

# Pytest resets the warning filters runtime.py sets; an invocation that records only
# dimensioned metrics (or none) is expected, and Powertools would warn about it.
pytestmark = pytest.mark.filterwarnings("ignore:No application metrics to publish")

EXECUTOR = "cronledger-execute"


@pytest.fixture
def executor_function(container: Ledger, monkeypatch: pytest.MonkeyPatch) -> str:
    """The executor function, created in moto, and its name where the stack puts it."""
    moto_function(EXECUTOR)
    monkeypatch.setenv(claim.EXECUTE_FUNCTION_NAME, EXECUTOR)
    return EXECUTOR


@pytest.fixture
def invocations() -> Iterator[list[dict[str, Any]]]:
    """Every Invoke the functions' Lambda client makes: what was asked, and Lambda's status."""
    client = dispatch_client()
    made: list[dict[str, Any]] = []

    def asked(params: dict[str, Any], **_: Any) -> None:
        made.append({"request": dict(params)})

    lock = threading.Lock()

    def answered(parsed: dict[str, Any], **_: Any) -> None:
        # Invokes run side by side on the dispatch lanes: answers pair with asks in any order.
        with lock:
            next(call for call in made if "status" not in call)["status"] = parsed["StatusCode"]

    client.meta.events.register("provide-client-params.lambda.Invoke", asked, "test-asked")
    client.meta.events.register("after-call.lambda.Invoke", answered, "test-answered")
    try:
        yield made
    finally:
        client.meta.events.unregister("provide-client-params.lambda.Invoke", unique_id="test-asked")
        client.meta.events.unregister("after-call.lambda.Invoke", unique_id="test-answered")


def test_a_tick_dispatches_each_due_occurrence_as_an_event_invocation_of_ids_only(
    container: Ledger, executor_function: str, invocations: list[dict[str, Any]]
) -> None:
    # Given two occurrences that fell due half a minute ago
    due = {seed_due(container, "reports").id, seed_due(container, "backups").id}

    # When the scheduled event arrives, with little time left so the loop is short
    answer = claim.handler(
        scheduled_event("Cronledger-Claim"), FakeContext("cronledger-claim", 3_600)
    )

    # Then each was handed over once, asynchronously, with its ids and nothing else
    assert answer == {"dispatched": 2}
    assert [call["status"] for call in invocations] == [202, 202]
    payloads = [json.loads(call["request"]["Payload"]) for call in invocations]
    for call in invocations:
        assert call["request"]["FunctionName"] == executor_function
        assert call["request"]["InvocationType"] == "Event"
    assert {p["occurrence_id"] for p in payloads} == due
    assert all(set(p) == {"occurrence_id", "claimant"} for p in payloads)

    # And each row is leased to the claimant its payload names, for its first attempt
    for payload in payloads:
        row = container.occurrences.get_occurrence(payload["occurrence_id"])
        assert (row.status, row.claimed_by, row.attempt) == (CLAIMED, payload["claimant"], 1)
        assert row.claimed_until is not None and row.claimed_until > container.db_now()


def test_without_the_executors_name_a_tick_fails_naming_the_variable_and_claims_nothing(
    container: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(claim.EXECUTE_FUNCTION_NAME, raising=False)
    occurrence = seed_due(container)

    with pytest.raises(CronledgerError, match=claim.EXECUTE_FUNCTION_NAME):
        claim.handler(scheduled_event("Cronledger-Claim"), FakeContext("cronledger-claim", 3_600))

    assert container.occurrences.get_occurrence(occurrence.id).status == "pending"


def test_a_last_attempt_whose_lease_ran_out_is_on_the_bus_as_abandoned_when_the_tick_ends(
    container: Ledger, executor_function: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the installation's bus forwarding to a queue, and an occurrence whose only
    # attempt started and then stopped renewing its lease
    monkeypatch.setenv("CRONLEDGER_EVENT_BUS_NAME", BUS)
    monkeypatch.setenv("CRONLEDGER_INSTALLATION", INSTALLATION)
    queue = bus_to_queue()
    channel = active_channel(container, "invoices")
    new = NewOccurrence(
        channel.channel_id,
        channel.name,
        channel.version,
        container.db_now() - timedelta(minutes=5),
        max_attempts=1,
    )
    assert container.occurrences.insert_occurrence(new)
    (claimed,) = container.attempts.claim("claim-gone", 1, LEASE).leased
    start(container, claimed, "claim-gone")
    expire_claim(container, claimed.id)

    # When the scheduled event arrives
    claim.handler(scheduled_event("Cronledger-Claim"), FakeContext("cronledger-claim", 3_600))

    # Then the tick that settled it abandoned has told the bus, and nothing waits
    (message,) = received(queue)
    assert message["detail-type"] == "Occurrence Abandoned"
    assert message["detail"]["occurrence_id"] == claimed.id
    assert message["detail"]["channel_name"] == "invoices"
    assert container.occurrences.get_occurrence(claimed.id).status == FAILED
    assert container.events.outbox().undelivered == 0
