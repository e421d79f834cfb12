"""The operator command line: `cronledger channels|trigger|occurrences|retry|cancel|status|preview`.

Every command is one or two calls to the HTTP API (SPEC §6) and prints what it answered:
aligned tables for people, the API's own JSON with `--json` for scripts. Nothing here reads the
database, so the command line tells exactly the truth the API tells, locally or on AWS.

- `--api-url` (or `CRONLEDGER_API_URL`, default the local runner's `http://127.0.0.1:8080`).
  An API Gateway endpoint (`*.execute-api.<region>.amazonaws.com`) is IAM-authorised, so
  requests to one are SigV4-signed for `execute-api` with botocore's default credential chain,
  in the region named by the host (the only region such a signature is valid for).
- A CHANNEL argument is a name or an id: the name is looked up first.
- Exit codes: 0 done; 1 the API refused or failed the request (its message is printed);
  2 bad usage or an unreadable file; 3 the API could not be reached (or no AWS credentials).
- `channels apply -f FILE` takes JSON or YAML, one channel document or a list of them. A new
  name is created (in the document's `status`, else draft); an existing one gets a new version
  (none if nothing changed) and then the document's `status` if it is active, paused or
  archived and differs.
- `channels delete` purges a channel's history, so it asks for `--yes`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final
from urllib.parse import quote, urlencode, urlsplit

import yaml

from cronledger import __version__

DEFAULT_API_URL: Final = "http://127.0.0.1:8080"
PREFIX: Final = "/api/v1/admin"
EXIT_OK, EXIT_API, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3
_EXECUTE_API: Final = re.compile(r"[a-z0-9]+\.execute-api\.([a-z0-9-]+)\.amazonaws\.com(\.cn)?")
_DURATION: Final = re.compile(r"(\d+)([smhd])")
_UNITS: Final = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


class ApiError(Exception):
    """The API answered with an error: its status, code, message and field details."""

    def __init__(self, status: int, body: Any) -> None:
        error = body.get("error") if isinstance(body, dict) else None
        if isinstance(error, dict):
            self.code = str(error.get("code", "error"))
            self.message = str(error.get("message", ""))
            self.details: list[dict[str, Any]] = list(error.get("details") or [])
        else:
            # Not our envelope: API Gateway itself (e.g. 403 for a bad signature) or a proxy.
            self.code = "http_error"
            self.message = str(body.get("message", body) if isinstance(body, dict) else body)
            self.details = []
        self.status = status
        self.body = body
        super().__init__(f"{status} {self.code}: {self.message}")


class Unreachable(Exception):
    """No answer at all: nothing listening, DNS, a timeout, or no credentials to sign with."""


#: Sends a prepared request and returns `(status, body)`; replaceable in tests.
Send = Callable[[urllib.request.Request, float], tuple[int, bytes]]


def _urlopen(request: urllib.request.Request, timeout: float) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return int(response.status), bytes(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


@dataclass
class ApiClient:
    base_url: str
    send: Send = _urlopen
    timeout: float = 30.0
    _signing_region: str | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self.base_url = self.base_url.rstrip("/")
        match = _EXECUTE_API.fullmatch(urlsplit(self.base_url).hostname or "")
        self._signing_region = match.group(1) if match else None

    def call(
        self, method: str, path: str, query: Mapping[str, Any] | None = None, body: Any = None
    ) -> Any:
        """The decoded JSON answer (None for 204); `ApiError` or `Unreachable` otherwise."""
        request = self.prepare(method, path, query, body)
        try:
            status, raw = self.send(request, self.timeout)
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise Unreachable(
                f"cannot reach the cronledger API at {self.base_url}: {reason}. Is it running "
                "(`cronledger dev`)? Point --api-url or CRONLEDGER_API_URL at it."
            ) from None
        try:
            answer = json.loads(raw) if raw else None
        except ValueError:
            answer = raw.decode("utf-8", "replace").strip()
        if status >= 400:
            raise ApiError(status, answer)
        return answer

    def prepare(
        self, method: str, path: str, query: Mapping[str, Any] | None = None, body: Any = None
    ) -> urllib.request.Request:
        """The request as it will be sent, signed when the endpoint is API Gateway."""
        given = {k: v for k, v in (query or {}).items() if v is not None}
        url = self.base_url + path + (f"?{urlencode(given)}" if given else "")
        data = None if body is None else json.dumps(body).encode()
        headers = {"Accept": "application/json", "User-Agent": f"cronledger/{__version__}"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        if self._signing_region is not None:
            headers = self._signed(method, url, data, headers, self._signing_region)
        return urllib.request.Request(url, data=data, headers=headers, method=method)

    def _signed(
        self, method: str, url: str, data: bytes | None, headers: dict[str, str], region: str
    ) -> dict[str, str]:
        import botocore.session
        from botocore.auth import SigV4Auth
        from botocore.awsrequest import AWSRequest

        credentials = botocore.session.get_session().get_credentials()
        if credentials is None:
            raise Unreachable(
                f"{self.base_url} is an IAM-authorised API Gateway endpoint and no AWS "
                "credentials were found (environment, ~/.aws, SSO or an instance role)"
            )
        request = AWSRequest(method=method, url=url, data=data, headers=headers)
        SigV4Auth(credentials, "execute-api", region).add_auth(request)
        return dict(request.headers.items())


# --- registering the commands ---------------------------------------------------------------


def add_operator_commands(subparsers: Any) -> None:
    """Register `channels`, `trigger`, `occurrences`, `retry`, `cancel`, `status` and `preview`
    on an argparse sub-parsers object; each sets `func(args) -> int`."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--api-url",
        default=os.environ.get("CRONLEDGER_API_URL") or DEFAULT_API_URL,
        help="the API's base URL (default: $CRONLEDGER_API_URL or %(default)s)",
    )
    common.add_argument("--json", action="store_true", help="print the API's JSON answer")
    paging = argparse.ArgumentParser(add_help=False)
    paging.add_argument("--limit", type=int, default=50, help="rows per page (1..1000)")
    paging.add_argument("--offset", type=int, default=0)

    def command(parent: Any, name: str, handler: Handler, help: str, **kw: Any) -> Any:
        parser = parent.add_parser(name, parents=[common, *kw.pop("parents", [])], help=help, **kw)
        parser.set_defaults(func=_run(handler))
        return parser

    channels = subparsers.add_parser("channels", help="manage channels (schedules)")
    each = channels.add_subparsers(dest="channels_command", required=True, metavar="ACTION")
    apply = command(each, "apply", _apply, "create channels, or a new version by name")
    apply.add_argument("-f", "--file", required=True, help="a JSON or YAML file ('-' for stdin)")
    listing = command(each, "list", _list_channels, "list channels", parents=[paging])
    listing.add_argument("--status", choices=["draft", "active", "paused", "archived"])
    command(each, "show", _show_channel, "show one channel").add_argument("channel")
    for verb, status, text in (
        ("pause", "paused", "stop a channel producing occurrences"),
        ("resume", "active", "activate a draft or paused channel"),
        ("archive", "archived", "retire a channel for good, keeping its history"),
    ):
        handler = _status_changer(status)
        aliases = ["activate"] if verb == "resume" else []
        command(each, verb, handler, text, aliases=aliases).add_argument("channel")
    delete = command(each, "delete", _delete_channel, "delete a channel and its whole history")
    delete.add_argument("channel")
    delete.add_argument("--yes", action="store_true", help="yes, purge its occurrences too")

    command(subparsers, "trigger", _trigger, "run an active channel now").add_argument("channel")

    occurrences = subparsers.add_parser("occurrences", help="read the ledger")
    verbs = occurrences.add_subparsers(dest="occurrences_command", required=True, metavar="ACTION")
    listing = command(verbs, "list", _list_occurrences, "newest first", parents=[paging])
    listing.add_argument("--channel", help="a channel name or id")
    listing.add_argument("--status", help="e.g. pending, running, completed, failed")
    listing.add_argument("--since", help="RFC 3339 (2026-09-01T00:00:00Z) or an age (24h, 30m)")
    listing.add_argument("--until", help="RFC 3339 or an age")
    command(verbs, "show", _show_occurrence, "one occurrence in full").add_argument("id")

    command(
        subparsers, "retry", _retry, "re-run a failed, cancelled or skipped occurrence"
    ).add_argument("id")
    command(
        subparsers, "cancel", _cancel, "cancel a pending, claimed or running occurrence"
    ).add_argument("id")
    command(
        subparsers,
        "status",
        _status,
        "per active channel: next fire, last run, pending",
        parents=[paging],
    )
    preview = command(subparsers, "preview", _preview, "the next fire times, UTC and local")
    preview.add_argument("channel")
    preview.add_argument("--count", type=int, default=10, help="how many (1..100)")


