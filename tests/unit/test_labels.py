"""Labels on a channel (`labels`, at the top of the document beside `name`): Kubernetes'
spelling, every problem at its key, stored with the definition and outside the scheduling
hash; a selector (`key=value` terms) spelled the same way."""

from __future__ import annotations

from typing import Any

import pytest

from cronledger.api.documents import read_new_channel
from cronledger.cron import compile_schedule
from cronledger.errors import ValidationFailed
from cronledger.labels import selector
from cronledger.targets.policy import TargetPolicy

SCHEDULE = "0 15 2 * * *"
POLICY = TargetPolicy(python_modules=("tests",))


def document(labels: Any) -> dict[str, Any]:
    return {
        "name": "labelled",
        "labels": labels,
        "transport_config": {"schedule": SCHEDULE},
        "target": {"type": "python", "callable": "tests.api.jobs:ok"},
    }


def refusals(labels: Any) -> list[tuple[str, str]]:
    with pytest.raises(ValidationFailed) as caught:
        read_new_channel(document(labels), 60_000, POLICY)
    return [(e.path, e.code) for e in caught.value.errors]


@pytest.mark.parametrize(
    "labels",
    [
        {},
        {"team": "billing", "tier": ""},
        {"example.com/team": "billing", "a.b-c.d/x_y.z-1": "v-1.2_3"},
        {"a": "b" * 63, "k" * 63: "v"},
        {f"key{n}": str(n) for n in range(64)},
    ],
)
def test_labels_spelled_as_kubernetes_spells_them_are_accepted(labels: dict[str, str]) -> None:
    assert read_new_channel(document(labels), 60_000, POLICY).definition.labels == labels


@pytest.mark.parametrize(
    ("key", "value", "code"),
    [
        pytest.param("-team", "x", "invalid", id="a name starting with a dash"),
        pytest.param("team-", "x", "invalid", id="a name ending with a dash"),
        pytest.param("k" * 64, "x", "invalid", id="a name of 64 characters"),
        pytest.param("Example.com/team", "x", "invalid", id="an upper-case prefix"),
        pytest.param("/team", "x", "invalid", id="an empty prefix"),
        pytest.param("a/b/c", "x", "invalid", id="two slashes"),
        pytest.param("team", "x" * 64, "invalid", id="a value of 64 characters"),
        pytest.param("team", "bill ing", "invalid", id="a space in the value"),
        pytest.param("team", "_billing", "invalid", id="a value starting with '_'"),
        pytest.param("team", 7, "type_mismatch", id="a number as the value"),
        pytest.param("team", None, "type_mismatch", id="null as the value"),
    ],
)
def test_a_bad_label_is_refused_at_its_key(key: str, value: Any, code: str) -> None:
    assert refusals({"ok": "yes", key: value}) == [(f"labels.{key}", code)]


def test_every_bad_label_is_reported_at_once_with_how_to_fix_it() -> None:
    with pytest.raises(ValidationFailed) as caught:
        read_new_channel(document({"-a": "x", "b": "?"}), 60_000, POLICY)

    errors = {e.path: e.message for e in caught.value.errors}
    assert set(errors) == {"labels.-a", "labels.b"}
    assert "starting and ending with a letter or digit" in errors["labels.-a"]
    assert "must be empty or" in errors["labels.b"]


def test_more_than_64_labels_or_not_an_object_is_refused_whole() -> None:
    assert refusals({f"key{n}": "v" for n in range(65)}) == [("labels", "too_long")]
    assert refusals(["team=billing"]) == [("labels", "type_mismatch")]


def test_labels_are_not_part_of_transport_config_and_say_where_they_belong() -> None:
    with pytest.raises(ValidationFailed) as caught:
        read_new_channel(
            {**document({}), "transport_config": {"schedule": SCHEDULE, "labels": {"a": "b"}}},
            60_000,
            POLICY,
        )

    [error] = caught.value.errors
    assert error.path == "transport_config.labels"
    assert "top of the channel document" in error.message


def test_labels_are_not_in_the_scheduling_hash() -> None:
    plain = read_new_channel(document({}), 60_000, POLICY).definition
    labelled = read_new_channel(document({"team": "billing"}), 60_000, POLICY).definition

    assert plain.transport_config == labelled.transport_config
    assert (
        compile_schedule(plain.transport_config, "c1").config_hash
        == compile_schedule(labelled.transport_config, "c1").config_hash
    )


def test_a_selector_is_every_term_it_names_and_refuses_what_is_not_a_label() -> None:
    assert selector(["team=billing", "example.com/tier=", "team=billing"]) == {
        "team": "billing",
        "example.com/tier": "",
    }
    with pytest.raises(ValidationFailed) as caught:
        selector(["team", "-x=1", "team=billing", "team=ops", "tier=a b"])

    messages = [e.message for e in caught.value.errors]
    assert {e.path for e in caught.value.errors} == {"label"}
    assert len(messages) == 4
    assert "key=value" in messages[0]
    assert "second value" in messages[2]
