"""The command line against the real API on a local HTTP server (127.0.0.1, SQLite).

Invariant: every command prints what the API answered (a table, or JSON/YAML with `-o`) and
exits 0; a refusal exits 1 with the API's message and field problems, each printed once; bad
usage exits 2; an API that cannot be reached exits 3 with a sentence, never a traceback.
`channels show -o yaml` applies back unchanged. Requests to an API Gateway endpoint carry a
SigV4 signature.
"""

from __future__ import annotations

import _thread
import io
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml

from cronledger.api import PREFIX, create_app
from cronledger.api_client import ApiClient
from cronledger.cli import app, main
from cronledger.instants import to_rfc3339
from cronledger.ledger import Ledger, NewOccurrence
from tests.api.helpers import FAIL_TARGET, OK_TARGET, SETTINGS, Scheduler
from tests.api.http import serving

NIGHTLY_YAML = """\
name: nightly
transport_config:
  schedule: "0 15 2 * * *"
  timezone: Europe/London
target:
  type: python
  callable: tests.api.jobs:ok
"""
#: Failures are final at once (no automatic retry): what a test retries, an operator retried.
SCHEDULE = {"schedule": "0 15 2 * * *", "retry": {"max_attempts": 1}}


@dataclass
class Ran:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


@dataclass
class Served:
    """The API's requests as they are answered, counted by path, with what a test asked to
    happen at the `nth` to a path: it runs after that request is answered and before its
    answer is sent, so the command has not seen the answer yet (and no later one)."""

    counts: Counter[str] = field(default_factory=Counter)
    actions: dict[tuple[str, int], Callable[[], object]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def on(self, path: str, nth: int, action: Callable[[], object]) -> None:
        self.actions[(path, nth)] = action

    def __call__(self, event: dict[str, Any]) -> None:
        with self.lock:
            self.counts[event["rawPath"]] += 1
            action = self.actions.pop((event["rawPath"], self.counts[event["rawPath"]]), None)
        if action is not None:
            action()


def ctrl_c() -> None:
    """Interrupt the main thread as Ctrl-C does (how a person ends a `--watch`)."""
    _thread.interrupt_main(signal.SIGINT)


@dataclass
class Cli:
    url: str
    ledger: Ledger
    scheduler: Scheduler
    capsys: pytest.CaptureFixture[str]
    served: Served

    def __call__(self, *argv: str, api_url: str | None = None) -> Ran:
        self.capsys.readouterr()
        code = main(["--api-url", api_url or self.url, *argv])
        captured = self.capsys.readouterr()
        return Ran(code, captured.out, captured.err)

    def channel(self, name: str, target: Mapping[str, Any] = OK_TARGET, **config: Any) -> str:
        created = self.ledger.channels.create_channel(
            name, {**SCHEDULE, **config}, dict(target), 5000, "active"
        )
        return created.channel_id


@contextmanager
def commands(
    ledger: Ledger, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> Iterator[Cli]:
    """The command line against the API served over `ledger`, with no terminal settings, and
    Ctrl-C (`ctrl_c`) reaching it even in a run started with SIGINT ignored (a script's
    background job), where `interrupt_main` would do nothing and a `--watch` never end."""
    for name in ("COLUMNS", "NO_COLOR", "FORCE_COLOR", "CRONLEDGER_API_URL"):
        monkeypatch.delenv(name, raising=False)
    served = Served()
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with serving(create_app(ledger, SETTINGS), served) as url:
            yield Cli(url, ledger, Scheduler(ledger), capsys, served)
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.fixture
def cli(
    sqlite_ledger: Ledger, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> Iterator[Cli]:
    with commands(sqlite_ledger, capsys, monkeypatch) as commanded:
        yield commanded


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def rows(ran: Ran) -> list[list[str]]:
    """A table's lines split into words, header first."""
    return [line.split() for line in ran.out.splitlines()]


# --- channels apply ---------------------------------------------------------------------------


def test_apply_creates_then_leaves_unchanged_then_versions_a_channel_by_name(
    cli: Cli, tmp_path: Path
) -> None:
    path = write(tmp_path, "nightly.yaml", NIGHTLY_YAML)

    created = cli("channels", "apply", "-f", path)
    again = cli("channels", "apply", "-f", path)
    write(tmp_path, "nightly.yaml", NIGHTLY_YAML.replace("0 15 2", "0 30 3") + "status: active\n")
    changed = cli("channels", "apply", "-f", path)

    assert (created.code, again.code, changed.code) == (0, 0, 0)
    assert created.out.split() == ["created", "nightly:", "version", "1,", "draft"]
    assert again.out.split() == ["unchanged", "nightly:", "version", "1,", "draft"]
    assert changed.out.split() == [
        "updated",
        "nightly:",
        "version",
        "1",
        "→",
        "2,",
        "draft",
        "→",
        "active",
    ]
    stored = cli.ledger.channels.get_channel_by_name("nightly")
    assert (stored.version, stored.status) == (2, "active")
    assert stored.transport_config["schedule"] == "0 30 3 * * *"


def test_apply_of_many_documents_applies_every_valid_one_and_exits_1_naming_the_refused(
    cli: Cli, tmp_path: Path
) -> None:
    bad = {
        "name": "broken",
        "transport_config": {"schedule": "15 2 * * *"},
        "target": {"type": "http"},
    }
    text = "\n---\n".join(
        [
            NIGHTLY_YAML + "status: paused\n",
            yaml.safe_dump(bad),
            "schedule: nameless\n",
            NIGHTLY_YAML.replace("nightly", "hourly"),
        ]
    )
    path = write(tmp_path, "many.yaml", text)

    ran = cli("channels", "apply", "-f", path, "--json")

    assert ran.code == 1
    outcomes = ran.json()
    assert [(o["name"], o["outcome"]) for o in outcomes] == [
        ("nightly", "created"),
        ("broken", "refused"),
        ("?", "refused"),
        ("hourly", "created"),
    ]
    assert {d["path"] for d in outcomes[1]["details"]} == {
        "transport_config.schedule",
        "target.url",
    }
    assert "document 3" in outcomes[2]["where"] and "a name" in outcomes[2]["error"]
    assert cli.ledger.channels.get_channel_by_name("nightly").status == "paused"  # as the file says
    assert cli.ledger.channels.get_channel_by_name("hourly").status == "draft"
    assert cli.ledger.channels.list_channels().total == 2
    # The person's report went to stderr, each problem once.
    assert ran.err.count("has 5 field(s)") == 1
    assert "refused" in ran.err and "created" in ran.err


def test_apply_of_a_bad_document_exits_1_with_every_field_problem_once(
    cli: Cli, tmp_path: Path
) -> None:
    document = {
        "name": "nightly",
        "transport_config": {"schedule": "15 2 * * *"},
        "target": {"type": "http"},
    }
    path = write(tmp_path, "bad.json", json.dumps(document))

    ran = cli("channels", "apply", "-f", path)

    assert ran.code == 1
    assert "refused" in ran.out and "400 validation_failed: invalid channel" in ran.out
    assert ran.out.count("has 5 field(s)") == 1
    assert "    target.url: " in ran.out
    assert "Traceback" not in ran.out + ran.err
    assert cli.ledger.channels.list_channels().total == 0


def test_an_unreadable_file_exits_2_with_what_to_do_and_sends_nothing(
    cli: Cli, tmp_path: Path
) -> None:
    missing = cli("channels", "apply", "-f", str(tmp_path / "nope.yaml"))
    broken = cli("channels", "apply", "-f", write(tmp_path, "y.yaml", "name: [unclosed\n"))
    star = cli(
        "channels",
        "apply",
        "-f",
        write(tmp_path, "s.yaml", "name: x\ntransport_config:\n  schedule: */5 * * * * *\n"),
    )

    assert (missing.code, broken.code, star.code) == (2, 2, 2)
    assert "cannot read" in missing.err
    assert "is not valid YAML" in broken.err
    assert star.err.strip() == (
        "cronledger: error: "
        f"{tmp_path / 's.yaml'}, line 3: a value starting with '*' is YAML alias syntax; "
        'quote it, e.g. schedule: "*/5 * * * * *"'
    )
    assert cli.ledger.channels.list_channels().total == 0


def test_apply_dry_run_reports_what_applying_would_do_prints_the_diff_and_writes_nothing(
    cli: Cli, tmp_path: Path
) -> None:
    path = write(tmp_path, "nightly.yaml", NIGHTLY_YAML)
    assert cli("channels", "apply", "-f", path).code == 0
    write(tmp_path, "nightly.yaml", NIGHTLY_YAML.replace("0 15 2", "0 30 3") + "status: active\n")
    write(tmp_path, "new.yaml", NIGHTLY_YAML.replace("nightly", "fresh"))
    write(tmp_path, "bad.yaml", NIGHTLY_YAML.replace("nightly", "broken").replace("0 15 2 ", ""))

    changed = cli("channels", "apply", "-f", path, "--dry-run")
    fresh = cli("channels", "apply", "-f", str(tmp_path / "new.yaml"), "--dry-run")
    bad = cli("channels", "apply", "-f", str(tmp_path / "bad.yaml"), "--dry-run", "--json")

    assert changed.code == 0
    lines = changed.out.splitlines()
    assert " ".join(lines[0].split()) == "updated nightly: version 1 → 2, draft → active (dry run)"
    assert "-  schedule: 0 15 2 * * *" in lines and "+  schedule: 0 30 3 * * *" in lines
    assert " ".join(fresh.out.split("\n")[0].split()) == "created fresh: version 1, draft (dry run)"
    assert "+name: fresh" in fresh.out.splitlines()
    # The API judged the document as applying would: refused, with its problem, exit 1
    assert bad.code == 1
    (outcome,) = bad.json()
    assert (outcome["outcome"], outcome["details"][0]["path"]) == (
        "refused",
        "transport_config.schedule",
    )
    stored = cli.ledger.channels.get_channel_by_name("nightly")
    assert (stored.version, stored.status) == (1, "draft")
    assert cli.ledger.channels.list_channels().total == 1


#: Every key of a schedule, dates and times among them (which YAML would read as dates if
#: they were written unquoted).
RECURRING = {
    "schedule": "*/5 * * * * *",
    "timezone": "Europe/London",
    "misfire_policy": "catch_up",
    "max_catch_up": 3,
    "payload": {"report": "nightly", "when": "2026-01-01", "n": [1, 2.5, None]},
    "concurrency": {"policy": "forbid", "slots": 2},
    "retry": {"max_attempts": 5, "backoff_secs": 30, "max_backoff_secs": 600},
    "starts_at": "2026-09-01T00:00:00+01:00",
    "ends_at": "2099-12-31T23:59:59Z",
    "jitter_secs": 2,
}
ONE_TIME = {"at": "2099-03-26T01:30:00", "timezone": "Europe/London", "jitter_secs": 60}


@pytest.mark.parametrize("config", [RECURRING, ONE_TIME], ids=["recurring", "one-time"])
@pytest.mark.parametrize("fmt", ["yaml", "json"])
def test_show_prints_a_document_that_applies_back_unchanged(
    cli: Cli, tmp_path: Path, fmt: str, config: dict[str, Any]
) -> None:
    cli.ledger.channels.create_channel(
        "nightly", config, OK_TARGET, 5000, "active", labels={"example.com/team": "bi"}
    )
    cli("channels", "pause", "nightly")

    shown = cli("channels", "show", "nightly", "-o", fmt)
    path = write(tmp_path, f"nightly.{fmt}", shown.out)
    applied = cli("channels", "apply", "-f", path, "--json")

    assert shown.code == 0
    document = yaml.safe_load(shown.out)
    assert set(document) == {
        "name",
        "labels",
        "transport_config",
        "target",
        "timeout_ms",
        "status",
    }
    assert document["labels"] == {"example.com/team": "bi"}
    assert document["transport_config"] == config  # every value as a string, not a date
    assert applied.code == 0
    assert [(o["name"], o["outcome"]) for o in applied.json()] == [("nightly", "unchanged")]
    stored = cli.ledger.channels.get_channel_by_name("nightly")
    assert (stored.version, stored.status) == (1, "paused")


def test_show_prints_the_channel_for_people_then_its_document(cli: Cli) -> None:
    cli.channel("nightly", timezone="Europe/London", concurrency={"policy": "forbid"})
    cli.scheduler.reconcile()

    shown = cli("channels", "show", "nightly")

    assert shown.code == 0
    lines = shown.out.splitlines()
    assert lines[0].split() == ["name:", "nightly"]
    assert ["schedule:", "0", "15", "2", "*", "*", "*"] in [line.split() for line in lines]
    assert all(line == line.rstrip() for line in lines)  # no padding left at line ends
    document = yaml.safe_load(shown.out.split("\n\n", 1)[1])
    assert document["transport_config"]["concurrency"] == {"policy": "forbid"}


# --- history, diff, rollback ------------------------------------------------------------------


def test_history_diff_and_rollback_work_on_versions(cli: Cli, tmp_path: Path) -> None:
    path = write(tmp_path, "n.yaml", NIGHTLY_YAML)
    cli("channels", "apply", "-f", path)
    write(tmp_path, "n.yaml", NIGHTLY_YAML.replace("0 15 2", "0 30 3"))
    cli("channels", "apply", "-f", path)

    history = cli("channels", "history", "nightly")
    diff = cli("channels", "diff", "nightly")
    explicit = cli("channels", "diff", "nightly", "--from", "2", "--to", "1", "--json")
    rollback = cli("channels", "rollback", "nightly", "--to", "1")
    after = cli("channels", "history", "nightly", "--json")
    missing = cli("channels", "rollback", "nightly", "--to", "9")
    same = cli("channels", "diff", "nightly", "--from", "1", "--to", "3")

    assert history.code == 0
    assert rows(history)[1][:2] == ["2", "(current)"] and rows(history)[2][0] == "1"
    assert rows(history)[1][3:7] == ["0", "30", "3", "*"]
    assert diff.code == 0
    assert "-  schedule: 0 15 2 * * *" in diff.out.splitlines()
    assert "+  schedule: 0 30 3 * * *" in diff.out.splitlines()
    assert explicit.json()["from"]["transport_config"]["schedule"] == "0 30 3 * * *"
    assert rollback.out.strip() == "channel nightly is now version 3, equal to version 1"
    versions = after.json()["data"]
    assert [(v["version"], v["current"]) for v in versions] == [(3, True), (2, False), (1, False)]
    assert versions[0]["transport_config"] == versions[2]["transport_config"]
    assert (
        cli.ledger.channels.get_channel_by_name("nightly").transport_config["schedule"]
        == "0 15 2 * * *"
    )
    assert missing.code == 2 and "has no version 9" in missing.err
    assert (same.code, same.out.strip()) == (0, "versions 1 and 3 of nightly are the same")


# --- listing and reading ----------------------------------------------------------------------


def test_list_prints_a_table_for_people_and_the_apis_json_for_scripts(
    cli: Cli, tmp_path: Path
) -> None:
    cli("channels", "apply", "-f", write(tmp_path, "n.yaml", NIGHTLY_YAML))

    table = cli("channels", "list")
    as_json = cli("channels", "list", "--json")
    as_yaml = cli("channels", "list", "-o", "yaml")

    assert table.code == 0
    header, row = rows(table)
    assert header[:3] == ["NAME", "STATUS", "SCHEDULE"]
    assert row[:2] == ["nightly", "draft"] and "Europe/London" in row
    body = as_json.json()
    assert (body["total"], body["data"][0]["name"]) == (1, "nightly")
    assert yaml.safe_load(as_yaml.out) == body


def test_occurrences_list_is_newest_scheduled_first_and_filters_by_trigger(cli: Cli) -> None:
    cli.channel("nightly")
    now = datetime.now(UTC).replace(microsecond=0)
    assert cli("trigger", "nightly").code == 0
    backfill = cli(
        "backfill",
        "nightly",
        "--from",
        (now - timedelta(days=3)).isoformat().replace("+00:00", "Z"),
        "--to",
        "1h",
        "--json",
    )
    cli.scheduler.run_due()

    listing = cli("occurrences", "list", "--channel", "nightly", "--json")
    manual = cli("occurrences", "list", "--trigger", "manual", "--json")
    backfilled = cli("occurrences", "list", "--trigger", "backfill")

    assert backfill.code == 0
    created = backfill.json()["data"]["created"]
    assert created >= 2  # 02:15 London on each past day in the window
    scheduled = [o["scheduled_for"] for o in listing.json()["data"]]
    assert scheduled == sorted(scheduled, reverse=True)
    assert listing.json()["data"][0]["trigger"] == "manual"  # written first, scheduled last
    assert [o["trigger"] for o in manual.json()["data"]] == ["manual"]
    assert [r[3] for r in rows(backfilled)[1:]] == ["backfill"] * created
    assert all(r[2] == "completed" for r in rows(backfilled)[1:])


def test_lists_page_by_the_key_their_footer_names(cli: Cli) -> None:
    # Given five rows of one channel, and three channels two of which share a prefix
    channel_id = cli.channel("nightly")
    cli.channel("nightly-eu")
    cli.channel("weekly")
    now = cli.ledger.db_now().replace(microsecond=0)
    for hours in range(5):
        at = now - timedelta(hours=hours)
        assert cli.ledger.occurrences.insert_occurrence(NewOccurrence(channel_id, "nightly", 1, at))

    # When the occurrences are read two a page, each page after the key the last one names
    pages = [cli("occurrences", "list", "--limit", "2")]
    while "--after" in pages[-1].out.splitlines()[-1]:
        key = pages[-1].out.splitlines()[-1].split("--after ")[1].split()[0]
        pages.append(cli("occurrences", "list", "--limit", "2", "--after", key))
    prefixed = cli("channels", "list", "--name-prefix", "nightly", "--limit", "1")
    status = cli("status", "--name-prefix", "nightly", "--json")

    # Then the pages hold the five rows once each, newest first, each footer saying where
    # it is, and the prefix keeps the two nightly channels (newest first)
    footers = [page.out.splitlines()[-1].split(" (")[0] for page in pages]
    assert footers == ["2 of 5", "2 of 5", "1 of 5"]
    listed = [o for page in pages for o in page.out.split() if o.startswith(str(now.year))]
    assert listed == [to_rfc3339(now - timedelta(hours=h)) for h in range(5)]
    assert [r[0] for r in rows(prefixed)[1:2]] == ["nightly-eu"]
    assert "(--after " in prefixed.out.splitlines()[-1]
    assert [c["name"] for c in status.json()["data"]] == ["nightly-eu", "nightly"]


def test_unknown_channel_and_status_filters_are_errors_not_empty_lists(cli: Cli) -> None:
    channel = cli("occurrences", "list", "--channel", "nosuch")
    status = cli("occurrences", "list", "--status", "bogus")
    trigger = cli("occurrences", "list", "--trigger", "hourly")

    assert (channel.code, status.code, trigger.code) == (1, 1, 1)
    assert "no channel named 'nosuch'" in channel.err
    assert "unknown status 'bogus'; one of pending," in status.err
    assert status.err.count("unknown status") == 1  # printed once
    assert "unknown trigger 'hourly'" in trigger.err
    assert channel.out == status.out == ""


def test_a_time_that_is_neither_rfc_3339_nor_an_age_is_a_usage_error(cli: Cli) -> None:
    word = cli("occurrences", "list", "--since", "yesterday")
    no_offset = cli("occurrences", "list", "--since", "2026-12-01T00:00:00")

    assert word.code == 2
    assert "'yesterday' is neither an RFC 3339 time" in word.err and "an age (24h" in word.err
    assert no_offset.code == 1 and "add 'Z' for UTC" in no_offset.err  # the API's say


def test_trigger_then_the_run_shows_in_the_listing_and_in_full(cli: Cli) -> None:
    cli.channel("nightly")

    triggered = cli("trigger", "nightly")
    cli.scheduler.run_due()
    occurrence_id = cli.ledger.occurrences.list_occurrences().data[0].id
    listing = cli("occurrences", "list", "--channel", "nightly", "--since", "1h")
    shown = cli("occurrences", "show", occurrence_id)

    assert triggered.code == 0
    assert triggered.out.startswith(f"triggered nightly: occurrence {occurrence_id} is pending")
    header, row = rows(listing)
    assert header[:5] == ["SCHEDULED", "(UTC)", "CHANNEL", "STATUS", "TRIGGER"]
    assert row[1:5] == ["nightly", "completed", "manual", "1"]
    assert shown.code == 0
    assert "status:" in shown.out and "completed" in shown.out
    assert "materialised at v1, ran v1" in shown.out
    assert occurrence_id in shown.out.split("result:")[1]


def test_a_one_time_channel_shows_its_at_and_ended_once_it_fired(cli: Cli) -> None:
    channel_id = cli.ledger.channels.create_channel(
        "once", {"at": "2020-01-01T00:00:00"}, dict(OK_TARGET), 5000, "active"
    ).channel_id
    cli.scheduler.reconcile()  # created after its instant: parked at once

    listed = cli("channels", "list")
    status = cli("status")
    preview = cli("preview", channel_id)
    history = cli("channels", "history", "once")

    assert "at 2020-01-01T00:00:00 (ended)" in listed.out
    assert rows(history)[1][3:5] == ["at", "2020-01-01T00:00:00"]  # its schedule
    assert "at 2020-01-01T00:00:00 (ended)" in status.out
    assert preview.out.splitlines() == [
        "at 2020-01-01T00:00:00 (ended) in UTC:",
        "a one-time schedule: its instant (2020-01-01T00:00:00 UTC) has passed",
    ]


def test_status_and_preview_show_the_schedule_in_utc_and_local_time(cli: Cli) -> None:
    cli.channel("london", schedule="0 30 1 25-31 10 *", timezone="Europe/London")
    cli.scheduler.reconcile()

    status = cli("status")
    preview = cli("preview", "london", "--count", "16")

    assert status.code == 0
    header, row = rows(status)
    assert header[:3] == ["CHANNEL", "SCHEDULE", "TIMEZONE"]
    assert row[0] == "london" and "Europe/London" in row
    assert row[-1] == "allow"
    next_fire = cli.ledger.cursors.schedule_states()[0].next_fire_at
    assert next_fire is not None and next_fire.strftime("%Y-%m-%dT%H:%M:%SZ") in row
    assert preview.code == 0
    lines = preview.out.splitlines()
    assert lines[0] == "0 30 1 25-31 10 * in Europe/London:"
    assert lines[1].split() == ["UTC", "LOCAL", "DAY", "DST"]
    offsets = {line.split()[1][-6:] for line in lines[2:]}
    assert offsets == {"+01:00", "+00:00"}  # the fall-back day shows both


def test_preview_of_a_jittered_channel_shows_when_each_row_falls_due(cli: Cli) -> None:
    cli.channel("spread", schedule="0 0 * * * *", jitter_secs=900)

    preview = cli("preview", "spread", "--count", "5")

    header, *lines = rows(preview)[1:]
    assert header == ["UTC", "LOCAL", "DAY", "DUE", "(UTC)"]
    assert len(lines) == 5
    for utc, _local, _day, due in lines:
        at = datetime.fromisoformat(utc.replace("Z", "+00:00"))
        assert at <= datetime.fromisoformat(due.replace("Z", "+00:00")) < at + timedelta(minutes=15)


def test_with_json_each_command_prints_the_apis_answer_as_json_alone(cli: Cli) -> None:
    channel_id = cli.channel("scripted", FAIL_TARGET)
    triggered = cli("trigger", "scripted", "--json").json()["data"]
    cli.scheduler.run_due()

    answers = {
        "occurrence": cli("occurrences", "show", triggered["id"], "--json").json()["data"],
        "retry": cli("retry", triggered["id"], "--json").json()["data"],
        "cancel": cli("cancel", triggered["id"], "--json").json()["data"],
        "preview": cli("preview", "scripted", "--count", "2", "--json").json()["data"],
        "status": cli("status", "--json").json()["data"],
        "pause": cli("channels", "pause", "scripted", "--json").json()["data"],
        "history": cli("channels", "history", "scripted", "--json").json()["data"],
    }

    assert (answers["occurrence"]["id"], answers["occurrence"]["status"]) == (
        triggered["id"],
        "failed",
    )
    assert (answers["retry"]["status"], answers["cancel"]["status"]) == ("pending", "cancelled")
    assert len(answers["preview"]["instants"]) == 2
    assert [s["name"] for s in answers["status"]] == ["scripted"]
    assert answers["pause"]["status"] == "paused"
    assert [(v["channel_id"], v["version"]) for v in answers["history"]] == [(channel_id, 1)]


# --- acting on occurrences --------------------------------------------------------------------


def test_a_refused_request_exits_1_with_the_apis_message(cli: Cli) -> None:
    cli.ledger.channels.create_channel("drafty", SCHEDULE, OK_TARGET, 5000)
    cli.channel("done")
    assert cli("trigger", "done").code == 0
    cli.scheduler.run_due()
    completed = cli.ledger.occurrences.list_occurrences().data[0]

    draft = cli("trigger", "drafty")
    retry_done = cli("retry", completed.id)
    retry_unknown = cli("retry", "no-such-id", "--json")

    assert draft.code == 1
    assert "400 validation_failed" in draft.err and "drafty is draft" in draft.err
    assert retry_done.code == 1
    assert "409 conflict" in retry_done.err and "'completed'" in retry_done.err
    assert retry_unknown.code == 1
    assert retry_unknown.json()["error"]["code"] == "not_found"  # scripts get the envelope
    assert cli.ledger.occurrences.get_occurrence(completed.id).status == "completed"


def test_retry_and_cancel_report_the_rows_new_status(cli: Cli) -> None:
    cli.channel("flaky", FAIL_TARGET)
    assert cli("trigger", "flaky").code == 0
    cli.scheduler.run_due()
    failed = cli.ledger.occurrences.list_occurrences().data[0]

    retried = cli("retry", failed.id)
    cancelled = cli("cancel", failed.id, "--reason", "upstream is down")

    assert retried.code == 0
    assert "is pending; its next run is attempt 2" in retried.out
    assert cancelled.code == 0
    assert cancelled.out.strip().endswith("is cancelled")
    stored = cli.ledger.occurrences.get_occurrence(failed.id)
    assert (stored.status, stored.error_message) == (
        "cancelled",
        "cancelled by an operator: upstream is down",
    )


def test_retry_of_a_filter_counts_asks_and_retries_every_match(cli: Cli, tmp_path: Path) -> None:
    # Given three failed runs of one channel and one of another
    cli.channel("flaky", FAIL_TARGET)
    cli.channel("other", FAIL_TARGET)
    cli("backfill", "flaky", "--from", "3d", "--to", "1h")
    cli("trigger", "other")
    cli.scheduler.run_due()
    failed = {
        o.id for o in cli.ledger.occurrences.list_occurrences().data if o.channel_name == "flaky"
    }
    count = len(failed)
    assert count >= 2

    # When retried without --yes and no one to ask, then with --yes
    unconfirmed = cli("retry", "--channel", "flaky", "--status", "failed")
    still = {cli.ledger.occurrences.get_occurrence(i).status for i in failed}
    confirmed = cli("retry", "--channel", "flaky", "--since", "7d", "--yes", "--json")

    # Then nothing moved the first time; every flaky one, and only those, the second
    assert unconfirmed.code == 2
    assert f"Retry {count} failed occurrence(s) of flaky? Add --yes to confirm." in unconfirmed.err
    assert still == {"failed"}
    assert confirmed.code == 0
    assert {o["id"] for o in confirmed.json()["done"]} == failed
    assert f"retry: {count} done, 0 refused" in confirmed.err
    assert {
        o.id for o in cli.ledger.occurrences.list_occurrences().data if o.status == "pending"
    } == failed
    assert cli("retry", "1", "--status", "failed").code == 2  # ids or a filter, not both
    assert cli("retry").code == 2


@pytest.mark.parametrize(("answer", "code", "status"), [("y", 0, "pending"), ("n", 2, "failed")])
def test_retry_of_a_filter_at_a_terminal_asks_and_does_what_the_person_answers(
    cli: Cli, answer: str, code: int, status: str
) -> None:
    # Given two failed runs, and the command run at a terminal (a pseudo-terminal)
    cli.channel("flaky", FAIL_TARGET)
    for _ in range(2):
        cli("trigger", "flaky")
        cli.scheduler.run_due()
    failed = [o.id for o in cli.ledger.occurrences.list_occurrences().data]
    command = [sys.executable, "-c", "from cronledger.cli import entry; entry()"]
    leader, follower = os.openpty()
    try:
        with subprocess.Popen(
            [*command, "retry", "--channel", "flaky", "--api-url", cli.url],
            stdin=follower,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        ) as process:
            # When the question comes (on stderr) and the person answers it
            assert process.stderr is not None and process.stdout is not None
            asked = b""
            while b"[y/N]:" not in asked and (chunk := process.stderr.read1(4096)):
                asked += chunk
            os.write(leader, f"{answer}\n".encode())
            said = process.stdout.read().decode()
            exit_code = process.wait(timeout=30)
    finally:
        os.close(leader)
        os.close(follower)

    # Then the count was asked about, and the rows moved only on a yes
    assert b"Retry 2 failed occurrence(s) of flaky? [y/N]:" in asked
    assert exit_code == code
    assert {cli.ledger.occurrences.get_occurrence(i).status for i in failed} == {status}
    assert ("retry: 2 done, 0 refused" in said) == (answer == "y")


# --- events -----------------------------------------------------------------------------------


def _cancel_one(ledger: Ledger, channel_id: str, name: str) -> str:
    """A manual row of the channel, cancelled with a reason: one recorded event."""
    # An instant of its own: two "now"s can fall in one millisecond of SQLite's clock.
    at = ledger.db_now() - timedelta(days=1, seconds=ledger.occurrences.list_occurrences().total)
    row = NewOccurrence(channel_id, name, 1, at, trigger="manual")
    assert ledger.occurrences.insert_occurrence(row)
    ledger.occurrences.cancel(row.id, by="ops", reason="not today")
    return row.id


def test_events_show_kind_channel_instant_and_error_newest_first_and_json_for_scripts(
    cli: Cli,
) -> None:
    # Given a failed run of one channel (an alert) and a cancelled run of another
    cli.channel("flaky", FAIL_TARGET)
    quiet_id = cli.channel("quiet")
    assert cli("trigger", "flaky").code == 0
    cli.scheduler.run_due()
    cancelled = _cancel_one(cli.ledger, quiet_id, "quiet")

    table = cli("events")
    as_json = cli("events", "--json")
    failed_only = cli("events", "--kind", "failed", "--channel", "flaky", "--json")
    status = cli("status")

    # Then the table reads newest first with kind, channel, instant, delivery and error
    assert table.code == 0
    header, newest, oldest = table.out.splitlines()
    assert header.split()[:6] == ["AT", "(UTC)", "KIND", "CHANNEL", "SCHEDULED", "(UTC)"]
    assert newest.split()[1:3] == ["occurrence.cancelled", "quiet"]
    assert "recorded" in newest and "cancelled by ops: not today" in newest
    assert oldest.split()[1:3] == ["occurrence.failed", "flaky"]
    assert "undelivered" in oldest and "RuntimeError: report for" in oldest
    assert re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ ", newest)
    # …scripts get the API's page, and the filters narrow it
    body = as_json.json()
    assert [e["kind"] for e in body["data"]] == ["occurrence.cancelled", "occurrence.failed"]
    assert (body["limit"], body["next"], body["data"][0]["occurrence_id"]) == (50, None, cancelled)
    assert [e["channel_name"] for e in failed_only.json()["data"]] == ["flaky"]
    # …and the status view names the channel whose alert is open
    header, *lines = status.out.splitlines()
    assert "LAST STATUS  ALERT" in header
    alerts = {line.split()[0]: line.split() for line in lines}
    assert alerts["flaky"].count("failed") == 2  # its last status, and its open alert
    assert "failed" not in alerts["quiet"]


def test_events_page_by_key_and_an_unknown_kind_is_refused(cli: Cli) -> None:
    channel_id = cli.channel("quiet")
    written = [_cancel_one(cli.ledger, channel_id, "quiet") for _ in range(3)]

    first = cli("events", "--limit", "2")
    key = first.out.splitlines()[-1].split()[1]
    second = cli("events", "--limit", "2", "--after", key, "--json")
    unknown = cli("events", "--kind", "exploded")

    assert first.code == second.code == 0
    assert first.out.splitlines()[-1] == f"(--after {key} for more)"
    assert [e["occurrence_id"] for e in second.json()["data"]] == written[:1]
    assert unknown.code == 1 and "unknown kind 'exploded'" in unknown.err


@pytest.mark.parametrize("fmt", ["table", "json"])
def test_events_watch_prints_an_event_written_while_it_watches(cli: Cli, fmt: str) -> None:
    # Given an event already written, and another written once the watch has read its first
    # page (before that page reaches it); the watch is ended with Ctrl-C once it has asked
    # again after that, so it has printed what it found
    channel_id = cli.channel("quiet")
    before = _cancel_one(cli.ledger, channel_id, "quiet")
    later: list[str] = []
    events = f"{PREFIX}/cron/events"
    cli.served.on(events, 1, lambda: later.append(_cancel_one(cli.ledger, channel_id, "quiet")))
    cli.served.on(events, 3, ctrl_c)

    # When the events are watched
    ran = cli("events", "--watch", "--interval", "0.1", "--watch-for", "30", "-o", fmt)

    # Then the one there is printed first, and the new one after it, once
    assert ran.code == 0 and len(later) == 1
    if fmt == "json":
        shown = [json.loads(line)["occurrence_id"] for line in ran.out.splitlines()]
    else:
        lines = ran.out.splitlines()
        assert lines[0].split()[:3] == ["AT", "(UTC)", "KIND"]
        ids = {before: before[:12], later[0]: later[0][:12]}
        shown = [next(i for i, short in ids.items() if short in line) for line in lines[1:]]
    assert shown == [before, later[0]]


def test_lifecycle_commands_and_an_archived_channel_is_never_told_to_reactivate(cli: Cli) -> None:
    channel = cli.ledger.channels.create_channel("life", SCHEDULE, OK_TARGET, 5000)

    resumed = cli("channels", "resume", "life")
    paused = cli("channels", "pause", channel.channel_id)  # an id works as well as a name
    archived = cli("channels", "archive", "life")
    trigger = cli("trigger", "life")
    unconfirmed = cli("channels", "delete", "life")
    still_there = cli.ledger.channels.get_channel(channel.channel_id).status
    deleted = cli("channels", "delete", "life", "--yes")

    assert [r.out.strip() for r in (resumed, paused, archived)] == [
        "channel life is now active",
        "channel life is now paused",
        "channel life is now archived",
    ]
    assert trigger.code == 1
    assert "archived is final" in trigger.err and '"active"' not in trigger.err
    assert (unconfirmed.code, still_there) == (2, "archived")
    assert "--yes" in unconfirmed.err
    assert (deleted.code, deleted.out.strip()) == (0, "deleted channel life")
    assert cli.ledger.channels.list_channels().total == 0


# --- conventions ------------------------------------------------------------------------------


def test_version_and_global_options_before_or_after_the_subcommand(
    cli: Cli, capsys: pytest.CaptureFixture[str]
) -> None:
    cli.channel("nightly")
    capsys.readouterr()

    version = main(["--version"])
    printed = capsys.readouterr().out
    before = main(["--api-url", cli.url, "-o", "json", "status"])
    first = json.loads(capsys.readouterr().out)
    after = main(["status", "--api-url", cli.url, "--json"])
    second = json.loads(capsys.readouterr().out)
    closed = main(["--api-url", "http://127.0.0.1:9", "status", "--api-url", cli.url])

    assert (version, printed.strip()) == (0, "cronledger 0.1.0")
    assert (before, after, closed) == (0, 0, 0)  # the one after the subcommand wins
    assert first["data"][0]["name"] == second["data"][0]["name"] == "nightly"


def test_a_non_http_api_url_is_a_usage_error(cli: Cli) -> None:
    ran = cli("status", api_url="ftp://example.com")

    assert ran.code == 2
    said = " ".join(re.sub(r"[│╭╮╰╯─]", " ", ran.err).split())
    assert (
        "Invalid value for '--api-url': 'ftp://example.com' is not an http:// or https:// URL"
        in said
    )


def test_an_unreachable_api_exits_3_with_a_sentence_not_a_traceback(cli: Cli) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}"

    ran = cli("status", api_url=closed)

    assert ran.code == 3
    assert ran.err.startswith(f"cronledger: error: cannot reach the cronledger API at {closed}")
    assert ran.err.count("cannot reach") == 1
    assert "Traceback" not in ran.err


def test_tables_fit_the_terminal_dropping_the_least_important_columns_but_not_an_error(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    cli.channel("a-rather-long-channel-name", FAIL_TARGET)
    cli("trigger", "a-rather-long-channel-name")
    cli.scheduler.run_due()
    full_id = cli.ledger.occurrences.list_occurrences().data[0].id

    monkeypatch.setenv("COLUMNS", "100")
    fitted = cli("occurrences", "list")
    monkeypatch.setenv("COLUMNS", "60")
    narrow = cli("occurrences", "list")
    wide = cli("occurrences", "list", "-o", "wide")

    assert max(map(len, fitted.out.splitlines())) <= 100
    assert rows(fitted)[0][:4] == ["SCHEDULED", "(UTC)", "CHANNEL", "STATUS"]
    assert rows(fitted)[0][-1] == "ERROR" and "RuntimeError: report for" in fitted.out
    assert max(map(len, narrow.out.splitlines())) <= 60
    assert rows(narrow)[0] == ["SCHEDULED", "(UTC)", "STATUS", "ERROR"]
    assert "RuntimeError" in narrow.out  # cut, never dropped, while a row shown failed
    assert full_id in wide.out and "RuntimeError: report for" in wide.out


def test_statuses_are_coloured_on_a_terminal_unless_no_color(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    cli.channel("flaky", FAIL_TARGET)
    cli("trigger", "flaky")
    cli.scheduler.run_due()

    plain = cli("occurrences", "list")
    monkeypatch.setenv("FORCE_COLOR", "1")
    coloured = cli("occurrences", "list")
    monkeypatch.setenv("NO_COLOR", "1")
    no_color = cli("occurrences", "list")

    assert "\x1b[" not in plain.out  # not a terminal
    assert "\x1b[1;31mfailed" in coloured.out
    assert "\x1b[31m" not in no_color.out and "\x1b[1;31m" not in no_color.out


def test_every_option_and_argument_has_help() -> None:
    command = typer.main.get_command(app)

    def missing(cmd: Any, path: str) -> list[str]:
        gaps = [
            f"{path} {param.name}"
            for param in cmd.params
            if not getattr(param, "help", None) and param.name not in ("help",)
        ]
        if not (cmd.help or "").strip():
            gaps.append(f"{path} (no help)")
        for name, sub in getattr(cmd, "commands", {}).items():
            gaps += missing(sub, f"{path} {name}")
        return gaps

    assert missing(command, "cronledger") == []


def test_help_reads_as_sentences_not_as_the_docstrings_line_breaks(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")

    assert main(["--help"]) == 0

    listed = capsys.readouterr().out
    assert (
        "back to pending (same id and instant; each runs as its next attempt): the ones" in listed
    )


def test_shell_completion_completes_commands(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("_CRONLEDGER_COMPLETE", "complete_bash")
    monkeypatch.setenv("COMP_WORDS", "cronledger channels hi")
    monkeypatch.setenv("COMP_CWORD", "2")

    code = main([])

    assert code == 0
    assert capsys.readouterr().out.split() == ["history"]


def test_shell_completion_completes_channel_names_from_the_api(
    cli: Cli, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("nightly", "noon", "hourly"):
        cli.channel(name)
    monkeypatch.setenv("_CRONLEDGER_COMPLETE", "complete_bash")
    monkeypatch.setenv("COMP_WORDS", f"cronledger --api-url {cli.url} channels show n")
    monkeypatch.setenv("COMP_CWORD", "5")

    code = main([])

    assert code == 0
    assert capsys.readouterr().out.split() == ["nightly", "noon"]


def test_a_closed_pipe_ends_the_command_quietly(cli: Cli) -> None:
    # More output than a pipe holds (64 KiB), so the command is still writing when the
    # reader goes: it must meet the closed pipe, not finish before it.
    for number in range(200):
        cli.ledger.channels.create_channel(f"channel-{number:03}", SCHEDULE, OK_TARGET, 5000)
    command = [sys.executable, "-c", "from cronledger.cli import entry; entry()"]
    environment = {**os.environ, "CRONLEDGER_API_URL": cli.url}

    # `cronledger channels list | head -1`, the reader gone after one line
    with subprocess.Popen(
        [*command, "channels", "list", "--limit", "1000", "-o", "yaml"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=environment,
    ) as process:
        assert process.stdout is not None and process.stderr is not None
        assert process.stdout.readline() == b"data:\n"
        process.stdout.close()
        error = process.stderr.read()
        code = process.wait(timeout=30)

    assert error == b""  # no "Broken pipe", no traceback
    assert code == -signal.SIGPIPE  # ended by the signal, as `head` expects of a C tool


def test_a_request_to_an_api_gateway_endpoint_is_sigv4_signed_and_a_local_one_is_not(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    sent: list[urllib.request.Request] = []

    def send(request: urllib.request.Request, timeout: float) -> tuple[int, dict[str, str], bytes]:
        sent.append(request)
        return 200, {}, b'{"data": []}'

    aws = ApiClient("https://abc123defg.execute-api.eu-west-1.amazonaws.com", send=send)
    local = ApiClient("http://127.0.0.1:8080", send=send)
    aws.call("POST", "/api/v1/admin/channels", body={"name": "nightly"})
    local.call("GET", "/api/v1/admin/channels", {"name": "nightly"})

    signed, plain = sent
    authorization = signed.get_header("Authorization")
    assert authorization.startswith("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/")
    assert "/eu-west-1/execute-api/aws4_request" in authorization
    assert "SignedHeaders=" in authorization and "Signature=" in authorization
    assert signed.get_header("X-amz-date")
    assert (
        signed.full_url
        == "https://abc123defg.execute-api.eu-west-1.amazonaws.com/api/v1/admin/channels"
    )
    assert signed.data == b'{"name": "nightly"}'
    assert plain.get_header("Authorization") is None
    assert plain.full_url == "http://127.0.0.1:8080/api/v1/admin/channels?name=nightly"


def test_migrate_refuses_a_blank_database_url_variable_by_name(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CRONLEDGER_DATABASE_URL", " ")
    assert main(["migrate"]) != 0
    assert "CRONLEDGER_DATABASE_URL is empty" in capsys.readouterr().err


def test_migrate_upgrades_the_named_database(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'fresh.db'}"

    assert main(["migrate", "--database-url", url]) == 0

    assert capsys.readouterr().out.strip() == f"migrated {url}"
    ledger = Ledger.connect(url)
    assert ledger.channels.list_channels().total == 0
    ledger.dispose()


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(
    ("typed", "code", "kept"), [("n\n", 2, True), ("", 2, True), ("y\n", 0, False)]
)
def test_a_prompt_answered_no_or_closed_exits_2_having_done_nothing(
    cli: Cli, monkeypatch: pytest.MonkeyPatch, typed: str, code: int, kept: bool
) -> None:
    # Given a channel, and a person at a terminal who types `typed` (nothing: end of input)
    channel_id = cli.channel("doomed")
    monkeypatch.setattr(sys, "stdin", _Terminal(typed))

    # When they delete it without --yes
    ran = cli("channels", "delete", "doomed")

    # Then a "no" (or a closed input) is the usage exit code and the channel stays
    assert ran.code == code
    assert (channel_id in {c.channel_id for c in cli.ledger.channels.list_channels().data}) == kept
    if kept:
        assert "Nothing was done." in ran.err
