"""The operator command line against the real API on a local HTTP server (127.0.0.1, SQLite).

Invariant: every command prints what the API answered (a table, or the API's JSON with
`--json`) and exits 0; a refusal exits 1 with the API's message and field details; bad usage
exits 2; an API that cannot be reached exits 3 with a sentence, never a traceback. Requests to
an API Gateway endpoint carry a SigV4 signature.
"""

from __future__ import annotations

import argparse
import json
import socket
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cronledger.api import create_app
from cronledger.ledger import Ledger
from cronledger.operator_cli import ApiClient, add_operator_commands
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


@dataclass
class Ran:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


@dataclass
class Cli:
    url: str
    ledger: Ledger
    scheduler: Scheduler
    capsys: pytest.CaptureFixture[str]

    def __call__(self, *argv: str, api_url: str | None = None) -> Ran:
        parser = argparse.ArgumentParser(prog="cronledger")
        add_operator_commands(parser.add_subparsers(dest="command", required=True))
        args = parser.parse_args([*argv, "--api-url", api_url or self.url])
        self.capsys.readouterr()
        code = args.func(args)
        captured = self.capsys.readouterr()
        return Ran(code, captured.out, captured.err)


@pytest.fixture
def cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Iterator[Cli]:
    ledger = Ledger.connect(f"sqlite:///{tmp_path / 'ledger.db'}")
    ledger.migrate()
    with serving(create_app(ledger, SETTINGS)) as url:
        yield Cli(url, ledger, Scheduler(ledger), capsys)
    ledger.dispose()


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_apply_creates_then_leaves_unchanged_then_versions_a_channel_by_name(
    cli: Cli, tmp_path: Path
) -> None:
    path = write(tmp_path, "nightly.yaml", NIGHTLY_YAML)

    created = cli("channels", "apply", "-f", path)
    again = cli("channels", "apply", "-f", path)
    write(tmp_path, "nightly.yaml", NIGHTLY_YAML.replace("0 15 2", "0 30 3") + "status: active\n")
    changed = cli("channels", "apply", "-f", path)

    assert (created.code, again.code, changed.code) == (0, 0, 0)
    assert created.out.startswith("created channel nightly (")
    assert again.out.strip() == "channel nightly unchanged (version 1)"
    assert changed.out.splitlines() == [
        "updated channel nightly to version 2",
        "channel nightly is now active",
    ]
    stored = cli.ledger.get_channel_by_name("nightly")
    assert (stored.version, stored.status) == (2, "active")
    assert stored.transport_config["schedule"] == "0 30 3 * * *"


def test_apply_of_a_bad_document_exits_1_with_every_field_problem(cli: Cli, tmp_path: Path) -> None:
    document = {
        "name": "nightly",
        "transport_config": {"schedule": "15 2 * * *"},
        "target": {"type": "http"},
    }
    path = write(tmp_path, "bad.json", json.dumps(document))

    ran = cli("channels", "apply", "-f", path)

    assert ran.code == 1
    assert ran.out == ""
    assert "400 validation_failed" in ran.err
    assert "  transport_config.schedule: has 5 field(s)" in ran.err
    assert "  target.url: " in ran.err
    assert "Traceback" not in ran.err
    assert cli.ledger.list_channels().total == 0


def test_apply_of_an_unreadable_file_exits_2_and_sends_nothing(cli: Cli, tmp_path: Path) -> None:
    missing = cli("channels", "apply", "-f", str(tmp_path / "nope.yaml"))
    nameless = cli("channels", "apply", "-f", write(tmp_path, "x.yaml", "schedule: daily\n"))
    broken = cli("channels", "apply", "-f", write(tmp_path, "y.yaml", "name: [unclosed\n"))

    assert (missing.code, nameless.code, broken.code) == (2, 2, 2)
    assert "cannot read" in missing.err
    assert "an object with a name" in nameless.err
    assert "not valid JSON or YAML" in broken.err
    assert cli.ledger.list_channels().total == 0


