"""The reference pages, generated from the code at every docs build, so nothing is typed twice.

- `reference/http-api.md`: the OpenAPI document the API serves at `GET /openapi.json` (asked
  of `cronledger.api.create_app` through `handle_event`, as API Gateway would).
- `reference/cli.md`: every command of the Typer app, recursively, with its options.
- `reference/settings.md`: the fields of `cronledger.settings.Settings`, read through whatever
  the class exposes (a dataclass or a pydantic model): name, variable, default, bounds and
  description when the class carries one; `docs/reference/settings-notes.yml` supplies the
  description of a field whose declaration has none.
- `reference/cdk-props.md`: the fields of `cronledger_infra.props.CronledgerProps`, with the
  comment that heads each group in the declaration; the meaning of each is
  `docs/reference/cdk-props-notes.yml`.

A notes file that names a field the code does not have, or misses one it has, fails the build:
the page could otherwise drift from the declaration. The functions here are plain so a test can
call them (`tests/docs/test_reference.py`); `on_files` is the MkDocs hook.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import json
import os
import re
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import UnionType
from typing import Annotated, Any, Literal, get_args, get_origin

import yaml

ROOT = Path(__file__).resolve().parents[1]


def _this_checkout_on_path() -> None:
    """Import the code of this checkout (MkDocs restores `sys.path` after loading a hook, and an
    editable install may point at another checkout)."""
    for path in ("infra", "functions"):
        if sys.path[:2].count(str(ROOT / path)) == 0:
            sys.path.insert(0, str(ROOT / path))


_this_checkout_on_path()

HTTP_METHODS = ("get", "put", "post", "delete", "patch", "head", "options")


def _cell(text: Any) -> str:
    """One Markdown table cell: no line breaks, no bare pipes."""
    return " ".join(str(text).split()).replace("|", "\\|")


# -- the HTTP API ----------------------------------------------------------------------------


def openapi_document() -> dict[str, Any]:
    """The document `GET /openapi.json` answers, from an app over a ledger never opened."""
    from cronledger.api import create_app, handle_event
    from cronledger.ledger import Ledger

    with tempfile.TemporaryDirectory() as scratch:
        # connect() only builds an engine: no file is made and no statement runs
        ledger = Ledger.connect(f"sqlite:///{scratch}/never-opened.db")
        event = {
            "version": "2.0",
            "routeKey": "$default",
            "rawPath": "/openapi.json",
            "rawQueryString": "",
            "headers": {"host": "127.0.0.1"},
            "requestContext": {
                "http": {"method": "GET", "path": "/openapi.json", "sourceIp": "127.0.0.1"},
                "stage": "$default",
            },
            "isBase64Encoded": False,
        }
        answer = handle_event(create_app(ledger), event)
    if answer["statusCode"] != 200:
        raise RuntimeError(f"GET /openapi.json answered {answer['statusCode']}")
    return json.loads(answer["body"])


def routes(document: dict[str, Any]) -> list[tuple[str, str]]:
    """Every (METHOD, path) the document describes."""
    return [
        (method.upper(), path)
        for path, operations in document["paths"].items()
        for method in operations
        if method in HTTP_METHODS
    ]


def _schema_name(schema: dict[str, Any]) -> str:
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[`{name}`](#{_anchor(name)})"
    if "anyOf" in schema:
        return " or ".join(_schema_name(s) for s in schema["anyOf"])
    if schema.get("type") == "array":
        return f"array of {_schema_name(schema.get('items', {}))}"
    if "enum" in schema:
        return " \\| ".join(f"`{v}`" for v in schema["enum"])
    return f"`{schema.get('type', 'any')}`"


def _anchor(name: str) -> str:
    return "schema-" + "".join(c if c.isalnum() else "-" for c in name.lower())


def http_api_page(document: dict[str, Any]) -> str:
    info = document["info"]
    lines = [
        "# HTTP API",
        "",
        "<!-- generated from GET /openapi.json by docs_hooks/reference.py: do not edit -->",
        "",
        f"{info.get('description', '')}",
        "",
        f"Version {info['version']}. The same document is served at `GET /openapi.json` and "
        "browsable at `GET /swagger`. Admin routes live under `/api/v1/admin`; on AWS every "
        "route is IAM-authorised (SigV4). Behaviour shared by every route (the envelope, the "
        "error codes, the body rules) is in [the API guide](../concepts/api.md).",
        "",
        "| method | path | what it does |",
        "|---|---|---|",
    ]
    for method, path in routes(document):
        op = document["paths"][path][method.lower()]
        lines.append(
            f"| {method} | [`{path}`](#{_op_anchor(method, path)}) | {_cell(op.get('summary', ''))} |"
        )
    for method, path in routes(document):
        op = document["paths"][path][method.lower()]
        lines += ["", f"## {method} `{path}` {{#{_op_anchor(method, path)}}}", ""]
        lines += [_cell(op.get("summary", "")), ""]
        if op.get("description"):
            lines += [op["description"], ""]
        params = op.get("parameters", [])
        if params:
            lines += ["| parameter | in | required | type | description |", "|---|---|---|---|---|"]
            for p in params:
                lines.append(
                    f"| `{p['name']}` | {p['in']} | {'yes' if p.get('required') else 'no'} "
                    f"| {_schema_name(p.get('schema', {}))} | {_cell(p.get('description', ''))} |"
                )
            lines.append("")
        body = op.get("requestBody")
        if body:
            schema = body.get("content", {}).get("application/json", {}).get("schema", {})
            lines += [f"Body: {_schema_name(schema)}", ""]
        lines += ["| status | answer |", "|---|---|"]
        for status, answer in sorted(op.get("responses", {}).items()):
            schema = answer.get("content", {}).get("application/json", {}).get("schema")
            shape = f" ({_schema_name(schema)})" if schema else ""
            lines.append(f"| {status} | {_cell(answer.get('description', ''))}{shape} |")
    lines += ["", "## Schemas", ""]
    for name, schema in sorted(document.get("components", {}).get("schemas", {}).items()):
        lines += [f"### `{name}` {{#{_anchor(name)}}}", ""]
        if schema.get("description"):
            lines += [_cell(schema["description"]), ""]
        props = schema.get("properties", {})
        if props:
            required = set(schema.get("required", []))
            lines += ["| field | type | required | description |", "|---|---|---|---|"]
            for field, spec in props.items():
                lines.append(
                    f"| `{field}` | {_schema_name(spec)} | {'yes' if field in required else 'no'} "
                    f"| {_cell(spec.get('description', ''))} |"
                )
            lines.append("")
        elif "enum" in schema:
            lines += [f"One of {_schema_name(schema)}.", ""]
    return "\n".join(lines) + "\n"


def _op_anchor(method: str, path: str) -> str:
    slug = "".join(c if c.isalnum() else "-" for c in path.lower()).strip("-")
    return f"{method.lower()}-{slug}"


# -- the command line ------------------------------------------------------------------------


def cli_commands() -> Iterator[tuple[str, Any]]:
    """Every command of `cronledger`, groups included, as (full name, click command)."""
    import typer

    from cronledger.cli.app import app

    root = typer.main.get_command(app)

    def walk(prefix: str, command: Any) -> Iterator[tuple[str, Any]]:
        yield prefix, command
        for name, sub in sorted(getattr(command, "commands", {}).items()):
            if not sub.hidden:
                yield from walk(f"{prefix} {name}", sub)

    yield from walk("cronledger", root)


def _option_line(param: Any) -> str:
    if param.param_type_name == "argument":
        names = f"`{param.name.upper()}`"
    else:
        names = ", ".join(f"`{o}`" for o in [*param.opts, *param.secondary_opts])
    kind = "flag" if getattr(param, "is_flag", False) else param.param_type_name
    default = param.default
    shown = (
        ""
        if default in (None, (), False) or param.show_default is False
        else f" (default: `{default}`)"
    )
    required = " **required**" if param.required else ""
    return f"| {names} | {kind} | {_cell(getattr(param, 'help', '') or '')}{shown}{required} |"


def cli_page() -> str:
    lines = [
        "# Command line",
        "",
        "<!-- generated from the Typer app by docs_hooks/reference.py: do not edit -->",
        "",
        "Every command and option of `cronledger`, as `cronledger COMMAND --help` prints them. "
        "How to use them together is in [the command line guide](../concepts/cli.md).",
    ]
    for name, command in cli_commands():
        usage = " ".join(
            command.collect_usage_pieces(command.make_context(name, [], resilient_parsing=True))
        )
        lines += ["", f"## `{name}` {{#{_cli_anchor(name)}}}", ""]
        usage = re.sub(r"\{(\w+)\}", lambda m: m.group(1).upper(), usage)
        lines += ["```text", f"{name} {usage}".rstrip(), "```", ""]
        lines += [inspect.cleandoc(command.help or "").replace("\n\n", "\n\n"), ""]
        params = [p for p in command.params if p.name not in ("help",) and not p.hidden]
        if params:
            lines += ["| argument or option | type | description |", "|---|---|---|"]
            lines += [_option_line(p) for p in params]
        sub = sorted(n for n, c in getattr(command, "commands", {}).items() if not c.hidden)
        if sub:
            lines += [
                "",
                "Commands: " + ", ".join(f"[`{s}`](#{_cli_anchor(f'{name} {s}')})" for s in sub),
            ]
    return "\n".join(lines) + "\n"


def _cli_anchor(name: str) -> str:
    return "cli-" + name.replace(" ", "-")


# -- settings and CDK props ------------------------------------------------------------------


def _notes(name: str) -> dict[str, str]:
    path = ROOT / "docs" / "reference" / name
    return yaml.safe_load(path.read_text()) or {}


def _fields(cls: type) -> list[tuple[str, Any, Any, str]]:
    """(name, annotation, default, description) of a dataclass or a pydantic model's fields."""
    if dataclasses.is_dataclass(cls):
        out = []
        for f in dataclasses.fields(cls):
            default = (
                f.default_factory()
                if f.default is dataclasses.MISSING and f.default_factory is not dataclasses.MISSING
                else f.default
            )
            out.append((f.name, f.type, default, f.metadata.get("description", "")))
        return out
    model_fields = getattr(cls, "model_fields", None)
    if model_fields is None:
        raise TypeError(f"{cls.__name__} is neither a dataclass nor a pydantic model")
    out = []
    for name, info in model_fields.items():
        default = info.get_default(call_default_factory=True)
        out.append((name, info.annotation, default, info.description or ""))
    return out


