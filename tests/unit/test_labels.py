"""Labels on a channel (`transport_config.labels`): Kubernetes' spelling, every problem at its
key, stored with the definition and outside the scheduling hash."""

from __future__ import annotations

from typing import Any

import pytest

from cronledger.schedule import ScheduleInvalid, compile_schedule

SCHEDULE = "0 15 2 * * *"


def refusals(labels: Any) -> list[tuple[str, str]]:
    with pytest.raises(ScheduleInvalid) as caught:
        compile_schedule({"schedule": SCHEDULE, "labels": labels}, "c1")
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
    assert compile_schedule({"schedule": SCHEDULE, "labels": labels}, "c1").expression == SCHEDULE


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
    assert refusals({"ok": "yes", key: value}) == [(f"transport_config.labels.{key}", code)]


def test_every_bad_label_is_reported_at_once_with_how_to_fix_it() -> None:
    with pytest.raises(ScheduleInvalid) as caught:
        compile_schedule({"schedule": SCHEDULE, "labels": {"-a": "x", "b": "?"}}, "c1")

    errors = {e.path: e.message for e in caught.value.errors}
    assert set(errors) == {"transport_config.labels.-a", "transport_config.labels.b"}
    assert "starting and ending with a letter or digit" in errors["transport_config.labels.-a"]
    assert "must be empty or" in errors["transport_config.labels.b"]


def test_more_than_64_labels_or_not_an_object_is_refused_whole() -> None:
    assert refusals({f"key{n}": "v" for n in range(65)}) == [
        ("transport_config.labels", "too_long")
    ]
    assert refusals(["team=billing"]) == [("transport_config.labels", "type_mismatch")]


def test_labels_are_not_in_the_scheduling_hash() -> None:
    plain = compile_schedule({"schedule": SCHEDULE}, "c1")
    labelled = compile_schedule({"schedule": SCHEDULE, "labels": {"team": "billing"}}, "c1")

    assert plain.config_hash == labelled.config_hash
