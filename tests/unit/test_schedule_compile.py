"""Compiling `transport_config`: defaults, every refusal in SPEC §1.1, and the scheduling hash."""

from __future__ import annotations

import random
from datetime import UTC, datetime
from typing import Any

import pytest

from cronledger.cron import FieldError, RetryPolicy, ScheduleInvalid, compile_schedule
from cronledger.errors import ValidationFailed

CHANNEL = "0190f3a2-7c4e-7a11-9b3d-5e2f1a0c9d77"


def refusals(config: Any) -> list[FieldError]:
    with pytest.raises(ScheduleInvalid) as caught:
        compile_schedule(config, CHANNEL)
    return caught.value.errors


def only_refusal(config: Any) -> FieldError:
    errors = refusals(config)
    assert len(errors) == 1, errors
    return errors[0]


def test_a_minimal_document_gets_every_default() -> None:
    s = compile_schedule({"schedule": "0 15 2 * * *"}, CHANNEL)

    assert s.expression == "0 15 2 * * *"
    assert s.timezone == "UTC"
    assert s.payload == {}
    assert s.misfire_policy == "latest"
    assert s.max_catch_up == 1
    assert s.concurrency_policy == "allow"
    assert s.singleton_key is None
    assert s.slots == 1
    assert s.retry == RetryPolicy(max_attempts=3, backoff_secs=10, max_backoff_secs=300)
    assert len(s.config_hash) == 64


def test_a_full_document_is_read_as_written() -> None:
    s = compile_schedule(
        {
            "schedule": "  0  */5 9-17 * JAN-MAR MON-FRI ",
            "timezone": "Europe/London",
            "payload": {"report": "daily", "n": [1, 2]},
            "misfire_policy": "catch_up",
            "max_catch_up": 12,
            "concurrency": {"policy": "forbid", "key": "billing.export", "slots": 3},
        },
        CHANNEL,
    )

    assert s.expression == "0 */5 9-17 * JAN-MAR MON-FRI"
    assert s.timezone == "Europe/London"
    assert s.payload == {"report": "daily", "n": [1, 2]}
    assert (s.misfire_policy, s.max_catch_up) == ("catch_up", 12)
    assert (s.concurrency_policy, s.singleton_key, s.slots) == ("forbid", "billing.export", 3)


@pytest.mark.parametrize("policy", ["forbid", "queue_one", "replace"])
def test_every_policy_but_allow_takes_a_singleton_key(policy: str) -> None:
    s = compile_schedule(
        {"schedule": "0 0 * * * *", "concurrency": {"policy": policy, "slots": 2}}, CHANNEL
    )

    assert (s.concurrency_policy, s.singleton_key, s.slots) == (policy, CHANNEL, 2)


def test_a_retry_policy_is_read_as_written_and_a_large_first_wait_lifts_the_default_cap() -> None:
    def retry(**given: int) -> RetryPolicy:
        return compile_schedule({"schedule": "0 0 * * * *", "retry": given}, CHANNEL).retry

    assert retry(max_attempts=1) == RetryPolicy(1, 10, 300)
    assert retry(max_attempts=5, backoff_secs=0, max_backoff_secs=0) == RetryPolicy(5, 0, 0)
    assert retry(backoff_secs=600) == RetryPolicy(3, 600, 600)


def test_retry_waits_at_least_the_backoff_and_at_most_the_doubled_capped_ceiling() -> None:
    policy = RetryPolicy(max_attempts=10, backoff_secs=10, max_backoff_secs=60)
    rng = random.Random(7)

    assert [policy.ceiling_secs(n) for n in range(1, 6)] == [10, 20, 40, 60, 60]
    for attempt in range(1, 10):
        waits = [policy.backoff_secs_after(attempt, rng) for _ in range(200)]
        assert all(10 <= w <= policy.ceiling_secs(attempt) for w in waits)
    assert policy.backoff_secs_after(1, rng) == 10, "the first retry waits exactly the backoff"
    spread = [policy.backoff_secs_after(4, rng) for _ in range(200)]
    assert max(spread) - min(spread) > 30, "later waits are jittered across their range"


