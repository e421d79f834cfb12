"""Target documents, the trigger envelope, excerpts and the python target (no AWS needed)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given, strategies as st

from cronledger.errors import ValidationFailed
from cronledger.excerpts import RESULT_EXCERPT_BYTES, truncate_excerpt
from cronledger.targets import (
    KINDS,
    run_target,
    target_errors,
    target_ref,
    validate_target,
)
from cronledger.targets.envelope import Envelope, build_envelope
from cronledger.targets.policy import TargetPolicy
from tests.unit import fixtures_targets

#: What these tests' operator allows: the suite's own modules as python targets.
POLICY = TargetPolicy(python_modules=("tests",))

LAMBDA_ARN = "arn:aws:lambda:eu-west-1:123456789012:function:nightly-report"
MACHINE_ARN = "arn:aws:states:eu-west-1:123456789012:stateMachine:nightly"
QUEUE_URL = "https://sqs.eu-west-1.amazonaws.com/123456789012/nightly-jobs"

VALID: dict[str, dict[str, Any]] = {
    "lambda": {"type": "lambda", "function_arn": LAMBDA_ARN, "qualifier": "live"},
    "http": {
        "type": "http",
        "url": "https://example.com/hooks/nightly?team=ops",
        "method": "put",
        "headers": {"X-Team": "ops", "X-Run": "nightly"},
    },
    "stepfunctions": {"type": "stepfunctions", "state_machine_arn": MACHINE_ARN, "wait": False},
    "sqs": {"type": "sqs", "queue_url": QUEUE_URL},
    "eventbridge": {"type": "eventbridge", "source": "com.example.reports", "detail_type": "due"},
    "python": {"type": "python", "callable": "tests.unit.fixtures_targets:record_envelope"},
}


def envelope(**overrides: Any) -> Envelope:
    fields: dict[str, Any] = {
        "payload": {"report": "nightly"},
        "trigger": "cron",
        "occurrence_id": "0190a6c3-7e2f-7c41-8b3a-2d4e5f6a7b8c",
        "channel_id": "ch-1",
        "channel_name": "nightly report",
        "scheduled_for": datetime(2026, 9, 1, 2, 15, tzinfo=UTC),
        "started_at": datetime(2026, 9, 1, 2, 15, 0, 250_000, tzinfo=UTC),
        "timezone": "Europe/London",
        "attempt": 1,
        "singleton_key": "ch-1",
        "fencing_token": 7,
    }
    fields.update(overrides)
    return build_envelope(**fields)


def errors_of(doc: Any) -> list[tuple[str, str]]:
    return [(e.path, e.code) for e in target_errors(doc, POLICY)]


# --- validation ---------------------------------------------------------------------------


def test_every_target_type_of_the_spec_is_offered() -> None:
    assert sorted(KINDS) == sorted(VALID)


@pytest.mark.parametrize("type_name", sorted(VALID))
def test_a_well_formed_document_of_each_type_has_no_errors(type_name: str) -> None:
    assert target_errors(VALID[type_name], POLICY) == []
    validate_target(VALID[type_name], POLICY)


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        ([{"type": "http"}], [("target", "type_mismatch")]),
        ({"url": "https://example.com"}, [("target.type", "required")]),
        ({"type": ["http", "sqs"]}, [("target.type", "type_mismatch")]),
        ({"type": "cron"}, [("target.type", "invalid")]),
        # lambda
        ({"type": "lambda"}, [("target.function_arn", "required")]),
        ({"type": "lambda", "function_arn": 12}, [("target.function_arn", "type_mismatch")]),
        ({"type": "lambda", "function_arn": "has space"}, [("target.function_arn", "invalid")]),
        ({"type": "lambda", "function_arn": "f" * 171}, [("target.function_arn", "too_long")]),
        (
            {"type": "lambda", "function_arn": f"{LAMBDA_ARN}:3", "qualifier": "live"},
            [("target.qualifier", "invalid")],
        ),
        (
            {"type": "lambda", "function_arn": "f", "qualifier": "a b"},
            [("target.qualifier", "invalid")],
        ),
        # http
        ({"type": "http"}, [("target.url", "required")]),
        ({"type": "http", "url": "ftp://example.com/x"}, [("target.url", "invalid")]),
        ({"type": "http", "url": "https://u:p@example.com/x"}, [("target.url", "invalid")]),
        ({"type": "http", "url": "https://example.com/x?api_key=abc"}, [("target.url", "invalid")]),
        (
            {"type": "http", "url": "https://example.com/" + "a" * 2048},
            [("target.url", "too_long")],
        ),
        (
            {"type": "http", "url": "https://example.com", "method": "DELETE"},
            [("target.method", "invalid")],
        ),
        (
            {"type": "http", "url": "https://example.com", "headers": ["X: 1"]},
            [("target.headers", "type_mismatch")],
        ),
        # stepfunctions
        ({"type": "stepfunctions"}, [("target.state_machine_arn", "required")]),
        (
            {"type": "stepfunctions", "state_machine_arn": LAMBDA_ARN},
            [("target.state_machine_arn", "invalid")],
        ),
        (
            {"type": "stepfunctions", "state_machine_arn": MACHINE_ARN, "wait": "true"},
            [("target.wait", "type_mismatch")],
        ),
        # sqs
        ({"type": "sqs", "queue_url": "nightly-jobs"}, [("target.queue_url", "invalid")]),
        ({"type": "sqs", "queue_url": "   "}, [("target.queue_url", "required")]),
        # eventbridge
        ({"type": "eventbridge", "source": "x"}, [("target.detail_type", "required")]),
        (
            {"type": "eventbridge", "source": "aws.events", "detail_type": "d"},
            [("target.source", "invalid")],
        ),
        (
            {"type": "eventbridge", "source": "cronledger.acme", "detail_type": "d"},
            [("target.source", "invalid")],
        ),
        (
            {"type": "eventbridge", "source": "s", "detail_type": "d" * 129},
            [("target.detail_type", "too_long")],
        ),
        (
            {"type": "eventbridge", "event_bus_name": "bad bus", "source": "s", "detail_type": "d"},
            [("target.event_bus_name", "invalid")],
        ),
        # python
        ({"type": "python", "callable": "reports.nightly.run"}, [("target.callable", "invalid")]),
        ({"type": "python", "callable": "reports.class:run"}, [("target.callable", "invalid")]),
        ({"type": "python", "callable": ["reports:run"]}, [("target.callable", "type_mismatch")]),
    ],
)
def test_a_bad_document_is_refused_at_the_field_that_is_wrong(
    doc: Any, expected: list[tuple[str, str]]
) -> None:
    assert errors_of(doc) == expected


def test_every_problem_is_reported_at_once_and_unknown_keys_are_refused() -> None:
    doc = {
        "type": "eventbridge",
        "event_bus": "ops",  # a typo for event_bus_name
        "source": 7,
        "Detail_Type": "due",
    }

    with pytest.raises(ValidationFailed) as refused:
        validate_target(doc, POLICY)

    assert [(e.path, e.code) for e in refused.value.errors] == [
        ("target.Detail_Type", "invalid"),
        ("target.event_bus", "invalid"),
        ("target.source", "type_mismatch"),
        ("target.detail_type", "required"),
    ]
    unknown = refused.value.errors[1]
    assert "event_bus_name" in unknown.message  # the message lists what the type takes


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("Authorization", "Bearer abc"),
        ("proxy-authorization", "Basic dXNlcjpwYXNz"),
        ("X-Api-Key", "abc123"),
        ("X-Auth-Token", "abc123"),
        ("Cookie", "session=abc"),
        ("X-Client-Secret", "abc"),
        ("X-Forwarded", "Bearer abc"),
        ("X-Caller", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.sig"),
        ("X-Caller", "AKIAABCDEFGHIJKLMNOP"),
    ],
)
def test_secret_looking_headers_are_refused_in_plain_config(name: str, value: str) -> None:
    doc = {"type": "http", "url": "https://example.com/hook", "headers": {name: value}}

    (error,) = target_errors(doc, POLICY)

    assert (error.path, error.code) == (f"target.headers.{name}", "invalid")
    assert "credential" in error.message


def test_headers_cronledger_sets_itself_or_that_could_split_a_request_are_refused() -> None:
    doc = {
        "type": "http",
        "url": "https://example.com/hook",
        "headers": {"Content-Type": "text/plain", "X-Note": "a\r\nX-Evil: 1", "X-Count": 3},
    }

    assert errors_of(doc) == [
        ("target.headers.Content-Type", "invalid"),
        ("target.headers.X-Note", "invalid"),
        ("target.headers.X-Count", "type_mismatch"),
    ]


def test_null_on_an_optional_key_means_not_given() -> None:
    doc = {"type": "lambda", "function_arn": "nightly-report", "qualifier": None}

    assert target_errors(doc, POLICY) == []
    assert target_ref(doc) == "lambda:nightly-report"


# --- references ---------------------------------------------------------------------------


def test_each_type_has_a_short_reference_for_the_ledger_without_query_strings() -> None:
    assert [target_ref(VALID[t]) for t in sorted(VALID)] == [
        "eventbridge:default:com.example.reports",
        "http:PUT https://example.com/hooks/nightly",
        f"lambda:{LAMBDA_ARN}:live",
        "python:tests.unit.fixtures_targets:record_envelope",
        f"sqs:{QUEUE_URL}",
        f"stepfunctions:{MACHINE_ARN}",
    ]


# --- the envelope -------------------------------------------------------------------------


def test_the_envelope_has_exactly_the_shape_of_the_spec() -> None:
    built = envelope(scheduled_for=datetime(2026, 9, 1, 3, 15, tzinfo=timezone(timedelta(hours=1))))

    assert built == {
        "payload": {"report": "nightly"},
        "trigger": {
            "type": "cron",
            "occurrence_id": "0190a6c3-7e2f-7c41-8b3a-2d4e5f6a7b8c",
            "channel_id": "ch-1",
            "channel_name": "nightly report",
            "scheduled_for": "2026-09-01T02:15:00Z",
            "due_at": "2026-09-01T02:15:00Z",
            "started_at": "2026-09-01T02:15:00.250000Z",
            "timezone": "Europe/London",
            "attempt": 1,
            "singleton_key": "ch-1",
            "fencing_token": 7,
        },
    }


def test_a_jittered_occurrence_carries_its_due_time_beside_its_instant() -> None:
    built = envelope(due_at=datetime(2026, 9, 1, 2, 15, 41, 125_000, tzinfo=UTC))

    assert built["trigger"]["scheduled_for"] == "2026-09-01T02:15:00Z"
    assert built["trigger"]["due_at"] == "2026-09-01T02:15:41.125000Z"


def test_an_envelope_without_a_singleton_carries_nulls_in_json() -> None:
    built = envelope(singleton_key=None, fencing_token=None)

    trigger = json.loads(json.dumps(built))["trigger"]
    assert trigger["singleton_key"] is None
    assert trigger["fencing_token"] is None


@pytest.mark.parametrize(
    "bad",
    [
        {"scheduled_for": datetime(2026, 9, 1, 2, 15)},
        {"trigger": "retry"},
        {"attempt": 0},
    ],
)
def test_an_envelope_refuses_naive_times_unknown_triggers_and_attempt_zero(
    bad: dict[str, Any],
) -> None:
    with pytest.raises(ValueError):
        envelope(**bad)


# --- excerpts -----------------------------------------------------------------------------


@given(st.text(), st.integers(min_value=32, max_value=300))
def test_an_excerpt_never_exceeds_its_byte_limit_and_keeps_the_start(text: str, limit: int) -> None:
    excerpt = truncate_excerpt(text, limit)

    assert excerpt is not None
    assert len(excerpt.encode("utf-8")) <= limit
    if len(text.encode("utf-8")) <= limit:
        assert excerpt == text
    else:
        assert excerpt.endswith("…[truncated]")
        assert text.startswith(excerpt.removesuffix("…[truncated]"))


def test_the_default_excerpt_limit_is_64_kib() -> None:
    assert RESULT_EXCERPT_BYTES == 65_536
    assert len(truncate_excerpt("é" * 40_000).encode()) <= 65_536  # type: ignore[union-attr]
    assert truncate_excerpt(None) is None


# --- the python target and run_target -----------------------------------------------------


def test_a_python_callable_receives_the_envelope_and_its_return_value_is_the_result() -> None:
    fixtures_targets.received_envelopes.clear()
    sent = envelope()

    outcome = run_target(
        {"type": "python", "callable": "tests.unit.fixtures_targets:record_envelope"},
        sent,
        5.0,
        policy=POLICY,
    )

    assert fixtures_targets.received_envelopes == [sent]
    assert outcome.ok and outcome.error is None
    assert json.loads(outcome.result or "") == {"seen": sent["trigger"]["occurrence_id"]}


def test_a_python_callable_that_raises_is_a_failure_with_its_message() -> None:
    outcome = run_target(
        {"type": "python", "callable": "tests.unit.fixtures_targets:explode"},
        envelope(),
        5.0,
        policy=POLICY,
    )

    assert not outcome.ok
    assert outcome.error == "RuntimeError: report for 2026-09-01T02:15:00Z failed"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            "tests.unit.no_such_module:run",
            "cannot import tests.unit.no_such_module: ModuleNotFoundError: No module named "
            "'tests.unit.no_such_module'",
        ),
        (
            "tests.unit.fixtures_targets:missing",
            "tests.unit.fixtures_targets has no function 'missing'",
        ),
        (
            "tests.unit.fixtures_targets:not_callable",
            "tests.unit.fixtures_targets:not_callable is int, not a plain function defined with def",
        ),
    ],
)
def test_a_python_callable_that_cannot_be_resolved_is_refused_at_run_time(
    spec: str, message: str
) -> None:
    outcome = run_target({"type": "python", "callable": spec}, envelope(), 5.0, policy=POLICY)

    assert (outcome.ok, outcome.error) == (False, f"invalid target: target.callable: {message}")


def test_a_callable_the_operator_stopped_allowing_is_refused_at_run_time_without_running() -> None:
    fixtures_targets.received_envelopes.clear()
    doc = {"type": "python", "callable": "tests.unit.fixtures_targets:record_envelope"}
    assert target_errors(doc, POLICY) == []  # saved while the operator allowed `tests`

    outcome = run_target(doc, envelope(), 5.0, policy=TargetPolicy())

    assert not outcome.ok
    assert outcome.error == (
        "invalid target: target.callable: tests.unit.fixtures_targets is not in "
        "CRONLEDGER_PYTHON_TARGETS (allowed: none); the operator lists the modules whose "
        "functions python targets may call"
    )
    assert fixtures_targets.received_envelopes == []


def test_a_huge_result_is_truncated_to_the_excerpt_limit() -> None:
    outcome = run_target(
        {"type": "python", "callable": "tests.unit.fixtures_targets:huge_answer"},
        envelope(),
        5.0,
        policy=POLICY,
    )

    assert outcome.ok
    assert outcome.result is not None
    assert outcome.result.startswith('"xxx')
    assert len(outcome.result.encode()) <= RESULT_EXCERPT_BYTES


def test_an_invalid_stored_document_is_refused_at_run_time_without_running() -> None:
    fixtures_targets.received_envelopes.clear()
    doc = {"type": "python", "callable": "tests.unit.fixtures_targets:record_envelope", "x": 1}

    outcome = run_target(doc, envelope(), 5.0, policy=POLICY)

    assert not outcome.ok
    assert outcome.error is not None and outcome.error.startswith("invalid target: target.x:")
    assert fixtures_targets.received_envelopes == []


def test_no_time_left_is_a_timeout_without_running() -> None:
    fixtures_targets.received_envelopes.clear()

    outcome = run_target(
        {"type": "python", "callable": "tests.unit.fixtures_targets:record_envelope"},
        envelope(),
        -0.5,
        policy=POLICY,
    )

    assert (outcome.ok, outcome.error) == (False, "timed out after 0 ms")
    assert fixtures_targets.received_envelopes == []