def test_list_prints_a_table_for_people_and_the_apis_json_for_scripts(
    cli: Cli, tmp_path: Path
) -> None:
    cli("channels", "apply", "-f", write(tmp_path, "n.yaml", NIGHTLY_YAML))

    table = cli("channels", "list")
    as_json = cli("channels", "list", "--json")

    assert table.code == 0
    header, row = table.out.splitlines()
    assert header.split()[:4] == ["NAME", "STATUS", "VERSION", "SCHEDULE"]
    assert row.split()[:3] == ["nightly", "draft", "1"]
    assert "0 15 2 * * *" in row and "Europe/London" in row
    body = as_json.json()
    assert (body["total"], body["data"][0]["name"]) == (1, "nightly")


def test_trigger_by_name_then_the_run_shows_in_the_listing_and_in_full(cli: Cli) -> None:
    channel = cli.ledger.create_channel(
        "nightly", {"schedule": "0 15 2 * * *"}, OK_TARGET, 5000, "active"
    )

    triggered = cli("trigger", "nightly")
    cli.scheduler.run_due()
    listing = cli("occurrences", "list", "--channel", "nightly", "--since", "1h")
    occurrence_id = cli.ledger.list_occurrences().data[0].id
    shown = cli("occurrences", "show", occurrence_id)

    assert triggered.code == 0
    assert triggered.out.startswith(f"triggered nightly: occurrence {occurrence_id} is pending")
    assert listing.code == 0
    header, row = listing.out.splitlines()
    assert header.split()[:4] == ["SCHEDULED", "(UTC)", "CHANNEL", "TRIGGER"]
    assert row.split()[1:5] == ["nightly", "manual", "completed", "1"]
    assert shown.code == 0
    assert "status:        completed" in shown.out
    assert f"materialised at v{channel.version}, ran v1" in shown.out
    assert occurrence_id in shown.out.split("result:")[1]


def test_a_refused_request_exits_1_with_the_apis_message(cli: Cli) -> None:
    cli.ledger.create_channel("drafty", {"schedule": "0 15 2 * * *"}, OK_TARGET, 5000)
    cli.ledger.create_channel("done", {"schedule": "0 15 2 * * *"}, OK_TARGET, 5000, "active")
    assert cli("trigger", "done").code == 0
    cli.scheduler.run_due()
    completed = cli.ledger.list_occurrences().data[0]

    draft = cli("trigger", "drafty")
    retry_done = cli("retry", completed.id)
    retry_unknown = cli("retry", "no-such-id", "--json")

    assert draft.code == 1
    assert "400 validation_failed" in draft.err and "drafty is draft" in draft.err
    assert retry_done.code == 1
    assert "409 conflict" in retry_done.err and "'completed'" in retry_done.err
    assert retry_unknown.code == 1
    assert retry_unknown.json()["error"]["code"] == "not_found"  # scripts get the envelope
    assert cli.ledger.get_occurrence(completed.id).status == "completed"


#: A schedule whose failures are final at once (no automatic retry).
ONCE = {"schedule": "0 15 2 * * *", "retry": {"max_attempts": 1}}


def test_retry_and_cancel_report_the_rows_new_status(cli: Cli) -> None:
    cli.ledger.create_channel("flaky", ONCE, FAIL_TARGET, 5000, "active")
    assert cli("trigger", "flaky").code == 0
    cli.scheduler.run_due()
    failed = cli.ledger.list_occurrences().data[0]

    retried = cli("retry", failed.id)
    cancelled = cli("cancel", failed.id)

    assert retried.code == 0
    assert "is pending again; its next run is attempt 2" in retried.out
    assert cancelled.code == 0
    assert cancelled.out.strip().endswith("is cancelled")
    assert cli.ledger.get_occurrence(failed.id).status == "cancelled"


def test_with_json_each_command_prints_the_apis_answer_as_json_alone(cli: Cli) -> None:
    channel = cli.ledger.create_channel("scripted", ONCE, FAIL_TARGET, 5000, "active")
    triggered = cli("trigger", "scripted", "--json").json()["data"]
    cli.scheduler.run_due()

    answers = {
        "show": cli("channels", "show", "scripted", "--json").json()["data"],
        "occurrence": cli("occurrences", "show", triggered["id"], "--json").json()["data"],
        "retry": cli("retry", triggered["id"], "--json").json()["data"],
        "cancel": cli("cancel", triggered["id"], "--json").json()["data"],
        "preview": cli("preview", "scripted", "--count", "2", "--json").json()["data"],
        "status": cli("status", "--json").json()["data"],
        "pause": cli("channels", "pause", "scripted", "--json").json()["data"],
    }

    assert answers["show"]["channel_id"] == channel.channel_id
    assert (answers["occurrence"]["id"], answers["occurrence"]["status"]) == (
        triggered["id"],
        "failed",
    )
    assert (answers["retry"]["status"], answers["cancel"]["status"]) == ("pending", "cancelled")
    assert len(answers["preview"]["instants"]) == 2
    assert [s["name"] for s in answers["status"]] == ["scripted"]
    assert answers["pause"]["status"] == "paused"


