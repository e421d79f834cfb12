"""Channels declared in code: `@cronledger.cron` on a function, applied by
`channels apply --from-module`, and `--prune` archiving only the selected channels that the
input no longer holds; on PostgreSQL and SQLite, the rows read back through the ledger."""

from __future__ import annotations

from pathlib import Path

import pytest

from cronledger.declare import MODULE_LABEL, declared_by, schedule
from tests.unit.test_operator_cli import Cli, write

MODULE = "tests.cli.declared.nightly"


def by_name(cli: Cli) -> dict[str, tuple[str, int, dict[str, str]]]:
    return {
        c.name: (c.status, c.version, dict(c.labels or {}))
        for c in cli.ledger.channels.list_channels(limit=1000).data
    }


def test_a_module_declares_documents_the_api_takes_labelled_with_the_module() -> None:
    documents = declared_by(MODULE)

    assert [d["name"] for d in documents] == ["nightly-report", f"{MODULE}.refresh"]
    report = documents[0]
    assert report["target"] == {"type": "python", "callable": f"{MODULE}:report"}
    assert report["transport_config"] == {"schedule": "0 15 2 * * *", "timezone": "Europe/London"}
    assert report["labels"] == {"team": "bi", MODULE_LABEL: MODULE}
    assert documents[1]["transport_config"]["retry"] == {"max_attempts": 2}


def test_only_a_public_module_level_function_can_be_declared() -> None:
    def _hidden(envelope: object) -> None:
        return None

    with pytest.raises(TypeError, match="module-level function"):
        schedule("* * * * * *")(_hidden)


def test_apply_from_module_creates_then_leaves_unchanged(cli: Cli) -> None:
    first = cli("channels", "apply", "--from-module", MODULE)
    second = cli("channels", "apply", "--from-module", MODULE)

    assert (first.code, second.code) == (0, 0)
    channels = by_name(cli)
    assert channels["nightly-report"] == ("active", 1, {"team": "bi", MODULE_LABEL: MODULE})
    assert channels[f"{MODULE}.refresh"][:2] == ("active", 1)
    assert "unchanged" in second.out


def test_prune_archives_only_the_selected_channels_the_input_no_longer_holds(
    cli: Cli, tmp_path: object
) -> None:
    # Given the module's channels, a channel of another team, and one with no labels
    assert cli("channels", "apply", "--from-module", MODULE).code == 0
    cli.channel("unlabelled")
    other = write(
        tmp_path,  # type: ignore[arg-type]
        "other.yaml",
        "name: other-team\nlabels: {team: ops}\nstatus: active\n"
        "transport_config: {schedule: '0 0 * * * *'}\n"
        "target: {type: python, callable: 'tests.cli.declared.nightly:report'}\n",
    )
    assert cli("channels", "apply", "-f", other).code == 0

    # When the module no longer declares them: a dry run first, then the prune
    prune = ("channels", "apply", "--from-module", "tests.cli.declared.empty", "--prune")
    dry = cli(*prune, "-l", f"{MODULE_LABEL}={MODULE}", "--dry-run")
    after_dry = by_name(cli)
    pruned = cli(*prune, "-l", f"{MODULE_LABEL}={MODULE}")

    # Then the dry run wrote nothing; the prune archived the module's two and nothing else
    assert (dry.code, pruned.code) == (0, 0)
    assert {n: s for n, (s, _, _) in after_dry.items()}["nightly-report"] == "active"
    statuses = {n: s for n, (s, _, _) in by_name(cli).items()}
    assert statuses == {
        "nightly-report": "archived",
        f"{MODULE}.refresh": "archived",
        "unlabelled": "active",
        "other-team": "active",
    }
    assert "nightly-report: pruned (dry run)" in dry.out


def test_prune_of_a_file_without_a_selector_is_refused(cli: Cli, tmp_path: object) -> None:
    path = write(
        tmp_path,  # type: ignore[arg-type]
        "one.yaml",
        "name: one\ntransport_config: {schedule: '0 0 * * * *'}\n"
        "target: {type: python, callable: 'tests.cli.declared.nightly:report'}\n",
    )

    refused = cli("channels", "apply", "-f", path, "--prune")

    assert refused.code == 2
    assert "--prune needs --selector" in refused.err
    assert by_name(cli) == {}


def test_a_module_that_cannot_be_imported_is_a_usage_error(cli: Cli) -> None:
    ran = cli("channels", "apply", "--from-module", "tests.cli.declared.missing")

    assert ran.code == 2 and "cannot import tests.cli.declared.missing" in ran.err


def test_apply_of_a_directory_reads_every_file_and_prunes_what_it_no_longer_holds(
    cli: Cli, tmp_path: Path
) -> None:
    # Given a directory of two team files, applied
    repo = tmp_path / "channels"
    (repo / "billing").mkdir(parents=True)
    document = (
        "name: {name}\nlabels: {{team: billing}}\nstatus: active\n"
        "transport_config: {{schedule: '0 0 * * * *'}}\n"
        "target: {{type: python, callable: 'tests.cli.declared.nightly:report'}}\n"
    )
    (repo / "billing" / "a.yaml").write_text(document.format(name="invoices"))
    (repo / "billing" / "b.yml").write_text(document.format(name="reminders"))
    (repo / "notes.txt").write_text("not a channel")
    assert cli("channels", "apply", "-f", str(repo)).code == 0

    # When one file is removed and the directory applied with --prune for the team
    (repo / "billing" / "b.yml").unlink()
    pruned = cli("channels", "apply", "-f", str(repo), "--prune", "-l", "team=billing")

    # Then the channel of the removed file is archived, the other is untouched
    assert pruned.code == 0
    assert {n: s for n, (s, _, _) in by_name(cli).items()} == {
        "invoices": "active",
        "reminders": "archived",
    }
