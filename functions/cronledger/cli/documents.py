"""Channel documents on disk: reading a file of them, and a channel written back as one.

A file is JSON or YAML (documents, a list, or a page as `channels list -o yaml` prints it).
Each document is judged on its own, so one bad document never hides the others; two of one
name are both refused, naming each other (which was meant is not for `apply` to guess).
`document_of` is the inverse of `apply`, so `channels show -o yaml` applies back unchanged.
"""

from __future__ import annotations

import difflib
import json
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final

import yaml

from cronledger.cli.output import as_yaml

DOCUMENT_KEYS: Final = ("name", "labels", "transport_config", "target", "timeout_ms", "status")

#: A label selector: `key=value` pairs joined by commas, every one required.
_SELECTOR_PART: Final = re.compile(r"\s*([^=,\s]+)\s*=\s*([^=,\s]*)\s*")


def selector(text: str) -> dict[str, str]:
    """`team=billing,tenant=acme` as a map; UsageError naming the part that is not `k=v`."""
    labels: dict[str, str] = {}
    for part in text.split(","):
        match = _SELECTOR_PART.fullmatch(part)
        if match is None:
            raise UsageError(f"selector part {part.strip()!r} is not key=value, e.g. team=billing")
        labels[match[1]] = match[2]
    return labels


class UsageError(Exception):
    """The command line or a file it names is wrong; nothing was sent."""


@dataclass(frozen=True)
class Document:
    where: str
    body: dict[str, Any]
    problem: str | None = None

    @property
    def name(self) -> str:
        name = self.body.get("name")
        return name if isinstance(name, str) else "?"


#: The files of a directory that `read` takes, in name order.
FILE_SUFFIXES: Final = (".yaml", ".yml", ".json")


def read(path: str) -> list[Document]:
    """The documents of a file, of stdin (`-`), or of every JSON and YAML file of a
    directory tree (in path order); duplicate names are refused across all of them."""
    given = Path(path)
    if path != "-" and given.is_dir():
        files = sorted(f for f in given.rglob("*") if f.suffix in FILE_SUFFIXES and f.is_file())
        if not files:
            raise UsageError(f"{path} holds no .yaml, .yml or .json file")
        return _without_duplicates([d for f in files for d in _read_file(str(f))])
    return _without_duplicates(_read_file(path))


def _read_file(path: str) -> list[Document]:
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise UsageError(f"{path} is not UTF-8 text") from None
    documents = [d for item in _load(path, text) for d in _documents_in(item)]
    if not documents:
        raise UsageError(f"{path} holds no channel document")
    return [_checked(path, index, len(documents), d) for index, d in enumerate(documents)]


def _documents_in(item: Any) -> list[Any]:
    """A list's items; a page of channels (`{"data": [...], "total": …}`) as documents."""
    if isinstance(item, list):
        return item
    if isinstance(item, dict) and isinstance(item.get("data"), list) and "name" not in item:
        return [document_of(c) if isinstance(c, dict) else c for c in item["data"]]
    return [item]


def _without_duplicates(documents: list[Document]) -> list[Document]:
    """Each document whose name another one also has, refused with where the others are."""
    where: dict[str, list[str]] = {}
    for d in documents:
        if d.problem is None:
            where.setdefault(d.name, []).append(d.where)
    return [
        d
        if d.problem is not None or len(where[d.name]) == 1
        else replace(
            d,
            problem=f"the name {d.name!r} is in {' and '.join(where[d.name])}; one input names "
            "each channel once (remove or rename the others)",
        )
        for d in documents
    ]


def _load(path: str, text: str) -> list[Any]:
    if path.endswith(".json"):
        try:
            return [json.loads(text)]
        except ValueError as exc:
            raise UsageError(f"{path} is not valid JSON: {exc}") from None
    try:
        return [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        raise UsageError(_yaml_problem(path, exc)) from None


def _yaml_problem(path: str, exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    where = f"{path}, line {mark.line + 1}" if mark is not None else path
    problem = getattr(exc, "problem", None) or str(exc)
    context = getattr(exc, "context", None) or ""
    if "alias" in f"{problem} {context}":
        # `schedule: */5 * * * * *`: YAML reads a leading `*` as a reference to an anchor.
        return (
            f"{where}: a value starting with '*' is YAML alias syntax; quote it, "
            'e.g. schedule: "*/5 * * * * *"'
        )
    return f"{where} is not valid YAML: {problem}"


def _checked(path: str, index: int, count: int, body: Any) -> Document:
    where = path if count == 1 else f"{path} (document {index + 1})"
    if not isinstance(body, dict) or not isinstance(body.get("name"), str):
        return Document(
            where,
            body if isinstance(body, dict) else {},
            "not a channel document: an object with a name, transport_config and target",
        )
    try:
        json.dumps(body, allow_nan=False)
    except (TypeError, ValueError) as exc:
        return Document(where, body, f"not plain JSON ({exc}); quote dates and times")
    return Document(where, body)


def document_of(channel: Mapping[str, Any]) -> dict[str, Any]:
    """A channel as the API shows it, written as the document `channels apply` takes."""
    return {key: channel[key] for key in DOCUMENT_KEYS if key in channel}


def applied_to(before: Mapping[str, Any] | None, body: Mapping[str, Any]) -> dict[str, Any]:
    """What applying the document `body` makes of the channel document `before`."""
    return {**(before or {}), **{k: v for k, v in body.items() if k in DOCUMENT_KEYS}}


def diff(
    before: Mapping[str, Any] | None, after: Mapping[str, Any], old: str, new: str
) -> list[str]:
    """A unified diff of two documents as YAML (`before` None: everything is new)."""
    a = [] if before is None else as_yaml(before).splitlines(keepends=True)
    b = as_yaml(after).splitlines(keepends=True)
    return list(difflib.unified_diff(a, b, fromfile=old, tofile=new))
