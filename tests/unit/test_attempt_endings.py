"""How a finished target's attempt is settled (SPEC §1.1 retry): a pure decision from the
outcome, the attempt number and the channel's retry policy."""

from __future__ import annotations

import random

import pytest

from cronledger.cron import RetryPolicy, compile_schedule
from cronledger.execute import Ending, ending, singleton_of
from cronledger.ledger import COMPLETED, FAILED, SingletonSpec
from cronledger.targets.interface import TargetOutcome

POLICY = RetryPolicy(max_attempts=3, backoff_secs=10, max_backoff_secs=300)
BOOM = TargetOutcome(ok=False, error="HTTP 503 Service Unavailable")


def test_a_success_completes_whatever_the_attempt() -> None:
    assert ending(TargetOutcome(ok=True, result="ok"), 3, POLICY) == Ending(COMPLETED)


@pytest.mark.parametrize(("attempt", "ceiling"), [(1, 10), (2, 20)])
def test_a_failure_with_attempts_left_is_retried_after_the_jittered_backoff(
    attempt: int, ceiling: int
) -> None:
    waits = [ending(BOOM, attempt, POLICY, random.Random(seed)) for seed in range(200)]

    assert {(w.status, w.error) for w in waits} == {(FAILED, BOOM.error)}
    retry_in = [w.retry_in for w in waits]
    assert all(r is not None and POLICY.backoff_secs <= r <= ceiling for r in retry_in)


def test_the_last_failure_is_final_and_says_how_many_attempts() -> None:
    assert ending(BOOM, 3, POLICY) == Ending(
        FAILED, "HTTP 503 Service Unavailable (after 3 attempts)"
    )
    once = RetryPolicy(max_attempts=1)
    assert ending(BOOM, 1, once) == Ending(FAILED, "HTTP 503 Service Unavailable (after 1 attempt)")


def test_an_attempt_past_its_policy_is_final_too() -> None:
    # A manual retry grants an attempt beyond the channel's policy: it is the last one.
    assert ending(BOOM, 4, POLICY).retry_in is None


@pytest.mark.parametrize(
    ("concurrency", "expected"),
    [
        ({}, None),
        ({"policy": "allow"}, None),
        ({"policy": "forbid"}, SingletonSpec("ch-1", 1, "forbid")),
        ({"policy": "queue_one", "slots": 2}, SingletonSpec("ch-1", 2, "queue_one")),
        ({"policy": "replace", "key": "reports"}, SingletonSpec("reports", 1, "replace")),
    ],
)
def test_the_key_an_attempt_holds_follows_the_overlap_policy(
    concurrency: dict[str, object], expected: SingletonSpec | None
) -> None:
    config: dict[str, object] = {"schedule": "0 * * * * *"}
    if concurrency:
        config["concurrency"] = concurrency
    assert singleton_of(compile_schedule(config, channel_id="ch-1")) == expected
