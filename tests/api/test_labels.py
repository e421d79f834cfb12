"""Label selectors through the API, on PostgreSQL and SQLite: `?label=key=value` (repeatable,
AND) on the channel list and the status view, and one request that pauses, resumes or
archives every channel carrying a selector, each on its own and each reported."""

from __future__ import annotations

from typing import Any

import pytest

from cronledger.ledger import Ledger
from tests.api.helpers import CHANNELS, PREFIX, Api, create_channel

BULK = f"{CHANNELS}/status"


@pytest.fixture
def fleet(api: Api) -> dict[str, str]:
    """Four active channels: two of billing (tenants acme and globex), one of ops for acme,
    one without labels; their ids by name."""
    made = {
        "billing-acme": {"team": "billing", "tenant": "acme"},
        "billing-globex": {"team": "billing", "tenant": "globex"},
        "ops-acme": {"team": "ops", "tenant": "acme", "example.com/tier": "gold"},
        "plain": {},
    }
    return {
        name: create_channel(api, name=name, status="active", labels=labels)["channel_id"]
        for name, labels in made.items()
    }


def names(answer: Any) -> list[str]:
    assert answer.status == 200, answer.body
    return [channel["name"] for channel in answer.data]


def test_a_list_keeps_the_channels_carrying_every_label_it_names(
    api: Api, fleet: dict[str, str]
) -> None:
    billing = api("GET", CHANNELS, [("label", "team=billing")])
    both = api("GET", CHANNELS, [("label", "team=billing"), ("label", "tenant=acme")])
    joined = api("GET", CHANNELS, {"label": "tenant=acme,example.com/tier=gold"})
    none = api("GET", CHANNELS, [("label", "team=billing"), ("label", "team=ops")])

    assert names(billing) == ["billing-globex", "billing-acme"]  # newest first
    assert billing.body["total"] == 2
    assert names(both) == ["billing-acme"]
    assert names(joined) == ["ops-acme"]
    assert none.status == 400, "one label, two values: refused, not silently empty"
    assert names(api("GET", CHANNELS)) == list(reversed(fleet))


def test_the_status_view_takes_the_same_selector(api: Api, fleet: dict[str, str]) -> None:
    acme = api("GET", f"{PREFIX}/cron/status", [("label", "tenant=acme")])

    assert names(acme) == ["ops-acme", "billing-acme"]  # newest first
    assert acme.data[0]["labels"]["example.com/tier"] == "gold"


@pytest.mark.parametrize(
    "term", ["team", "-team=x", "team=bill ing", "UPPER.example.com/x=y", "a/b/c=d"]
)
def test_a_selector_that_is_not_a_label_is_a_400_naming_it(
    api: Api, fleet: dict[str, str], term: str
) -> None:
    refused = api("GET", CHANNELS, [("label", term)])

    assert (refused.status, refused.error["code"]) == (400, "validation_failed")
    [detail] = refused.error["details"]
    assert detail["path"] == "label"
    assert repr(term) in detail["message"]


def test_a_bulk_pause_moves_only_the_selected_channels_and_reports_each(
    api: Api, ledger: Ledger, fleet: dict[str, str]
) -> None:
    # Given one of acme's channels already paused
    acme_ops = f"{CHANNELS}/{fleet['ops-acme']}/status"
    assert api("PATCH", acme_ops, body={"status": "paused"}).status == 200

    # When every channel of tenant acme is paused in one request
    answer = api(
        "POST", BULK, body={"selector": {"tenant": "acme"}, "status": "paused", "reason": "unpaid"}
    )

    # Then both acme channels are paused with the reason, and nothing else moved
    assert answer.status == 200, answer.body
    reported = {m["name"]: (m["before"], m["status"], m["error"]) for m in answer.data}
    assert reported == {
        "billing-acme": ("active", "paused", None),
        "ops-acme": ("paused", "paused", None),
    }
    stored = {name: ledger.channels.get_channel(cid) for name, cid in fleet.items()}
    assert {n: c.status for n, c in stored.items()} == {
        "billing-acme": "paused",
        "billing-globex": "active",
        "ops-acme": "paused",
        "plain": "active",
    }
    assert stored["billing-acme"].status_reason == "unpaid"


def test_a_bulk_resume_moves_the_paused_and_reports_each_channel_it_cannot_move(
    api: Api, ledger: Ledger, fleet: dict[str, str]
) -> None:
    # Given billing paused in bulk, and one billing channel that is a draft
    create_channel(api, name="billing-draft", labels={"team": "billing"})
    paused = api("POST", BULK, body={"selector": {"team": "billing"}, "status": "paused"})
    assert {m["name"]: m["error"] is None for m in paused.data} == {
        "billing-acme": True,
        "billing-globex": True,
        "billing-draft": False,
    }

    # When billing is resumed in bulk
    resumed = api("POST", BULK, body={"selector": {"team": "billing"}, "status": "active"})

    # Then the two paused channels are active again and the draft is left a draft
    assert resumed.status == 200
    assert {m["name"]: m["status"] for m in resumed.data} == {
        "billing-acme": "active",
        "billing-globex": "active",
        "billing-draft": "draft",
    }
    assert ledger.channels.get_channel(fleet["billing-acme"]).status == "active"
    assert ledger.channels.get_channel(fleet["billing-globex"]).status_reason is None
    # And the refusal of the draft's pause was the error a single change answers
    draft = next(m for m in paused.data if m["name"] == "billing-draft")
    assert (draft["before"], draft["status"], draft["error"]["code"]) == (
        "draft",
        "draft",
        "conflict",
    )


def test_a_bulk_archive_never_selects_an_archived_channel_again(
    api: Api, ledger: Ledger, fleet: dict[str, str]
) -> None:
    first = api("POST", BULK, body={"selector": {"team": "ops"}, "status": "archived"})
    second = api("POST", BULK, body={"selector": {"team": "ops"}, "status": "archived"})

    assert [m["status"] for m in first.data] == ["archived"]
    assert second.data == []
    assert ledger.channels.get_channel(fleet["ops-acme"]).status == "archived"


def test_a_bulk_change_without_a_label_or_with_a_bad_one_moves_nothing(
    api: Api, ledger: Ledger, fleet: dict[str, str]
) -> None:
    empty = api("POST", BULK, body={"selector": {}, "status": "paused"})
    bad = api("POST", BULK, body={"selector": {"-team": "x"}, "status": "paused"})

    assert (empty.status, empty.error["details"][0]["path"]) == (400, "selector")
    assert (bad.status, bad.error["details"][0]["path"]) == (422, "body.selector.-team")
    assert {ledger.channels.get_channel(cid).status for cid in fleet.values()} == {"active"}


def test_the_bulk_route_is_in_the_openapi_document(api: Api) -> None:
    document = api("GET", "/openapi.json").body

    route = document["paths"][BULK]["post"]
    assert "requestBody" in route
    listed = [p["name"] for p in document["paths"][CHANNELS]["get"]["parameters"]]
    assert "label" in listed