@dataclass(frozen=True)
class Shown:
    """What a command got from the API: printed as it is with `--json`, else by `render`
    for a person (commands that report as they go render nothing at the end)."""

    answer: Any
    render: Callable[[Any], None] = lambda _answer: None


Handler = Callable[[ApiClient, argparse.Namespace], Shown]


def _run(handler: Handler) -> Callable[[argparse.Namespace], int]:
    """The boundary of every command: its answer on stdout, or one line on stderr and an
    exit code, never a traceback."""

    def run(args: argparse.Namespace) -> int:
        try:
            shown = handler(ApiClient(args.api_url), args)
        except ApiError as exc:
            if args.json:
                _print_json(exc.body)
            print(f"cronledger: error: {exc}", file=sys.stderr)
            for detail in exc.details:
                print(f"  {detail.get('path')}: {detail.get('message')}", file=sys.stderr)
            return EXIT_API
        except Unreachable as exc:
            print(f"cronledger: error: {exc}", file=sys.stderr)
            return EXIT_UNREACHABLE
        except UsageError as exc:
            print(f"cronledger: error: {exc}", file=sys.stderr)
            return EXIT_USAGE
        if args.json:
            _print_json(shown.answer)
        else:
            shown.render(shown.answer)
        return EXIT_OK

    return run


