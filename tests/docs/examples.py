"""Every fenced code block of README.md and docs/**/*.md, collected and run as a reader would.

A block is run according to its language, against a real `cronledger dev` (its own free port,
its own SQLite ledger in a scratch directory, the demo's Python target allowed) started for
each page that has something to run:

- `sh`, `bash`, `shell`: the block is one bash script (`set -e`), run in the page's scratch
  directory, so a file a block writes is there for the next block of the page;
- `console`: each `$ ` line is a command, the lines after it the output the page shows; the
  command must succeed and each shown line must match a line it printed (timestamps, ids,
  numbers and durations compared by shape, spaces collapsed);
- `yaml`, `json`: each document is applied with `cronledger channels apply --dry-run` (the API
  checks it as it would store it, and stores nothing); a target or a `transport_config`
  fragment is first placed in a channel around it;
- `python`: run with this interpreter in the page's scratch directory.

Commands are run as written, with two substitutions a reader would not need: `.venv/bin/` is
this interpreter's directory, and `127.0.0.1:8080` the test's own server. A block the test
cannot run says why in an HTML comment just before it, `<!-- example: skip (reason) -->`;
A `sh` block of `make` commands only (`make run`, `make test`) is not run either.
`<!-- example: first line -->` checks only the first line a `console` block shows (the rest
depends on timing); `<!-- example: server -->` marks a block that starts the scheduler with
settings of its own: the page's server is started with the `CRONLEDGER_*` variables it exports. `mermaid`, `text` and unlabelled blocks are pictures or output, not code.

`python -m tests.docs.examples [page ...]` runs them outside pytest and prints the summary.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
SHELL = {"sh", "bash", "shell"}
DOCUMENT = {"yaml", "yml", "json"}
NOT_CODE = {
    "mermaid": "a diagram, drawn by the site",
    "text": "output or a picture, not a command",
    "": "output or a picture, not a command",
}
MARK = re.compile(r"<!--\s*example:\s*(?P<what>skip|first line|server)\s*(\((?P<why>.*)\))?\s*-->")
#: `export NAME=value` in a block that starts the scheduler: the test's server gets it too.
EXPORT = re.compile(r"^export (?P<name>CRONLEDGER_\w+)=(?P<value>.*)$", re.MULTILINE)
FENCE = re.compile(r"^(?P<fence>```+)\s*(?P<lang>[\w-]*)")
#: A channel around a fragment, for the blocks that show only part of a document.
AROUND = {"name": "docs-example", "transport_config": {"schedule": "0 0 3 * * *"}}
DEMO_TARGET = {"type": "python", "callable": "cronledger.demo:hello"}


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    lang: str
    text: str
    mark: str | None = None
    why: str | None = None

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    @property
    def skip_reason(self) -> str | None:
        if self.mark == "server":
            return None
        if self.mark == "skip":
            return self.why or "marked skip"
        if self.lang in NOT_CODE:
            return NOT_CODE[self.lang]
        if self.lang not in SHELL | DOCUMENT | {"console", "python", "py"}:
            return f"{self.lang}: no runner for this language"
        commands = [c for c in self.text.splitlines() if c.strip()]
        if self.lang in SHELL and all(c.startswith("make ") for c in commands):
            return "make targets: they install into .venv, then serve or run the suite"
        return None


@dataclass
class Tally:
    run: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    failed: list[str] = field(default_factory=list)

    def summary(self) -> str:
        lines = [
            f"docs examples: {self.run} run, {sum(self.skipped.values())} skipped, "
            f"{len(self.failed)} failed"
        ]
        lines += [f"  skipped {n}: {why}" for why, n in sorted(self.skipped.items())]
        lines += [f"  FAILED {f}" for f in self.failed]
        return "\n".join(lines)


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def blocks(page: Path) -> Iterator[Block]:
    lines = page.read_text().splitlines()
    i = 0
    while i < len(lines):
        opened = FENCE.match(lines[i])
        if not opened:
            i += 1
            continue
        fence, lang = opened["fence"], opened["lang"].lower()
        start = i
        i += 1
        body = []
        while i < len(lines) and not lines[i].startswith(fence):
            body.append(lines[i])
            i += 1
        i += 1
        before = next((t for t in reversed(lines[:start]) if t.strip()), "")
        mark = MARK.search(before)
        yield Block(
            page,
            start + 1,
            lang,
            "\n".join(body) + "\n",
            mark["what"] if mark else None,
            mark["why"] if mark else None,
        )


def shape(line: str) -> str:
    """A printed line with what changes from run to run replaced by its kind."""
    line = re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)?", "<time>", line)
    line = re.sub(r"\b[0-9a-f]{8}-[0-9a-f-]*…?", "<id>", line)
    line = re.sub(r"\b\d+(\.\d+)? ?(ms|s|m|h|d)\b", "<span>", line)
    line = re.sub(r"\d[\d,]*(\.\d+)?", "<n>", line)
    return " ".join(line.split())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Page:
    """One page's scratch directory, and its `cronledger dev` once a block needs it."""

    def __init__(self, scratch: Path, settings: dict[str, str]) -> None:
        self.scratch = scratch
        self.settings = settings
        self.server: subprocess.Popen[bytes] | None = None
        self.url = ""

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CRONLEDGER_")}
        env.update(
            # this checkout's code, whatever checkout the virtualenv's editable install names
            PYTHONPATH=os.pathsep.join([str(ROOT / "functions"), env.get("PYTHONPATH", "")]),
            CRONLEDGER_API_URL=self.url,
            PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}",
            COLUMNS="250",
            NO_COLOR="1",
            TERM="dumb",
        )
        return env

    def start(self) -> None:
        if self.server:
            return
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        log = (self.scratch / "dev.log").open("wb")
        self.server = subprocess.Popen(
            [str(BIN / "cronledger"), "dev", "--demo", "--port", str(port),
             "--database-url", f"sqlite:///{self.scratch}/ledger.db"],
            cwd=self.scratch, env={**self.env(), **self.settings}, stdout=log,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                # The pages start "with the scheduler running": the demo has its first row.
                listing = f"{self.url}/api/v1/admin/cron/occurrences?limit=1"
                with urllib.request.urlopen(listing, timeout=2) as answer:
                    if answer.status == 200 and json.load(answer)["data"]:
                        return
                time.sleep(0.2)
            except OSError:
                if self.server.poll() is not None:
                    break
                time.sleep(0.2)
        raise RuntimeError(
            f"cronledger dev did not start: {(self.scratch / 'dev.log').read_text()}"
        )

    def stop(self) -> None:
        if self.server and self.server.poll() is None:
            self.server.send_signal(signal.SIGINT)
            try:
                self.server.wait(20)
            except subprocess.TimeoutExpired:
                self.server.kill()
                self.server.wait()

    def sh(self, script: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        self.start()
        script = script.replace(".venv/bin/", f"{BIN}/").replace("127.0.0.1:8080", self.url[7:])
        return subprocess.run(
            ["bash", "-e", "-c", script], cwd=self.scratch, env=self.env(), text=True,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout, check=False,
        )  # fmt: skip


def run_console(page: Page, block: Block) -> str | None:
    """Each `$ ` command in turn; the problem with the first that fails, or None."""
    steps: list[tuple[str, list[str]]] = []
    for line in block.text.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        elif steps:
            steps[-1][1].append(line)
        elif line.strip():
            return f"output before any command: {line!r}"
    for command, shown in steps:
        done = page.sh(command)
        if done.returncode:
            return f"`{command}` exited {done.returncode}:\n{done.stdout}"
        printed = [shape(p) for p in done.stdout.splitlines() if p.strip()]
        expected = [shape(s) for s in shown if s.strip()]
        if block.mark == "first line":
            expected = expected[:1]
            printed = printed[:1]
        for line in expected:
            if line not in printed:
                return (
                    f"`{command}` did not print a line like\n  {line}\nit printed:\n{done.stdout}"
                )
    return None


def as_channel(document: object) -> dict[str, object]:
    if not isinstance(document, dict):
        raise ValueError(f"not a JSON object: {document!r}")
    if "name" in document:
        return document
    if "type" in document:
        return {**AROUND, "target": document}
    when = (
        document
        if "schedule" in document or "at" in document
        else {**AROUND["transport_config"], **document}
    )
    return {**AROUND, "transport_config": when, "target": DEMO_TARGET}


def run_document(page: Page, block: Block) -> str | None:
    if block.lang == "json":
        documents = [json.loads(block.text)]
    else:
        documents = [d for d in yaml.safe_load_all(block.text) if d is not None]
    for n, document in enumerate(documents):
        path = page.scratch / f"example-{block.line}-{n}.json"
        path.write_text(json.dumps(as_channel(document)))
        done = page.sh(f".venv/bin/cronledger channels apply -f {path} --dry-run")
        if done.returncode:
            return f"the API refused it:\n{done.stdout}"
    return None


def run_block(page: Page, block: Block) -> str | None:
    if block.lang in SHELL:
        done = page.sh(block.text)
        return None if done.returncode == 0 else f"exited {done.returncode}:\n{done.stdout}"
    if block.lang == "console":
        return run_console(page, block)
    if block.lang in DOCUMENT:
        return run_document(page, block)
    done = subprocess.run(
        [sys.executable, "-c", block.text], cwd=page.scratch, env=page.env(), text=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120, check=False,
    )  # fmt: skip
    return None if done.returncode == 0 else f"exited {done.returncode}:\n{done.stdout}"


def run_page(path: Path, tally: Tally) -> None:
    runnable, settings = [], {}
    for block in blocks(path):
        reason = block.skip_reason
        if block.mark == "server":
            settings.update(
                {m["name"]: m["value"].strip("'\"") for m in EXPORT.finditer(block.text)}
            )
            tally.run += 1
        elif reason:
            tally.skipped[reason] += 1
        else:
            runnable.append(block)
    if not runnable:
        return
    with tempfile.TemporaryDirectory(prefix="cronledger-docs-") as scratch:
        page = Page(Path(scratch), settings)
        try:
            for block in runnable:
                tally.run += 1
                try:
                    problem = run_block(page, block)
                except Exception as exc:  # a block that cannot even be read is a failure too
                    problem = f"{type(exc).__name__}: {exc}"
                if problem:
                    tally.failed.append(f"{block.where} ({block.lang}): {problem}")
        finally:
            page.stop()


def run_all(selected: list[Path] | None = None) -> Tally:
    tally = Tally()
    for path in selected or pages():
        run_page(path, tally)
    return tally


if __name__ == "__main__":
    chosen = [Path(a).resolve() for a in sys.argv[1:]] or None
    result = run_all(chosen)
    print(result.summary())
    sys.exit(1 if result.failed else 0)