def test_status_and_preview_show_the_schedule_in_utc_and_local_time(cli: Cli) -> None:
    cli.ledger.create_channel(
        "london",
        {"schedule": "0 30 1 25-31 10 *", "timezone": "Europe/London"},
        OK_TARGET,
        5000,
        "active",
    )
    cli.scheduler.reconcile()

    status = cli("status")
    preview = cli("preview", "london", "--count", "16")

    assert status.code == 0
    header, row = status.out.splitlines()
    assert header.split()[:3] == ["CHANNEL", "SCHEDULE", "TIMEZONE"]
    assert row.startswith("london") and "Europe/London" in row
    next_fire = cli.ledger.schedule_states()[0].next_fire_at
    assert next_fire is not None and next_fire.strftime("%Y-%m-%dT%H:%M:%SZ") in row
    assert preview.code == 0
    lines = preview.out.splitlines()
    assert lines[0] == "0 30 1 25-31 10 * in Europe/London:"
    assert lines[1].split() == ["UTC", "LOCAL"]
    offsets = {line.split()[1][-6:] for line in lines[2:]}
    assert offsets == {"+01:00", "+00:00"}  # the fall-back day shows both


def test_pause_resume_archive_and_delete_move_the_channel_along_its_lifecycle(cli: Cli) -> None:
    channel = cli.ledger.create_channel("life", {"schedule": "0 15 2 * * *"}, OK_TARGET, 5000)

    resumed = cli("channels", "resume", "life")
    paused = cli("channels", "pause", channel.channel_id)  # an id works as well as a name
    archived = cli("channels", "archive", "life")
    unconfirmed = cli("channels", "delete", "life")
    still_there = cli.ledger.get_channel(channel.channel_id).status
    deleted = cli("channels", "delete", "life", "--yes")

    assert [r.out.strip() for r in (resumed, paused, archived)] == [
        "channel life is now active",
        "channel life is now paused",
        "channel life is now archived",
    ]
    assert (unconfirmed.code, still_there) == (2, "archived")
    assert "--yes" in unconfirmed.err
    assert (deleted.code, deleted.out.strip()) == (0, "deleted channel life")
    assert cli.ledger.list_channels().total == 0


def test_an_unreachable_api_exits_3_with_a_sentence_not_a_traceback(cli: Cli) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}"

    ran = cli("status", api_url=closed)

    assert ran.code == 3
    assert ran.err.startswith(f"cronledger: error: cannot reach the cronledger API at {closed}")
    assert "CRONLEDGER_API_URL" in ran.err
    assert "Traceback" not in ran.err


def test_the_api_url_defaults_to_the_environment_then_the_local_runner(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def default() -> str:
        parser = argparse.ArgumentParser()
        add_operator_commands(parser.add_subparsers(dest="command"))
        url: str = parser.parse_args(["status"]).api_url
        return url

    monkeypatch.delenv("CRONLEDGER_API_URL", raising=False)
    local = default()
    monkeypatch.setenv("CRONLEDGER_API_URL", "https://ops.example.com")

    assert (local, default()) == ("http://127.0.0.1:8080", "https://ops.example.com")


def test_a_request_to_an_api_gateway_endpoint_is_sigv4_signed_and_a_local_one_is_not(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    sent: list[urllib.request.Request] = []

    def send(request: urllib.request.Request, timeout: float) -> tuple[int, bytes]:
        sent.append(request)
        return 200, b'{"data": []}'

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
    from cronledger.cli import main

    monkeypatch.setenv("CRONLEDGER_DATABASE_URL", " ")
    assert main(["migrate"]) != 0
    assert "CRONLEDGER_DATABASE_URL is empty" in capsys.readouterr().err