class UsageError(Exception):
    """The command line or a file it names is wrong; nothing was sent."""


# --- channels ------------------------------------------------------------------------------


def _apply(api: ApiClient, args: argparse.Namespace) -> Shown:
    # Each document's outcome is said as it is applied: a failure part-way shows what was done.
    applied = [
        _apply_one(api, document, quiet=args.json) for document in _read_documents(args.file)
    ]
    return Shown(applied if len(applied) != 1 else applied[0])


def _apply_one(api: ApiClient, document: dict[str, Any], quiet: bool) -> Any:
    name = document["name"]
    found = api.call("GET", f"{PREFIX}/channels", {"name": name})["data"]
    if not found:
        channel = api.call("POST", f"{PREFIX}/channels", body=document)["data"]
        _say(
            quiet,
            f"created channel {name} ({channel['channel_id']}, version 1, {channel['status']})",
        )
        return channel
    before = found[0]
    update = {k: v for k, v in document.items() if k != "status"}
    path = f"{PREFIX}/channels/{_segment(before['channel_id'])}"
    channel = api.call("PUT", path, body=update)["data"]
    if channel["version"] == before["version"]:
        _say(quiet, f"channel {name} unchanged (version {channel['version']})")
    else:
        _say(quiet, f"updated channel {name} to version {channel['version']}")
    wanted = document.get("status")
    if wanted in ("active", "paused", "archived") and wanted != channel["status"]:
        channel = api.call("PATCH", f"{path}/status", body={"status": wanted})["data"]
        _say(quiet, f"channel {name} is now {channel['status']}")
    return channel


