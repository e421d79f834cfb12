"""`-l/--selector` on `channels list`, `pause`, `resume` and `archive`, through a served API
on PostgreSQL and SQLite: a list keeps the channels carrying every label, and a bulk change
moves exactly those, one request for all, each channel said. The rows are read back."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.api.helpers import OK_TARGET
from tests.unit.test_operator_cli import SCHEDULE, Cli


def labelled(cli: Cli, name: str, **labels: str) -> str:
    channel = cli.ledger.channels.create_channel(
        name, dict(SCHEDULE), dict(OK_TARGET), 5000, "active", labels=labels
    )
    return channel.channel_id


def statuses(cli: Cli) -> dict[str, str]:
    return {c.name: c.status for c in cli.ledger.channels.list_channels(limit=1000).data}


@pytest.fixture
def fleet(cli: Cli) -> Cli:
    labelled(cli, "billing-acme", team="billing", tenant="acme")
    labelled(cli, "billing-globex", team="billing", tenant="globex")
    labelled(cli, "ops-acme", team="ops", tenant="acme")
    labelled(cli, "plain")
    return cli


def names_listed(cli: Cli, *argv: str) -> list[str]:
    ran = cli("-o", "json", "channels", "list", *argv)
    assert ran.code == 0, ran.err
    listed: list[dict[str, Any]] = json.loads(ran.out)["data"]
    return [c["name"] for c in listed]


def test_list_keeps_the_channels_carrying_every_label_of_the_selector(fleet: Cli) -> None:
    # (newest first)
    assert names_listed(fleet, "-l", "team=billing") == ["billing-globex", "billing-acme"]
    assert names_listed(fleet, "-l", "team=billing,tenant=acme") == ["billing-acme"]
    assert names_listed(fleet, "--selector", "tenant=acme") == ["ops-acme", "billing-acme"]
    assert names_listed(fleet) == ["plain", "ops-acme", "billing-globex", "billing-acme"]


def test_show_and_the_wide_list_show_a_channels_labels(fleet: Cli) -> None:
    shown = fleet("channels", "show", "billing-acme")
    as_yaml = fleet("-o", "yaml", "channels", "show", "billing-acme")

    assert "team=billing,tenant=acme" in shown.out
    assert "labels:\n  team: billing\n  tenant: acme" in as_yaml.out


def test_pause_by_selector_moves_only_the_matching_channels_and_says_each(fleet: Cli) -> None:
    ran = fleet("channels", "pause", "-l", "tenant=acme", "--reason", "unpaid invoice")

    assert ran.code == 0, ran.err
    assert "billing-acme: active → paused" in ran.out
    assert "ops-acme: active → paused" in ran.out
    assert statuses(fleet) == {
        "billing-acme": "paused",
        "billing-globex": "active",
        "ops-acme": "paused",
        "plain": "active",
    }
    paused = fleet.ledger.channels.list_channels(status="paused").data
    assert {c.status_reason for c in paused} == {"unpaid invoice"}


def test_resume_and_archive_by_selector(fleet: Cli) -> None:
    assert fleet("channels", "pause", "-l", "team=billing").code == 0

    resumed = fleet("channels", "resume", "-l", "team=billing,tenant=globex")
    archived = fleet("channels", "archive", "-l", "team=ops")

    assert (resumed.code, archived.code) == (0, 0)
    assert statuses(fleet) == {
        "billing-acme": "paused",
        "billing-globex": "active",
        "ops-acme": "archived",
        "plain": "active",
    }


def test_a_channel_that_cannot_move_is_said_and_fails_the_command(fleet: Cli) -> None:
    fleet.ledger.channels.create_channel(
        "billing-draft", dict(SCHEDULE), dict(OK_TARGET), 5000, labels={"team": "billing"}
    )

    ran = fleet("channels", "pause", "-l", "team=billing")

    assert ran.code == 1
    assert "billing-draft: draft (" in ran.out
    assert statuses(fleet)["billing-acme"] == "paused"
    assert statuses(fleet)["billing-draft"] == "draft"


def test_a_selector_with_a_channel_or_a_bad_term_is_a_usage_error(fleet: Cli) -> None:
    both = fleet("channels", "pause", "plain", "-l", "team=ops")
    neither = fleet("channels", "pause")
    bad = fleet("channels", "pause", "-l", "team")

    assert (both.code, neither.code, bad.code) == (2, 2, 2)
    assert "key=value" in bad.err
    assert set(statuses(fleet).values()) == {"active"}