def _bounds(cls: type, name: str) -> str:
    """The field's range where the class declares one (pydantic metadata or a range table)."""
    info = getattr(cls, "model_fields", {}).get(name)
    if info is not None:
        low = next((m.ge for m in info.metadata if getattr(m, "ge", None) is not None), None)
        high = next((m.le for m in info.metadata if getattr(m, "le", None) is not None), None)
        if low is not None or high is not None:
            return f"{'' if low is None else f'{low:,}'}..{'' if high is None else f'{high:,}'}"
    ranges = getattr(sys.modules[cls.__module__], "_RANGES", {})
    if name in ranges:
        low, high = ranges[name]
        return f"{low:,}..{high:,}"
    return ""


def _shown(value: Any) -> str:
    if value in ("", (), None):
        return "none"
    if isinstance(value, tuple):
        return "`" + ",".join(map(str, value)) + "`"
    return f"`{value}`"


def _type_name(annotation: Any) -> str:
    if get_origin(annotation) is Annotated:  # a pydantic field's validators are not its type
        return _type_name(get_args(annotation)[0])
    if get_origin(annotation) is Literal:
        return " or ".join(map(str, get_args(annotation)))
    if get_origin(annotation) in (tuple, UnionType):
        named = [_type_name(a) if a is not Ellipsis else "..." for a in get_args(annotation)]
        return f"tuple[{', '.join(named)}]" if get_origin(annotation) is tuple else " or ".join(named)
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", None)
    return str(text or annotation).replace("typing.", "").replace("|", "or")