def test_forbid_without_a_key_locks_on_the_channel_id() -> None:
    s = compile_schedule({"schedule": "0 0 * * * *", "concurrency": {"policy": "forbid"}}, CHANNEL)

    assert s.singleton_key == CHANNEL


def test_a_target_editing_its_payload_cannot_edit_the_schedule() -> None:
    given = {"items": [1]}
    s = compile_schedule({"schedule": "0 0 * * * *", "payload": given}, CHANNEL)

    given["items"].append(2)
    s.payload["items"].append(3)

    assert s.payload == {"items": [1]}


@pytest.mark.parametrize(
    ("config", "path", "code", "says"),
    [
        pytest.param(
            {"schedule": "15 2 * * *"},
            "transport_config.schedule",
            "invalid",
            "`0 15 2 * * *`",
            id="five fields",
        ),
        pytest.param(
            {"schedule": "0 15 2 * * * 2027"},
            "transport_config.schedule",
            "invalid",
            "`0 15 2 * * *`",
            id="seven fields",
        ),
        pytest.param(
            {"schedule": "0 0 25 * * *"},
            "transport_config.schedule",
            "invalid",
            "the hour field `25`",
            id="hour out of range",
        ),
        pytest.param(
            {"schedule": "0 61 * * * *"},
            "transport_config.schedule",
            "invalid",
            "the minute field `61`",
            id="minute out of range",
        ),
        pytest.param(
            {"schedule": "0 0 0 30 2 *"},
            "transport_config.schedule",
            "invalid",
            "never fires in the next 5 years",
            id="February 30th",
        ),
        pytest.param(
            {"schedule": "R 0 * * * *"},
            "transport_config.schedule",
            "invalid",
            "random or hashed",
            id="random field",
        ),
        pytest.param({}, "transport_config.schedule", "required", "six-field", id="no schedule"),
        pytest.param(
            {"schedule": 215},
            "transport_config.schedule",
            "type_mismatch",
            "must be a string",
            id="schedule not a string",
        ),
        pytest.param(
            {"schedule": "0 0 * * * *", "timezone": "IST"},
            "transport_config.timezone",
            "invalid",
            "Asia/Kolkata",
            id="IST",
        ),
        pytest.param(
            {"schedule": "0 0 * * * *", "timezone": "EST"},
            "transport_config.timezone",
            "invalid",
            "America/New_York",
            id="EST exists in tzdata but is still ambiguous",
        ),
        pytest.param(
            {"schedule": "0 0 * * * *", "timezone": "europe/london"},
            "transport_config.timezone",
            "invalid",
            '"Europe/London"',
            id="zone in the wrong case",
        ),
        pytest.param(
            {"schedule": "0 0 * * * *", "timezone": None},
            "transport_config.timezone",
            "type_mismatch",
            "null",
            id="null zone",
        ),
        pytest.param(
            {"schedule": "0 0 * * * *", "payload": ["a", "b"]},
            "transport_config.payload",
            "type_mismatch",
            "must be a JSON object",
            id="payload is an array",
        ),
        pytest.param(
            {"schedule": "0 0 * * * *", "payload": "text"},
            "transport_config.payload",
            "type_mismatch",
            "must be a JSON object",
            id="payload is a string",
        ),
        pytest.param(
            {"schedule": "0 0 * * * *", "payload": {"blob": "x" * (256 * 1024)}},
            "transport_config.payload",
            "too_long",
            "262,144",
            id="payload over 256 KiB",
        ),
        pytest.param(
            {"schedule": "0 0 * * * *", "payload": {"when": datetime(2026, 1, 1)}},
            "transport_config.payload",
            "invalid",
            "plain JSON",
            id="payload not JSON",
        ),
        pytest.param(
            {"schedule": "0 0 * * * *", "misfire_policy": "catch_up"},
            "transport_config.max_catch_up",
            "required",
            '"catch_up"',
            id="catch_up without max_catch_up",
        ),
        pytest.param(
            {"schedule": "0 0 * * * *", "misfire_policy": "catch_up", "max_catch_up": 0},
            "transport_config.max_catch_up",
            "invalid",
            'use misfire_policy "skip"',
            id="max_catch_up 0",
        ),
        pytest.param(
            {"schedule": "0 0 * * * *", "misfire_policy": "catch_up", "max_catch_up": 1001},
            "transport_config.max_catch_up",
            "invalid",
            "1..1000",
            id="max_catch_up 1001",
        ),
        pytest.param(
            {"schedule": "0 0 * * * *", "misfire_policy": "catch_up", "max_catch_up": True},
            "transport_config.max_catch_up",
            "type_mismatch",
            "a boolean",
            id="max_catch_up a boolean",
        ),
        pytest.param(
            {"schedule": "0 0 * * * *", "misfire_policy": "sometimes"},
            "transport_config.misfire_policy",
            "invalid",
            '"skip", "latest", "catch_up"',
            id="unknown misfire policy",
        ),
        pytest.param(
            {"schedule": "0 0 * * * *", "concurrency": {"policy": "forbid", "key": "-billing"}},
            "transport_config.concurrency.key",
            "invalid",
            "not a lock name",
            id="key starting with a dash",
        ),
        pytest.param(
            {"schedule": "0 0 * * * *", "concurrency": {"key": "a" * 129}},
            "transport_config.concurrency.key",
            "invalid",
            "1-128",
            id="key of 129 characters",
        ),
        pytest.param(
            {"schedule": "0 0 * * * *", "concurrency": {"policy": "queue"}},
            "transport_config.concurrency.policy",
            "invalid",
            '"allow", "forbid", "queue_one", "replace"',
            id="unknown concurrency policy",
        ),
        pytest.param(
            {"schedule": "0 0 * * * *", "retry": {"max_attempts": 0}},
            "transport_config.retry.max_attempts",
            "invalid",
            "1..20",
            id="no attempts at all",
        ),
        pytest.param(
            {"schedule": "0 0 * * * *", "retry": {"max_attempts": 21}},
            "transport_config.retry.max_attempts",
            "invalid",
            "1..20",
            id="21 attempts",
        ),
        pytest.param(
            {"schedule": "0 0 * * * *", "retry": {"backoff_secs": -1}},
            "transport_config.retry.backoff_secs",
            "invalid",
            "0..86400",
            id="negative backoff",
        ),
        pytest.param(
            {"schedule": "0 0 * * * *", "retry": {"backoff_secs": 60, "max_backoff_secs": 30}},
            "transport_config.retry.max_backoff_secs",
            "invalid",
            "below backoff_secs (60)",
            id="a cap below the first wait",
        ),
        pytest.param(
            {"schedule": "0 0 * * * *", "retry": {"max_attempts": "3"}},
            "transport_config.retry.max_attempts",
            "type_mismatch",
            "a string",
            id="attempts as text",
        ),
        pytest.param(
            {"schedule": "0 0 * * * *", "retry": {"attempts": 3}},
            "transport_config.retry.attempts",
            "invalid",
            'did you mean "max_attempts"?',
            id="unknown retry key",
        ),
        pytest.param(
            {"schedule": "0 0 * * * *", "retry": 3},
            "transport_config.retry",
            "type_mismatch",
            "must be an object",
            id="retry not an object",
        ),
        pytest.param(
            {"schedule": "0 0 * * * *", "concurrency": {"policy": "forbid", "slots": 101}},
            "transport_config.concurrency.slots",
            "invalid",
            "1..100",
            id="101 slots",
        ),
        pytest.param(
            {"schedule": "0 0 * * * *", "concurrency": {"polcy": "forbid"}},
            "transport_config.concurrency.polcy",
            "invalid",
            'did you mean "policy"?',
            id="unknown concurrency key",
        ),
        pytest.param(
            {"schedule": "0 0 * * * *", "misfire_polcy": "skip"},
            "transport_config.misfire_polcy",
            "invalid",
            'did you mean "misfire_policy"?',
            id="unknown key",
        ),
    ],
)
def test_a_bad_document_is_refused_with_a_path_a_code_and_a_fix(
    config: dict[str, Any], path: str, code: str, says: str
) -> None:
    error = only_refusal(config)

    assert (error.path, error.code) == (path, code)
    assert says in error.message


