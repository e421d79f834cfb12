"""The reference pages are generated from the code (docs_hooks/reference.py), so they cannot
drift from it: the built API page names every route the API serves at `/openapi.json`, and the
command line page every command `cronledger --help` lists, groups' commands included."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

from tests.docs.examples import ROOT, Page

HELP_COMMAND = re.compile(r"^│ (?P<name>[a-z][a-z-]*)\s{2,}\S")


def served_routes() -> list[tuple[str, str]]:
    """(METHOD, path) of every operation in the document a running `cronledger dev` serves."""
    with tempfile.TemporaryDirectory() as scratch:
        page = Page(Path(scratch), {})
        try:
            page.start()
            with urllib.request.urlopen(f"{page.url}/openapi.json", timeout=10) as answer:
                document = json.load(answer)
        finally:
            page.stop()
    return [
        (method.upper(), path)
        for path, operations in document["paths"].items()
        for method in operations
        if method in {"get", "put", "post", "delete", "patch"}
    ]


def help_commands(*words: str) -> list[str]:
    """The commands `cronledger WORDS --help` lists, and theirs, as full command lines."""
    done = subprocess.run(
        [str(Path(sys.executable).parent / "cronledger"), *words, "--help"],
        env={**Page(ROOT, {}).env(), "COLUMNS": "200"},
        text=True, capture_output=True, check=True,
    )  # fmt: skip
    panel = done.stdout.split("─ Commands ", 1)
    if len(panel) == 1:
        return []
    found = []
    for line in panel[1].splitlines():
        if line.startswith("╰"):
            break
        named = HELP_COMMAND.match(line)
        if named:
            command = [*words, named["name"]]
            found += [" ".join(command), *help_commands(*command)]
    return found


def test_the_api_page_lists_every_route_of_the_served_openapi_document(built_site: Path):
    page = (built_site / "reference" / "http-api" / "index.html").read_text()
    routes = served_routes()

    assert len(routes) >= 15
    for method, path in routes:
        assert f"{method} <code>{path}</code>" in page, (method, path)


def test_the_cli_page_lists_every_command_of_cronledger_help(built_site: Path):
    page = (built_site / "reference" / "cli" / "index.html").read_text()
    commands = help_commands()

    assert {"channels", "channels apply", "occurrences list", "dev", "events"} <= set(commands)
    for command in commands:
        assert f'id="cli-cronledger-{command.replace(" ", "-")}"' in page, command
        assert f"<code>cronledger {command}</code>" in page, command


def _field_names(cls: type) -> list[str]:
    """A dataclass's fields, or a pydantic model's."""
    if dataclasses.is_dataclass(cls):
        return [f.name for f in dataclasses.fields(cls)]
    return list(cls.model_fields)  # type: ignore[attr-defined]


def test_the_settings_page_lists_every_setting(built_site: Path):
    from cronledger.settings import Settings

    page = (built_site / "reference" / "settings" / "index.html").read_text()

    for name in _field_names(Settings):
        assert f"<code>CRONLEDGER_{name.upper()}</code>" in page, name


def test_the_cdk_props_page_lists_every_prop(built_site: Path):
    from cronledger_infra.props import CronledgerProps

    page = (built_site / "reference" / "cdk-props" / "index.html").read_text()

    for name in _field_names(CronledgerProps):
        assert f"<td><code>{name}</code></td>" in page, name


def test_every_guarantees_anchor_the_code_cites_is_on_the_page(built_site: Path):
    page = (built_site / "guarantees" / "index.html").read_text()
    anchors = set(re.findall(r'id="([a-z0-9-]+)"', page))
    cited = {
        (path.relative_to(ROOT), anchor)
        for folder in ("functions", "infra", "tests", "docs")
        for path in (ROOT / folder).rglob("*.py")
        for anchor in re.findall(r"guarantees(?:\.md|/)#([a-z0-9-]+)", path.read_text())
    }

    assert {"claim", "start", "fencing", "misfire", "time", "exactly-once", "security"} <= anchors
    assert [c for c in cited if c[1] not in anchors] == []