def settings_fields() -> list[str]:
    from cronledger.settings import Settings

    return [name for name, *_ in _fields(Settings)]


def settings_page() -> str:
    from cronledger import settings as module

    cls = module.Settings
    notes = _notes("settings-notes.yml")
    names = [name for name, *_ in _fields(cls)]
    _check_notes("settings-notes.yml", notes, names, optional=True)
    config = getattr(cls, "model_config", {})
    prefix = config.get("env_prefix") or getattr(module, "PREFIX", "CRONLEDGER_")
    lines = [
        "# Settings",
        "",
        "<!-- generated from cronledger.settings.Settings by docs_hooks/reference.py -->",
        "",
        "Read once at start from the environment; a bad value stops the process with a message "
        "naming every bad variable. On AWS the stack sets them from its [props](cdk-props.md).",
        "",
        "| variable | type | default | range | meaning |",
        "|---|---|---|---|---|",
    ]
    for name, annotation, default, description in _fields(cls):
        meaning = description or notes.get(name, "")
        if not meaning:
            raise ValueError(f"setting {name} has no description: add one to settings-notes.yml")
        lines.append(
            f"| `{prefix}{name.upper()}` | {_cell(_type_name(annotation))} | {_cell(_shown(default))} "
            f"| {_bounds(cls, name)} | {_cell(meaning)} |"
        )
    return "\n".join(lines) + "\n"