def _read_documents(path: str) -> list[dict[str, Any]]:
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        loaded = json.loads(text) if path.endswith(".json") else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise UsageError(f"{path} is not valid JSON or YAML: {exc}") from None
    documents = loaded if isinstance(loaded, list) else [loaded]
    for index, document in enumerate(documents):
        where = path if len(documents) == 1 else f"{path} (document {index + 1})"
        if not isinstance(document, dict) or not isinstance(document.get("name"), str):
            raise UsageError(f"{where}: a channel document is an object with a name")
        try:
            json.dumps(document, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise UsageError(f"{where}: not plain JSON ({exc}); quote dates and times") from None
    return documents


def _list_channels(api: ApiClient, args: argparse.Namespace) -> Shown:
    query = {"status": args.status, "limit": args.limit, "offset": args.offset}
    return Shown(api.call("GET", f"{PREFIX}/channels", query), _print_channels)


def _print_channels(page: Mapping[str, Any]) -> None:
    rows = []
    for c in page["data"]:
        compiled = c.get("compiled") or {}
        rows.append(
            [
                c["name"],
                c["status"],
                str(c["version"]),
                compiled.get("schedule", "(invalid)"),
                compiled.get("timezone", ""),
                _when(compiled.get("next_fire_at")),
                c["channel_id"],
            ]
        )
    _table(["NAME", "STATUS", "VERSION", "SCHEDULE", "TIMEZONE", "NEXT FIRE (UTC)", "ID"], rows)
    _footer(page)


def _show_channel(api: ApiClient, args: argparse.Namespace) -> Shown:
    return Shown(api.call("GET", _channel_path(api, args.channel)), _print_channel)


def _print_channel(channel: Mapping[str, Any]) -> None:
    c = channel["data"]
    compiled = c.get("compiled") or {}
    _fields(
        [
            ("name", c["name"]),
            ("id", c["channel_id"]),
            ("status", c["status"]),
            ("version", c["version"]),
            ("schedule", compiled.get("schedule", "(stored schedule does not compile)")),
            ("timezone", compiled.get("timezone")),
            ("misfire policy", compiled.get("misfire_policy")),
            ("concurrency", _concurrency(compiled)),
            ("next fire", _when(compiled.get("next_fire_at")) or "-"),
            ("paused at", _when(compiled.get("paused_at")) or "-"),
            ("target", c.get("target_ref")),
            ("timeout", f"{c['timeout_ms']} ms"),
            ("created", _when(c["created_at"])),
            ("updated", _when(c["updated_at"])),
        ]
    )
    print("transport_config:", json.dumps(c["transport_config"], indent=2))
    print("target:", json.dumps(c["target"], indent=2))


def _status_changer(status: str) -> Handler:
    def change(api: ApiClient, args: argparse.Namespace) -> Shown:
        path = _channel_path(api, args.channel)
        answer = api.call("PATCH", f"{path}/status", body={"status": status})
        return Shown(
            answer, lambda a: print(f"channel {a['data']['name']} is now {a['data']['status']}")
        )

    return change


def _delete_channel(api: ApiClient, args: argparse.Namespace) -> Shown:
    path = _channel_path(api, args.channel)
    if not args.yes:
        raise UsageError(
            f"deleting {args.channel} purges every occurrence it has; add --yes to confirm "
            "(or `channels archive` to retire it and keep the history)"
        )
    api.call("DELETE", path)
    return Shown({"deleted": args.channel}, lambda _: print(f"deleted channel {args.channel}"))


def _trigger(api: ApiClient, args: argparse.Namespace) -> Shown:
    def render(answer: Mapping[str, Any]) -> None:
        o = answer["data"]
        print(
            f"triggered {o['channel_name']}: occurrence {o['id']} is {o['status']}, "
            f"scheduled for {_when(o['scheduled_for'])}"
        )

    return Shown(api.call("POST", f"{_channel_path(api, args.channel)}/trigger"), render)


def _preview(api: ApiClient, args: argparse.Namespace) -> Shown:
    def render(answer: Mapping[str, Any]) -> None:
        p = answer["data"]
        print(f"{p['schedule']} in {p['timezone']}:")
        _table(["UTC", "LOCAL"], [[i["utc"], i["local"]] for i in p["instants"]])

    path = f"{_channel_path(api, args.channel)}/preview"
    return Shown(api.call("GET", path, {"count": args.count}), render)


# --- occurrences ------------------------------------------------------------------------------


def _list_occurrences(api: ApiClient, args: argparse.Namespace) -> Shown:
    query = {
        "channel_id": None if args.channel is None else _channel_id(api, args.channel),
        "status": args.status,
        "since": _instant(args.since),
        "until": _instant(args.until),
        "limit": args.limit,
        "offset": args.offset,
    }
    return Shown(api.call("GET", f"{PREFIX}/cron/occurrences", query), _print_occurrences)


def _print_occurrences(page: Mapping[str, Any]) -> None:
    rows = [
        [
            _when(o["scheduled_for"]),
            o["channel_name"],
            o["trigger"],
            o["status"],
            str(o["attempt"]),
            _millis(o.get("lag_ms")),
            _millis(o.get("duration_ms")),
            o["id"],
            (o.get("error_message") or "")[:60],
        ]
        for o in page["data"]
    ]
    headers = ["SCHEDULED (UTC)", "CHANNEL", "TRIGGER", "STATUS", "ATTEMPT", "LAG", "DURATION"]
    _table([*headers, "ID", "ERROR"], rows)
    _footer(page)


def _show_occurrence(api: ApiClient, args: argparse.Namespace) -> Shown:
    answer = api.call("GET", f"{PREFIX}/cron/occurrences/{_segment(args.id)}")
    return Shown(answer, lambda a: _print_occurrence(a["data"]))


def _occurrence_action(action: str, outcome: Callable[[Mapping[str, Any]], str]) -> Handler:
    """`retry` or `cancel` an occurrence; `outcome` says what it is now."""

    def act(api: ApiClient, args: argparse.Namespace) -> Shown:
        def render(answer: Mapping[str, Any]) -> None:
            o = answer["data"]
            when = _when(o["scheduled_for"])
            print(f"occurrence {o['id']} ({o['channel_name']}, {when}) is {outcome(o)}")

        path = f"{PREFIX}/cron/occurrences/{_segment(args.id)}/{action}"
        return Shown(api.call("POST", path), render)

    return act


_retry = _occurrence_action(
    "retry", lambda o: f"{o['status']} again; its next run is attempt {o['attempt'] + 1}"
)
_cancel = _occurrence_action("cancel", lambda o: str(o["status"]))


def _status(api: ApiClient, args: argparse.Namespace) -> Shown:
    query = {"limit": args.limit, "offset": args.offset}
    return Shown(api.call("GET", f"{PREFIX}/cron/status", query), _print_status)


def _print_status(page: Mapping[str, Any]) -> None:
    rows = [
        [
            s["name"],
            s.get("schedule") or "(invalid)",
            s.get("timezone") or "",
            _when(s.get("next_fire_at")) or "-",
            _when(s.get("last_scheduled_for")) or "-",
            s.get("last_status") or "-",
            str(s["pending"]),
            _concurrency(s, held=s.get("slots_held")),
        ]
        for s in page["data"]
    ]
    headers = ["CHANNEL", "SCHEDULE", "TIMEZONE", "NEXT FIRE (UTC)", "LAST RUN", "LAST STATUS"]
    _table([*headers, "PENDING", "CONCURRENCY"], rows)
    _footer(page, noun="active channels")


def _print_occurrence(o: dict[str, Any]) -> None:
    _fields(
        [
            ("id", o["id"]),
            ("channel", f"{o['channel_name']} ({o['channel_id']})"),
            ("trigger", o["trigger"]),
            ("scheduled for", o["scheduled_for"]),
            ("status", o["status"]),
            ("attempt", o["attempt"]),
            (
                "version",
                f"materialised at v{o['channel_version']}, ran v{o['executing_version'] or '-'}",
            ),
            ("target", o.get("target_ref") or "-"),
            ("claimed by", o.get("claimed_by") or "-"),
            ("claimed until", o.get("claimed_until") or "-"),
            ("singleton", _singleton(o)),
            ("trace id", o.get("trace_id") or "-"),
            ("started", o.get("started_at") or "-"),
            ("completed", o.get("completed_at") or "-"),
            ("lag", _millis(o.get("lag_ms")) or "-"),
            ("duration", _millis(o.get("duration_ms")) or "-"),
            ("error", o.get("error_message") or "-"),
        ]
    )
    if o.get("result"):
        print("result:")
        print(o["result"])


# --- helpers ---------------------------------------------------------------------------------


def _channel_id(api: ApiClient, ref: str) -> str:
    """A name if there is a channel by that name, else taken as an id."""
    found = api.call("GET", f"{PREFIX}/channels", {"name": ref})["data"]
    return str(found[0]["channel_id"]) if found else ref


def _channel_path(api: ApiClient, ref: str) -> str:
    return f"{PREFIX}/channels/{_segment(_channel_id(api, ref))}"


def _segment(value: str) -> str:
    return quote(value, safe="")


def _instant(value: str | None) -> str | None:
    """RFC 3339 passes through (the API checks it); an age like `24h` becomes now - 24h."""
    if value is None:
        return None
    age = _DURATION.fullmatch(value.strip())
    if age is None:
        return value
    delta = timedelta(**{_UNITS[age.group(2)]: int(age.group(1))})
    return (datetime.now(UTC) - delta).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


def _when(value: Any) -> str:
    """An RFC 3339 instant without its fraction of a second, for a table."""
    if not value:
        return ""
    text = str(value)
    return re.sub(r"\.\d+(?=Z$)", "", text)


def _millis(value: Any) -> str:
    if value is None:
        return ""
    return f"{value / 1000:.1f}s" if value >= 1000 else f"{value}ms"


def _concurrency(view: Mapping[str, Any], held: int | None = None) -> str:
    policy = view.get("concurrency_policy")
    if policy != "forbid":
        return str(policy or "-")
    used = "" if held is None else f"{held}/"
    return f"forbid {used}{view.get('slots')} on {view.get('concurrency_key')}"


def _singleton(o: Mapping[str, Any]) -> str:
    if not o.get("singleton_key"):
        return "-"
    return f"{o['singleton_key']} slot {o.get('singleton_slot')} token {o.get('fencing_token')}"


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    if not rows:
        print("(none)")
        return
    widths = [max(len(str(row[i])) for row in [headers, *rows]) for i in range(len(headers))]
    for row in [headers, *rows]:
        print(
            "  ".join(
                str(cell).ljust(width) for cell, width in zip(row, widths, strict=True)
            ).rstrip()
        )


def _fields(pairs: Sequence[tuple[str, Any]]) -> None:
    width = max(len(label) for label, _ in pairs)
    for label, value in pairs:
        print(f"{label + ':':<{width + 1}} {value}")


def _footer(page: Mapping[str, Any], noun: str = "") -> None:
    shown, total, offset = len(page["data"]), page["total"], page["offset"]
    if shown and shown < total:
        more = f" (--offset {offset + shown} for more)" if offset + shown < total else ""
        print(f"{offset + 1}-{offset + shown} of {total}{' ' + noun if noun else ''}{more}")


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, ensure_ascii=False))


def _say(quiet: bool, message: str) -> None:
    # With --json, stdout is for the JSON alone; progress goes to stderr.
    print(message, file=sys.stderr if quiet else sys.stdout)
