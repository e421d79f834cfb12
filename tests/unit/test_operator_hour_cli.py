"""What an operator reads in the hour after something failed, at an 80-column terminal: the
listing keeps each failure's error, `occurrences show` lists every attempt with its error and
a Python target's last frames, and `--watch` prints rows as they change."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest

from cronledger.api import PREFIX
from cronledger.ledger import NewOccurrence
from tests.api.helpers import FAIL_TARGET
from tests.unit.test_operator_cli import NIGHTLY_YAML, Cli, cli, ctrl_c, rows

__all__ = ["cli"]  # the fixture, shared with the command line's other tests

FAIL_FIRST = {"type": "python", "callable": "tests.api.jobs:fail_first"}
RETRIED_AT_ONCE = {"max_attempts": 2, "backoff_secs": 0}


@pytest.fixture(autouse=True)
def _eighty_columns(cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")  # after `cli`, which clears it


def test_the_listing_at_80_columns_keeps_each_failures_error_cut_to_fit(cli: Cli) -> None:
    # Given a channel with a long name whose run failed
    cli.channel("a-rather-long-channel-name", FAIL_TARGET)
    cli("trigger", "a-rather-long-channel-name")
    cli.scheduler.run_due()

    # When the occurrences are listed at 80 columns
    listed = cli("occurrences", "list")

    # Then the table fits, and its last column is the error, cut with an ellipsis
    assert listed.code == 0
    assert max(map(len, listed.out.splitlines())) <= 80
    header, row = rows(listed)[:2]
    assert header[-1] == "ERROR"
    assert "failed" in row
    assert "RuntimeError:" in listed.out and "…" in listed.out.splitlines()[1]


def test_the_listing_of_rows_without_errors_drops_the_error_column_first(cli: Cli) -> None:
    # Given only a completed run
    cli.channel("a-rather-long-channel-name")
    cli("trigger", "a-rather-long-channel-name")
    cli.scheduler.run_due()

    # When listed at 80 columns
    listed = cli("occurrences", "list")

    # Then the empty error column is the first one given up for room
    assert "ERROR" not in listed.out
    assert "completed" in listed.out


def test_show_lists_every_attempt_with_its_error_and_where_it_failed(cli: Cli) -> None:
    # Given an occurrence whose first attempt failed and whose retry completed
    cli.channel("flaky", FAIL_FIRST, retry=RETRIED_AT_ONCE)
    cli("trigger", "flaky")
    cli.scheduler.run_due()
    occurrence_id = cli.ledger.occurrences.list_occurrences().data[0].id

    # When it is shown, for a person and for a script
    shown = cli("occurrences", "show", occurrence_id)
    as_json = cli("occurrences", "show", occurrence_id, "-o", "json")

    # Then both attempts are listed first to last, the failure with its error and frames
    assert shown.code == 0
    listed = shown.out.split("attempts:\n")[1].splitlines()
    assert listed[0].split()[:3] == ["#", "OUTCOME", "STARTED"]
    assert listed[1].split()[:2] == ["1", "failed"]
    assert "RuntimeError: first" in listed[1]
    assert listed[2].split()[:2] == ["2", "completed"]
    assert "attempt 1 failed at:" in shown.out
    assert 'in fail_first\n    raise RuntimeError("first attempt fails' in shown.out
    attempts = as_json.json()["data"]["attempts"]
    assert [(a["number"], a["outcome"]) for a in attempts] == [(1, "failed"), (2, "completed")]


def test_watching_the_listing_prints_a_row_again_when_its_status_changes(cli: Cli) -> None:
    # Given a pending manual row, cancelled once the watch has read the listing (before the
    # listing reaches it); the watch is ended with Ctrl-C once it has asked again after that
    channel_id = cli.channel("nightly")
    row = NewOccurrence(channel_id, "nightly", 1, cli.ledger.db_now() - timedelta(hours=1))
    assert cli.ledger.occurrences.insert_occurrence(row)
    listing = f"{PREFIX}/cron/occurrences"
    cli.served.on(listing, 1, lambda: cli.ledger.occurrences.cancel(row.id, by="ops"))
    cli.served.on(listing, 3, ctrl_c)

    # When the listing is watched
    watched = cli("occurrences", "list", "--watch", "--interval", "0.1", "--watch-for", "30")

    # Then the row was printed pending under the header, then once more, cancelled
    assert watched.code == 0
    lines = watched.out.splitlines()
    assert lines[0].split()[:2] == ["SCHEDULED", "(UTC)"]
    assert [line.split()[2] for line in lines[1:]] == ["pending", "cancelled"]


def test_watching_status_prints_a_channel_again_when_its_backlog_grows(cli: Cli) -> None:
    # Given an active channel, given a pending row once the watch has read its status (before
    # the status reaches it); the watch is ended with Ctrl-C once it has asked again after that
    channel_id = cli.channel("nightly")
    backlog = NewOccurrence(channel_id, "nightly", 1, cli.ledger.db_now() + timedelta(hours=1))
    status = f"{PREFIX}/cron/status"
    cli.served.on(status, 1, lambda: cli.ledger.occurrences.insert_occurrence(backlog))
    cli.served.on(status, 3, ctrl_c)

    # When the status is watched, as JSON lines
    watched = cli("status", "--watch", "--interval", "0.1", "--watch-for", "30", "-o", "json")

    # Then the channel was printed twice: with nothing pending, then with one
    assert watched.code == 0
    printed = [line for line in watched.out.splitlines() if line]
    assert [json.loads(line)["pending"] for line in printed] == [0, 1]


def test_a_channel_listing_exported_as_yaml_applies_back_with_no_change(
    cli: Cli, tmp_path: Path
) -> None:
    # Given two channels, one paused, exported by `channels list -o yaml`
    cli.channel("nightly")
    paused = cli.channel("hourly", schedule="0 0 * * * *")
    cli.ledger.channels.set_channel_status(paused, "paused")
    exported = cli("channels", "list", "-o", "yaml")
    listing = tmp_path / "channels.yaml"
    listing.write_text(exported.out, encoding="utf-8")

    # When the export is applied back
    applied = cli("channels", "apply", "-f", str(listing), "-o", "json")

    # Then each channel is unchanged: same version, same status
    assert applied.code == 0, applied.err
    outcomes = {o["name"]: o["outcome"] for o in applied.json()}
    assert outcomes == {"nightly": "unchanged", "hourly": "unchanged"}
    assert [(c.name, c.version) for c in cli.ledger.channels.list_channels().data] == [
        ("hourly", 1),
        ("nightly", 1),
    ]


def test_two_documents_of_one_name_are_both_refused_naming_each_other(
    cli: Cli, tmp_path: Path
) -> None:
    # Given a file whose first and third documents share a name
    text = NIGHTLY_YAML + "---\n" + NIGHTLY_YAML.replace("nightly", "weekly") + "---\n"
    text += NIGHTLY_YAML.replace('"0 15 2 * * *"', '"0 30 2 * * *"')
    path = tmp_path / "twice.yaml"
    path.write_text(text, encoding="utf-8")

    # When it is applied
    applied = cli("channels", "apply", "-f", str(path))

    # Then both are refused, each naming where the other is, and only the other one applied
    assert applied.code == 1
    both = f"{path} (document 1) and {path} (document 3)"
    refusals = [
        line for line in applied.err.splitlines() + applied.out.splitlines() if both in line
    ]
    assert len(refusals) == 2
    assert [c.name for c in cli.ledger.channels.list_channels().data] == ["weekly"]


def test_apply_of_a_past_at_is_refused_unless_allowed_and_then_warns(
    cli: Cli, tmp_path: Path
) -> None:
    # Given a one-time channel document for a date long gone
    path = tmp_path / "once.yaml"
    path.write_text(
        NIGHTLY_YAML.replace('schedule: "0 15 2 * * *"', 'at: "2020-01-01T00:00:00"'),
        encoding="utf-8",
    )

    # When it is applied, then applied with --allow-past
    refused = cli("channels", "apply", "-f", str(path))
    allowed = cli("channels", "apply", "-f", str(path), "--allow-past")

    # Then the first is refused at transport_config.at, the second saved with a warning
    assert refused.code == 1
    assert "transport_config.at: 2020-01-01T00:00:00 in Europe/London is in the past" in (
        refused.out
    )
    assert allowed.code == 0
    assert "warning  nightly: transport_config.at:" in allowed.out
    assert "will never run" in allowed.out
    assert [c.name for c in cli.ledger.channels.list_channels().data] == ["nightly"]


def test_show_says_how_late_after_its_instant_a_run_started_beside_its_lag(cli: Cli) -> None:
    # Given a run that started
    cli.channel("nightly")
    cli("trigger", "nightly")
    cli.scheduler.run_due()
    occurrence = cli.ledger.occurrences.list_occurrences().data[0]

    # When it is shown, and read as JSON
    shown = cli("occurrences", "show", occurrence.id)
    record = cli("occurrences", "show", occurrence.id, "-o", "json").json()["data"]

    # Then both figures are there, the late-by one measured from the instant
    assert "lag:" in shown.out and "after it was due" in shown.out
    assert "late by:" in shown.out and "after its instant" in shown.out
    assert occurrence.started_at is not None
    expected = (occurrence.started_at - occurrence.scheduled_for).total_seconds() * 1000
    assert record["late_by_ms"] == round(expected)


def test_preview_from_an_instant_marks_weekdays_and_the_dst_change(cli: Cli) -> None:
    # Given a channel at 01:30 London time, which the autumn change makes happen twice
    cli.channel("early", schedule="0 30 1 * * *", timezone="Europe/London")

    # When four fire times from the day before the change are previewed
    shown = cli("preview", "early", "--from", "2026-10-24T00:00:00Z", "--count", "4")
    as_json = cli(
        "preview", "early", "--from", "2026-10-24T00:00:00Z", "--count", "4", "-o", "json"
    )

    # Then each has its local weekday, and the second 01:30 on Sunday carries the change
    assert shown.code == 0, shown.err
    instants = as_json.json()["data"]["instants"]
    assert [i["weekday"] for i in instants] == ["Sat", "Sun", "Sun", "Mon"]
    assert [i["dst"] for i in instants] == [None, None, "+01:00 → +00:00", None]
    assert "offset +01:00 → +00:00" in shown.out
    assert rows(shown)[1][-3:] == ["LOCAL", "DAY", "DST"]


def test_preview_answers_up_to_a_thousand_instants(cli: Cli) -> None:
    cli.channel("often", schedule="0 * * * * *")

    shown = cli("preview", "often", "--count", "1000", "-o", "json")

    assert len(shown.json()["data"]["instants"]) == 1000


def test_a_pause_reason_is_shown_by_status_show_and_history(cli: Cli) -> None:
    # Given a channel paused with a reason
    cli.channel("nightly")
    paused = cli("channels", "pause", "nightly", "--reason", "warehouse migration until Friday")

    # When the operator looks at status, the channel and its history
    status = cli("status")
    shown = cli("channels", "show", "nightly")
    history = cli("channels", "history", "nightly")

    # Then each says it is paused, and why
    why = "warehouse migration until Friday"
    assert paused.code == 0 and why in paused.out
    assert "nightly: paused since " in status.out and status.out.rstrip().endswith(why)
    assert any(line.split()[:1] == ["reason:"] and why in line for line in shown.out.splitlines())
    assert history.out.startswith("paused since ") and why in history.out.splitlines()[0]


def test_resuming_clears_the_pause_reason(cli: Cli) -> None:
    channel_id = cli.channel("nightly")
    cli("channels", "pause", "nightly", "--reason", "flaky upstream")

    resumed = cli("channels", "resume", "nightly")

    assert resumed.code == 0
    assert cli.ledger.channels.get_channel(channel_id).status_reason is None
    assert "flaky upstream" not in cli("status").out