def test_a_document_that_is_not_an_object_is_refused_whole() -> None:
    error = only_refusal(["0 0 * * * *"])

    assert (error.path, error.code) == ("transport_config", "type_mismatch")


def test_every_problem_in_one_document_is_reported_at_once() -> None:
    errors = refusals(
        {
            "schedule": "15 2 * * *",
            "timezone": "IST",
            "payload": [1, 2, 3],
            "misfire_policy": "catch_up",
            "misfire_polcy": "skip",
        }
    )

    assert sorted((e.path, e.code) for e in errors) == [
        ("transport_config.max_catch_up", "required"),
        ("transport_config.misfire_polcy", "invalid"),
        ("transport_config.payload", "type_mismatch"),
        ("transport_config.schedule", "invalid"),
        ("transport_config.timezone", "invalid"),
    ]


def test_the_refusal_is_a_validation_failure_the_api_already_maps() -> None:
    with pytest.raises(ValidationFailed) as caught:
        compile_schedule({"schedule": "0 0 0 30 2 *"}, CHANNEL)

    assert "transport_config.schedule" in str(caught.value)
    assert caught.value.errors[0].as_dict()["code"] == "invalid"


def test_a_schedule_that_fires_before_the_calendar_ends_is_accepted_then_parks() -> None:
    # Given a leap-day schedule compiled in 9996, whose next leap day (10000) is past the calendar
    s = compile_schedule(
        {"schedule": "0 0 0 29 2 *"}, CHANNEL, now=datetime(9996, 1, 1, tzinfo=UTC)
    )

    # Then it fires once more and then never again
    assert s.next_after(datetime(9996, 1, 1, tzinfo=UTC)) == datetime(9996, 2, 29, tzinfo=UTC)
    assert s.next_after(datetime(9996, 2, 29, tzinfo=UTC)) is None


