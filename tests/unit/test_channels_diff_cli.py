"""`cronledger channels diff -f FILE` against the real API on a local HTTP server (SQLite):
for each channel the file changes, the field diff and the next instants before and after, in
UTC and the channel's zone, with the instants next to a DST gap or on a fold marked.

The schedules start in 2027 (`starts_at`), so the instants are the same whenever this runs.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from cronledger.api import create_app
from cronledger.cli import main
from cronledger.ledger import Ledger
from tests.api.helpers import OK_TARGET, SETTINGS
from tests.api.http import serving

#: London's clocks jump from 01:00 to 02:00 on 28 March 2027 and fall back from 02:00 to
#: 01:00 on 31 October 2027.
SPRING = "2027-03-26T00:00:00Z"
AUTUMN = "2027-10-30T00:00:00Z"


def document(schedule: str, starts_at: str, timezone: str = "Europe/London") -> dict[str, Any]:
    return {
        "name": "nightly",
        "transport_config": {"schedule": schedule, "timezone": timezone, "starts_at": starts_at},
        "target": OK_TARGET,
        "timeout_ms": 5000,
    }


@pytest.fixture
def api_url(sqlite_ledger: Ledger, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, Ledger]]:
    for name in ("COLUMNS", "NO_COLOR", "FORCE_COLOR", "CRONLEDGER_API_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("COLUMNS", "250")
    with serving(create_app(sqlite_ledger, SETTINGS)) as url:
        yield url, sqlite_ledger


def run(capsys: pytest.CaptureFixture[str], url: str, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["--api-url", url, *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def file_of(tmp_path: Path, *documents: dict[str, Any]) -> str:
    path = tmp_path / "channels.yaml"
    path.write_text(yaml.safe_dump_all(documents), encoding="utf-8")
    return str(path)


def test_a_changed_channel_shows_its_fields_and_instants_before_and_after_with_the_gap_marked(
    api_url: tuple[str, Ledger], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a channel at 00:30 London time, and a file moving it to 01:30, which the spring
    # gap skips on 28 March
    url, ledger = api_url
    current = document("0 30 0 * * *", SPRING)
    ledger.channels.create_channel(
        "nightly", current["transport_config"], OK_TARGET, 5000, "active"
    )
    path = file_of(tmp_path, document("0 30 1 * * *", SPRING))

    # When the file is compared
    code, out, err = run(capsys, url, "-o", "json", "channels", "diff", "-f", path)

    # Then the diff names the field and both sides' instants are listed, marked where the
    # clocks changed
    assert (code, err) == (0, "")
    (compared,) = yaml.safe_load(out)
    assert compared["outcome"] == "changed"
    assert "-  schedule: 0 30 0 * * *\n" in compared["diff"]
    assert "+  schedule: 0 30 1 * * *\n" in compared["diff"]
    before = [(i["utc"], i["local"], i["dst"]) for i in compared["before"][:4]]
    assert before == [
        ("2027-03-26T00:30:00Z", "2027-03-26T00:30:00+00:00", None),
        ("2027-03-27T00:30:00Z", "2027-03-27T00:30:00+00:00", None),
        ("2027-03-28T00:30:00Z", "2027-03-28T00:30:00+00:00", None),
        ("2027-03-28T23:30:00Z", "2027-03-29T00:30:00+01:00", "gap +00:00 → +01:00"),
    ]
    after = [(i["utc"], i["local"], i["dst"]) for i in compared["after"][:3]]
    assert after == [
        ("2027-03-26T01:30:00Z", "2027-03-26T01:30:00+00:00", None),
        ("2027-03-27T01:30:00Z", "2027-03-27T01:30:00+00:00", None),
        # 28 March 01:30 does not exist in London: the next is the 29th, after the gap
        ("2027-03-29T00:30:00Z", "2027-03-29T01:30:00+01:00", "gap +00:00 → +01:00"),
    ]
    assert len(compared["before"]) == len(compared["after"]) == 10
    assert {i["timezone"] for i in compared["after"]} == {"Europe/London"}


def test_instants_on_a_fold_are_both_marked_and_shown_to_a_person(
    api_url: tuple[str, Ledger], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url, ledger = api_url
    ledger.channels.create_channel(
        "nightly", document("0 30 3 * * *", AUTUMN)["transport_config"], OK_TARGET, 5000, "active"
    )
    path = file_of(tmp_path, document("0 30 1 * * *", AUTUMN))

    code, out, _ = run(capsys, url, "-o", "json", "channels", "diff", "-f", path, "--count", "4")
    human_code, human, _ = run(capsys, url, "channels", "diff", "-f", path, "--count", "4")

    (compared,) = yaml.safe_load(out)
    after = [(i["utc"], i["dst"]) for i in compared["after"]]
    assert after == [
        ("2027-10-30T00:30:00Z", None),
        ("2027-10-31T00:30:00Z", "fold: 01:30:00 happens twice"),
        ("2027-10-31T01:30:00Z", "fold: 01:30:00 happens twice"),
        ("2027-11-01T01:30:00Z", None),
    ]
    assert compared["before"][1] == {
        "utc": "2027-10-31T03:30:00Z",
        "local": "2027-10-31T03:30:00+00:00",
        "timezone": "Europe/London",
        "dst": "fold passed +01:00 → +00:00",
    }
    assert (code, human_code) == (0, 0)
    assert "changed" in human and "BEFORE (UTC)" in human and "AFTER (LOCAL)" in human
    assert human.count("happens twice") == 2


def test_a_new_channel_shows_only_its_instants_and_an_unchanged_one_only_its_name(
    api_url: tuple[str, Ledger], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url, ledger = api_url
    same = document("0 30 0 * * *", SPRING)
    ledger.channels.create_channel("nightly", same["transport_config"], OK_TARGET, 5000, "active")
    fresh = {**document("0 0 6 1 * *", SPRING, "America/New_York"), "name": "month-end"}
    path = file_of(tmp_path, same, fresh)

    code, out, _ = run(capsys, url, "-o", "json", "channels", "diff", "-f", path, "--count", "2")

    unchanged, new = yaml.safe_load(out)
    assert (code, unchanged["outcome"], new["outcome"]) == (0, "unchanged", "new")
    assert "diff" not in unchanged
    assert new["before"] == []
    assert [i["local"] for i in new["after"]] == [
        "2027-04-01T06:00:00-04:00",
        "2027-05-01T06:00:00-04:00",
    ]


def test_a_schedule_that_does_not_compile_is_refused_with_its_path_and_exits_1(
    api_url: tuple[str, Ledger], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url, ledger = api_url
    ledger.channels.create_channel(
        "nightly", document("0 30 0 * * *", SPRING)["transport_config"], OK_TARGET, 5000, "active"
    )
    path = file_of(tmp_path, document("30 0 * * *", SPRING))

    code, out, _ = run(capsys, url, "channels", "diff", "-f", path)

    assert code == 1
    assert "refused" in out
    assert "transport_config.schedule" in out


def test_a_file_and_a_channel_together_are_bad_usage(
    api_url: tuple[str, Ledger], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url, _ = api_url
    path = file_of(tmp_path, document("0 30 0 * * *", SPRING))

    code, _, err = run(capsys, url, "channels", "diff", "nightly", "-f", path)

    assert code == 2
    assert "not both" in err
