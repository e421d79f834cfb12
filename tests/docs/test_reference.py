"""The reference pages are generated from the code (docs_hooks/reference.py), so they cannot
drift from it: the built API page names every route the API serves at `/openapi.json`, and the
command line page every command `cronledger --help` lists, groups' commands included."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

from tests.docs.examples import Page

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
        env={**os.environ, "COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb"},
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