def test_a_naive_now_is_refused() -> None:
    with pytest.raises(ValueError, match="naive"):
        compile_schedule({"schedule": "0 0 * * * *"}, CHANNEL, now=datetime(2026, 1, 1))


BASE: dict[str, Any] = {
    "schedule": "0 15 2 * * *",
    "timezone": "Europe/London",
    "misfire_policy": "catch_up",
    "max_catch_up": 10,
    "payload": {"a": 1},
    "concurrency": {"policy": "forbid", "key": "k1", "slots": 1},
}


def hash_of(**changes: Any) -> str:
    return compile_schedule({**BASE, **changes}, CHANNEL).config_hash


@pytest.mark.parametrize(
    "change",
    [
        pytest.param({"schedule": "0 15 3 * * *"}, id="expression"),
        pytest.param({"timezone": "Europe/Dublin"}, id="zone"),
        pytest.param({"misfire_policy": "skip", "max_catch_up": 10}, id="policy"),
        pytest.param({"max_catch_up": 11}, id="catch-up bound"),
    ],
)
def test_the_hash_moves_with_what_decides_when_the_schedule_fires(change: dict[str, Any]) -> None:
    assert hash_of(**change) != hash_of()


@pytest.mark.parametrize(
    "change",
    [
        pytest.param({"payload": {"a": 2, "b": [1]}}, id="payload"),
        pytest.param({"concurrency": {"policy": "allow"}}, id="concurrency policy"),
        pytest.param({"concurrency": {"policy": "forbid", "key": "k2", "slots": 5}}, id="key"),
        pytest.param({"schedule": " 0   15 2 * * * "}, id="whitespace in the expression"),
        pytest.param({"retry": {"max_attempts": 7, "backoff_secs": 1}}, id="retry"),
    ],
)
def test_the_hash_ignores_what_the_job_does(change: dict[str, Any]) -> None:
    assert hash_of(**change) == hash_of()


def test_an_inert_catch_up_bound_does_not_move_the_hash() -> None:
    assert hash_of(misfire_policy="latest", max_catch_up=3) == hash_of(
        misfire_policy="latest", max_catch_up=7
    )
    assert hash_of(misfire_policy="latest", max_catch_up=3) != hash_of(
        misfire_policy="skip", max_catch_up=3
    )


def test_the_hash_is_the_same_on_every_compile_and_for_every_channel() -> None:
    again = compile_schedule(BASE, "another-channel").config_hash

    assert hash_of() == hash_of() == again