def _check_notes(file: str, notes: dict[str, str], names: list[str], *, optional: bool) -> None:
    unknown = sorted(set(notes) - set(names))
    if unknown:
        raise ValueError(f"{file} describes fields the code does not have: {', '.join(unknown)}")
    missing = sorted(set(names) - set(notes))
    if missing and not optional:
        raise ValueError(f"{file} has no description of: {', '.join(missing)}")


def _groups(cls: type) -> dict[str, str]:
    """The comment heading each field's group in the class body, by field name."""
    source = inspect.getsource(cls)
    tree = ast.parse(source)
    body = tree.body[0]
    assert isinstance(body, ast.ClassDef)
    lines = source.splitlines()
    groups, current = {}, ""
    for node in body.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            above = []
            row = node.lineno - 2
            while row >= 0 and lines[row].strip().startswith("#"):
                above.insert(0, lines[row].strip().lstrip("# ").strip())
                row -= 1
            if len(above) == 1:  # a one-line comment heads a group; a longer one explains a field
                current = above[0]
            groups[node.target.id] = current
    return groups


def cdk_props_page() -> str:
    # the CDK's jsii runtime would print a banner about the Node.js version into the build log
    os.environ.setdefault("JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION", "1")
    os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
    props = importlib.import_module("cronledger_infra.props")
    cls = props.CronledgerProps
    prefix = getattr(props, "CONTEXT_PREFIX", "cronledger:")
    notes = _notes("cdk-props-notes.yml")
    names = [name for name, *_ in _fields(cls)]
    _check_notes("cdk-props-notes.yml", notes, names, optional=False)
    groups = _groups(cls)
    lines = [
        "# CDK props",
        "",
        "<!-- generated from cronledger_infra.props.CronledgerProps by docs_hooks/reference.py -->",
        "",
        f'Every choice is a context value `-c {prefix}<name>=<value>` (or a `"{prefix}<name>"` '
        "key in `cdk.json`); an unknown `cronledger:` name stops the synth, as does an unsafe "
        "combination. Fields are listed in the order the declaration groups them.",
    ]
    group = None
    for name, annotation, default, _ in _fields(cls):
        if groups.get(name) != group:
            group = groups.get(name)
            lines += ["", f"### {group[:1].upper() + group[1:]}" if group else "### Other", ""]
            lines += ["| name | type | default | meaning |", "|---|---|---|---|"]
        lines.append(
            f"| `{name}` | {_cell(_type_name(annotation))} | {_cell(_shown(default))} "
            f"| {_cell(notes[name])} |"
        )
    return "\n".join(lines) + "\n"


# -- the hook --------------------------------------------------------------------------------

PAGES = {
    "reference/http-api.md": lambda: http_api_page(openapi_document()),
    "reference/cli.md": cli_page,
    "reference/settings.md": settings_page,
    "reference/cdk-props.md": cdk_props_page,
}


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    _this_checkout_on_path()
    for uri, make in PAGES.items():
        files.append(File.generated(config, uri, content=make()))
    return files
