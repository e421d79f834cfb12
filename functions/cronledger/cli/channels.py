"""`cronledger channels …` and the commands that act on one channel: trigger, backfill,
preview, status.

`channels apply` judges each document on its own: every valid one is applied, and the command
exits 1 if any was refused. An existing channel gets a new version only if its definition
changed, then the document's status if it differs. `--dry-run` sends the same requests as API
dry runs (checked, then rolled back), so it reports what applying would do, refusals included.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

import typer

from cronledger import declare
from cronledger.api_client import ApiError, segment
from cronledger.cli import documents, proposed
from cronledger.cli.documents import Document, UsageError
from cronledger.cli.output import Column, ago, as_yaml, when
from cronledger.cli.session import (
    EXIT_API,
    LIMIT,
    OFFSET,
    PAGING,
    WATCHING,
    ChannelRef,
    Session,
    Yes,
    api,
    confirm,
    instant,
)
from cronledger.cli.watching import watch_rows
from cronledger.instants import parse_rfc3339

channels = typer.Typer(help="Manage channels (schedules): apply files, history, lifecycle.")
root = typer.Typer()  # the top-level commands about one channel, joined to the root app

NamePrefix = Annotated[
    str | None, typer.Option("--name-prefix", help="only names starting with this")
]
StatusFilter = Annotated[
    str | None, typer.Option(help="only channels in this status: draft, active, paused, archived")
]
Selector = Annotated[
    str | None,
    typer.Option(
        "--selector", "-l", help="only channels carrying these labels: key=value[,key=value]"
    ),
]


def terms(labels: Mapping[str, str]) -> list[str]:
    """Labels as `key=value` terms: the API's repeated `label` query, or said joined by commas."""
    return [f"{key}={value}" for key, value in labels.items()]


def labels_of(channel: Mapping[str, Any]) -> str:
    return ",".join(terms(dict(sorted((channel.get("labels") or {}).items()))))


def path_of(channel: Mapping[str, Any]) -> str:
    return f"/channels/{segment(channel['channel_id'])}"


CHANNEL_COLUMNS = (
    Column("NAME", lambda c: c["name"], 100),
    Column("STATUS", lambda c: c["status"], 90, status=True),
    Column("SCHEDULE", lambda c: schedule_of(c.get("compiled")) or "(invalid)", 80),
    Column("TIMEZONE", lambda c: (c.get("compiled") or {}).get("timezone"), 40),
    Column("NEXT FIRE (UTC)", lambda c: when((c.get("compiled") or {}).get("next_fire_at")), 60),
    Column("VERSION", lambda c: c["version"], 30),
    Column("TARGET", lambda c: c.get("target_ref"), 15, wide_only=True),
    Column("LABELS", labels_of, 12, wide_only=True),
    Column("ID", lambda c: c["channel_id"], 10, id=True),
)


@api(channels, "list", paged=PAGING)
def list_channels(
    s: Session,
    status: StatusFilter = None,
    selector: Selector = None,
    name_prefix: NamePrefix = None,
) -> None:
    """List channels, newest first, with their schedule and next fire time, a page at a
    time (the footer names the next: --after …)."""
    query = {
        "status": status,
        "name_prefix": name_prefix,
        "label": None if selector is None else terms(documents.selector(selector)),
    }
    page = s.get("/channels", {**query, **s.page})
    s.out.answer(page, lambda: s.out.table(CHANNEL_COLUMNS, page["data"], page))


@api(channels, "show")
def show(s: Session, channel: ChannelRef) -> None:
    """Show one channel. With -o yaml or -o json, print it as a document `channels apply`
    takes back unchanged."""
    c = s.channel(channel)
    if s.out.for_scripts:
        s.out.data(documents.document_of(c))
        return
    compiled = c.get("compiled") or {}
    next_fire = compiled.get("next_fire_at")
    s.out.fields(
        [
            ("name", c["name"]),
            ("id", c["channel_id"]),
            ("status", s.out.status(c["status"])),
            ("version", c["version"]),
            ("schedule", schedule_of(compiled) or "(the stored schedule does not compile)"),
            ("timezone", compiled.get("timezone")),
            ("misfire policy", compiled.get("misfire_policy")),
            ("concurrency", concurrency(compiled, wide=True)),
            ("next fire", f"{when(next_fire)} ({ago(next_fire)})"),
            ("paused at", when(compiled.get("paused_at"))),
            ("reason", c.get("status_reason")),
            ("labels", labels_of(c) or None),
            ("target", c.get("target_ref")),
            ("timeout", f"{c['timeout_ms']} ms"),
            ("created", when(c["created_at"])),
            ("updated", when(c["updated_at"])),
        ]
    )
    s.out.say("")
    s.out.say(as_yaml(documents.document_of(c)).rstrip())


@api(channels, "apply")
def apply(
    s: Session,
    file: Annotated[
        str | None,
        typer.Option(
            "--file", "-f", help="a JSON or YAML file of channel documents ('-' for stdin)"
        ),
    ] = None,
    from_module: Annotated[
        str | None,
        typer.Option(
            help="a Python module (importable from here) whose @cronledger.cron functions "
            "declare the channels",
        ),
    ] = None,
    prune: Annotated[
        bool,
        typer.Option(
            "--prune",
            help="archive the channels that carry the selector's labels and are not in the "
            "input (with --from-module the selector defaults to the module's label)",
        ),
    ] = False,
    selector: Annotated[
        str | None,
        typer.Option("--selector", "-l", help="labels, as key=value[,key=value]; with --prune"),
    ] = None,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="write nothing: the API checks each document as it would apply it; "
            "print what each would come to and its diff",
        ),
    ] = False,
    allow_past: Annotated[
        bool,
        typer.Option(
            "--allow-past",
            help="save a one-time `at` that is already past (it will never run) instead of "
            "refusing it",
        ),
    ] = False,
) -> None:
    """Create the channels of a file (or a module's declarations), or write a new version of
    each that exists by name; with `--prune`, archive the selected channels the input no
    longer holds."""
    query = {
        "dry_run": "true" if dry_run else None,
        "allow_past_at": "true" if allow_past else None,
    }
    given, labels = _input(file, from_module, prune, selector)
    outcomes = [_apply(s, d, dry_run, query) for d in given]
    if prune and not any(o["outcome"] == "refused" for o in outcomes):
        kept = {d.name for d in given}
        outcomes += [_prune(s, c, dry_run) for c in _selected(s, labels) if c["name"] not in kept]
    if s.out.for_scripts:
        s.out.data(outcomes)
    if any(o["outcome"] == "refused" for o in outcomes):
        raise typer.Exit(EXIT_API)


def _input(
    file: str | None, module: str | None, prune: bool, selector: str | None
) -> tuple[list[Document], dict[str, str]]:
    """The documents to apply, and the labels `--prune` selects by."""
    if (file is None) == (module is None):
        raise UsageError("give one of --file/-f FILE and --from-module MODULE")
    labels = documents.selector(selector) if selector is not None else {}
    if file is not None:
        if prune and not labels:
            raise UsageError(
                "--prune needs --selector/-l: only channels carrying its labels are pruned"
            )
        return documents.read(file), labels
    assert module is not None
    try:
        declared = declare.declared_by(module)
    except ImportError as exc:
        raise UsageError(f"cannot import {module}: {exc}") from None
    if not declared and not prune:
        raise UsageError(f"{module} declares no channel (no @cronledger.cron function)")
    given = [Document(f"{module}[{i}]", body) for i, body in enumerate(declared)]
    return given, labels or {declare.MODULE_LABEL: module}


def _selected(s: Session, labels: Mapping[str, str]) -> list[dict[str, Any]]:
    found = s.each("/channels", {"label": terms(labels)})
    return [c for c in found if c["status"] != "archived"]


def _prune(s: Session, channel: dict[str, Any], dry_run: bool) -> dict[str, Any]:
    """Archive one channel the input no longer holds (or say so, with `dry_run`)."""
    name = channel["name"]
    if not dry_run:
        body = {"status": "archived", "reason": "pruned: no longer in the applied input"}
        s.send("PATCH", f"{path_of(channel)}/status", body)
    s.out.say(s.out.status("archived"), f"  {name}: pruned{' (dry run)' if dry_run else ''}")
    return {"name": name, "outcome": "archived", "channel_id": channel["channel_id"]}


def _apply(s: Session, document: Document, dry_run: bool, query: dict[str, Any]) -> dict[str, Any]:
    """One document applied (or compared, with `dry_run`); said as soon as it is known, so
    a failure part-way through a file still shows what was done."""
    outcome: dict[str, Any] = {"name": document.name, "where": document.where}
    try:
        if document.problem is not None:
            raise UsageError(document.problem)
        outcome |= _applied(s, document.body, dry_run, query)
    except (ApiError, UsageError) as exc:
        details = exc.details if isinstance(exc, ApiError) else []
        outcome |= {"outcome": "refused", "error": str(exc), "details": details}
        s.out.say(s.out.status("refused"), f"  {document.where}: {document.name}: {exc}")
        for detail in details:
            s.out.say(f"    {detail.get('path')}: {detail.get('message')}")
        return outcome
    summary = ": ".join(filter(None, [document.name, outcome.pop("summary")]))
    s.out.say(s.out.status(outcome["outcome"]), f"  {summary}{' (dry run)' if dry_run else ''}")
    s.out.diff(outcome.pop("diff", []))
    for warning in outcome.get("channel", {}).get("warnings", []):
        s.out.say(s.out.status("warning"), f"  {document.name}: {warning}")
    return outcome


def _applied(
    s: Session, body: dict[str, Any], dry_run: bool, query: dict[str, Any]
) -> dict[str, Any]:
    name = body["name"]
    dry = {"dry_run": "true"} if dry_run else None
    current = s.named(name)
    if current is None:
        channel = s.send("POST", "/channels", body, query)["data"]
        return {
            "outcome": "created",
            "summary": f"version 1, {channel['status']}",
            "channel": channel,
            "diff": documents.diff(None, body, "/dev/null", name) if dry_run else [],
        }
    wanted = body.get("status")
    if wanted == "draft" and current["status"] != "draft":
        raise UsageError(
            f"channel {name} is {current['status']}; a channel never returns to draft "
            "(set status to active, paused or archived, or leave it out)"
        )
    before = documents.document_of(current)
    diff = documents.diff(
        before,
        documents.applied_to(before, body),
        f"{name} (version {current['version']})",
        "the file",
    )
    path = path_of(current)
    definition = {k: v for k, v in body.items() if k != "status"}
    channel = s.send("PUT", path, definition, query)["data"]
    changes = []
    if channel["version"] != current["version"]:
        changes.append(f"version {current['version']} → {channel['version']}")
    if wanted is not None and wanted != channel["status"]:
        try:
            channel = s.send("PATCH", f"{path}/status", {"status": wanted}, dry)["data"]
        except ApiError as exc:
            done = f" (after {changes[0]})" if changes and not dry_run else ""
            raise UsageError(f"status {wanted} refused{done}: {exc.message}") from None
        changes.append(f"{current['status']} → {channel['status']}")
    summary = ", ".join(changes) or f"version {channel['version']}, {channel['status']}"
    return {
        "outcome": "updated" if changes else "unchanged",
        "summary": summary,
        "channel": channel,
        "diff": diff if dry_run else [],
    }


HISTORY_COLUMNS = (
    Column("VERSION", lambda v: f"{v['version']}{' (current)' if v['current'] else ''}", 100),
    Column("WRITTEN (UTC)", lambda v: when(v["created_at"]), 90),
    Column("SCHEDULE", lambda v: schedule_of(v["transport_config"]), 80),
    Column("TIMEZONE", lambda v: v["transport_config"].get("timezone", "UTC"), 40),
    Column("TARGET", lambda v: v["target"].get("type"), 30),
    Column("TIMEOUT", lambda v: f"{v['timeout_ms']} ms", 20),
)


@api(channels, "history", paged=(LIMIT, OFFSET))
def history(s: Session, channel: ChannelRef) -> None:
    """A channel's versions, newest first (`channels diff` compares two)."""
    c = s.channel(channel)
    page = s.get(f"{path_of(c)}/versions", s.page)

    def human() -> None:
        note = status_note(c)
        if note is not None:
            s.out.say(s.out.status(c["status"]), note)
        s.out.table(HISTORY_COLUMNS, page["data"], page)

    s.out.answer(page, human)


@api(channels, "diff")
def diff(
    s: Session,
    channel: Annotated[
        str | None,
        typer.Argument(help="a channel name or id (to compare two of its versions)"),
    ] = None,
    from_: Annotated[
        int | None,
        typer.Option("--from", min=1, help="the older version (default: the one before --to)"),
    ] = None,
    to: Annotated[
        int | None, typer.Option(min=1, help="the newer version (default: the current one)")
    ] = None,
    file: Annotated[
        str | None,
        typer.Option(
            "--file",
            "-f",
            help="compare a file of channel documents ('-' for stdin) with the channels as "
            "they are, instead of two versions",
        ),
    ] = None,
    count: Annotated[
        int, typer.Option(min=1, max=1000, help="with --file: instants shown before and after")
    ] = 10,
) -> None:
    """What changed between two versions of a channel, as a unified diff of its documents;
    with --file, what applying the file would change: for each changed channel, the field
    diff and its next instants before and after (UTC and local, DST gaps and folds marked)."""
    if file is not None:
        if channel is not None or from_ is not None or to is not None:
            raise UsageError("give --file, or a channel with --from/--to, not both")
        compared = proposed.show(s, file, count)
        if any(c["outcome"] == "refused" for c in compared):
            raise typer.Exit(EXIT_API)
        return
    if channel is None:
        raise UsageError("name a channel (to compare two of its versions) or give --file")
    c = s.channel(channel)
    newer = to or c["version"]
    older = from_ if from_ is not None else newer - 1
    if older < 1:
        raise UsageError(f"channel {c['name']} has only version {newer}: nothing to compare")
    a, b = (_version(s, c, n) for n in (older, newer))
    lines = documents.diff(a, b, f"{c['name']} version {older}", f"{c['name']} version {newer}")

    def human() -> None:
        if lines:
            s.out.diff(lines)
        else:
            s.out.say(f"versions {older} and {newer} of {c['name']} are the same")

    s.out.answer({"from": a, "to": b, "diff": "".join(lines)}, human)


@api(channels, "rollback")
def rollback(
    s: Session,
    channel: ChannelRef,
    to: Annotated[int, typer.Option(min=1, help="the version to return to")],
) -> None:
    """Write a new version equal to an earlier one (history is never rewritten)."""
    c = s.channel(channel)
    answer = s.send("PUT", path_of(c), _version(s, c, to))
    now = answer["data"]["version"]
    if now == c["version"]:
        s.out.tell(answer, f"channel {c['name']} already equals version {to} (version {now})")
    else:
        s.out.tell(answer, f"channel {c['name']} is now version {now}, equal to version {to}")


def _version(s: Session, channel: dict[str, Any], number: int) -> dict[str, Any]:
    """Version `number` of `channel` as a document (no status: versions have none)."""
    missing = UsageError(
        f"channel {channel['name']} has no version {number} (it is at version "
        f"{channel['version']}; `channels history` lists them)"
    )
    return documents.document_of(s.found(f"{path_of(channel)}/versions/{number}", missing))


Reason = Annotated[
    str | None,
    typer.Option(help="why: shown with the status by `status`, `channels show` and `history`"),
]


ChannelOrLabels = Annotated[
    str | None, typer.Argument(help="a channel name or id (or -l for every labelled one)")
]


def _lifecycle(verb: str, status: str, text: str) -> None:
    @api(channels, verb, help=text)
    def change(
        s: Session,
        channel: ChannelOrLabels = None,
        selector: Selector = None,
        reason: Reason = None,
    ) -> None:
        if (channel is None) == (selector is None):
            raise UsageError(f"give a channel, or --selector/-l key=value to {verb} many")
        if selector is not None:
            _bulk(s, documents.selector(selector), status, reason)
            return
        assert channel is not None
        body = {"status": status, "reason": reason}
        answer = s.send("PATCH", f"{path_of(s.channel(channel))}/status", body)
        c = answer["data"]
        why = f" ({c['status_reason']})" if c.get("status_reason") else ""
        s.out.tell(answer, f"channel {c['name']} is now ", s.out.status(c["status"]), why)


def _bulk(s: Session, labels: Mapping[str, str], status: str, reason: str | None) -> None:
    """Every channel carrying `labels` moved to `status` in one request (each channel on its
    own); each is said, and the command exits 1 if any could not move."""
    body = {"selector": dict(labels), "status": status, "reason": reason}
    answer = s.send("POST", "/channels/status", body)
    moves = answer["data"]

    def human() -> None:
        if not moves:
            s.out.say("no channel carries ", ",".join(terms(labels)))
        for m in moves:
            if m["error"] is not None:
                s.out.say(
                    f"{m['name']}: ", s.out.status(m["status"]), f" ({m['error']['message']})"
                )
            else:
                s.out.say(f"{m['name']}: {m['before']} → ", s.out.status(m["status"]))

    s.out.answer(answer, human)
    if any(m["error"] is not None for m in moves):
        raise typer.Exit(EXIT_API)


def status_note(channel: Mapping[str, Any]) -> str | None:
    """What follows the status of a channel that is not active (` since <when>: <reason>`),
    else None."""
    if channel.get("status") in (None, "active", "draft"):
        return None
    since = (channel.get("compiled") or {}).get("paused_at") or channel.get("updated_at")
    why = f": {channel['status_reason']}" if channel.get("status_reason") else ""
    return f" since {when(since)}{why}"


_lifecycle("pause", "paused", "Stop a channel producing occurrences (resume starts it from now).")
_lifecycle(
    "resume",
    "active",
    "Activate a draft or paused channel; it fires from now on (with -l: paused ones only).",
)
_lifecycle("archive", "archived", "Retire a channel for good, keeping its history (final).")


@api(channels, "delete")
def delete(s: Session, channel: ChannelRef, yes: Yes = False) -> None:
    """Delete a channel and its whole history (`archive` keeps the history)."""
    c = s.channel(channel)
    confirm(s.out, f"Delete channel {c['name']} and every occurrence it has?", yes)
    s.send("DELETE", path_of(c))
    s.out.tell({"deleted": c["channel_id"]}, f"deleted channel {c['name']}")


@api(root, "trigger")
def trigger(s: Session, channel: ChannelRef) -> None:
    """Run an active channel now (a `manual` occurrence at the database's now)."""
    answer = s.send("POST", f"{path_of(s.channel(channel))}/trigger")
    o = answer["data"]
    s.out.tell(
        answer,
        f"triggered {o['channel_name']}: occurrence {o['id']} is ",
        s.out.status(o["status"]),
        f", scheduled for {when(o['scheduled_for'])}",
    )


@api(root, "backfill")
def backfill(
    s: Session,
    channel: ChannelRef,
    from_: Annotated[
        str, typer.Option("--from", help="the first instant: RFC 3339 or an age (7d)")
    ],
    to: Annotated[
        str, typer.Option(help="the last instant, not in the future: RFC 3339 or an age")
    ],
    overlap: Annotated[
        str,
        typer.Option(
            help="sequential: one after another, each waiting while the concurrency key is "
            "busy; policy: the channel's concurrency.policy decides (forbid skips)"
        ),
    ] = "sequential",
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="list the instants it would run; write nothing")
    ] = False,
) -> None:
    """Run an active channel's past instants in [--from, --to] (at most 1000 at a time)."""
    window = {"from": instant(from_), "to": instant(to), "overlap": overlap}
    query = {"dry_run": "true"} if dry_run else None
    answer = s.send("POST", f"{path_of(s.channel(channel))}/backfill", window, query)
    b = answer["data"]
    s.out.answer(answer, lambda: _backfilled(s, channel, b))


def _backfilled(s: Session, channel: str, b: Mapping[str, Any]) -> None:
    span = f"{b['instants']} instant(s) from {when(b['from'])} to {when(b['to'])}"
    if b.get("dry_run"):
        s.out.say(f"backfill of {channel} would run {span} ({b['overlap']}); nothing written:")
        for at in b.get("planned", []):
            s.out.say(f"  {when(at)}")
        return
    s.out.say(
        f"backfill of {channel}: {span} ({b['overlap']}); {b['created']} created, "
        f"{b['already_present']} already present"
    )


@api(root, "preview")
def preview(
    s: Session,
    channel: ChannelRef,
    count: Annotated[int, typer.Option(min=1, max=1000, help="how many, 1..1000")] = 10,
    from_: Annotated[
        str | None,
        typer.Option("--from", help="the fire times after this instant: RFC 3339 or an age (7d)"),
    ] = None,
) -> None:
    """The next fire times in UTC and in the channel's local time, with the local weekday and
    a mark where the zone's offset changes (check a DST day), and when each row falls due if
    the channel spreads them (`jitter_secs`)."""
    query = {"count": count, "from": instant(from_)}
    answer = s.get(f"{path_of(s.channel(channel))}/preview", query)
    p = answer["data"]

    def human() -> None:
        s.out.say(f"{schedule_of(p)} in {p['timezone']}:")
        columns = [
            Column("UTC", lambda i: i["utc"], 90),
            Column("LOCAL", lambda i: i["local"], 100),
            Column("DAY", lambda i: i.get("weekday"), 70),
        ]
        if any(i.get("dst") for i in p["instants"]):
            columns.append(Column("DST", lambda i: i.get("dst") and f"offset {i['dst']}", 60))
        if any(parse_rfc3339(i["due_at"]) != parse_rfc3339(i["utc"]) for i in p["instants"]):
            columns.append(Column("DUE (UTC)", lambda i: i["due_at"], 80))
        s.out.table(columns, p["instants"], empty=p.get("note") or "(none)")

    s.out.answer(answer, human)


def schedule_of(view: Mapping[str, Any] | None) -> str | None:
    """The cron expression, or `at <local time>` for a one-time schedule, with `(ended)` once
    it has no instant left."""
    view = view or {}
    text = view.get("schedule") or (f"at {view['at']}" if view.get("at") else None)
    return f"{text} (ended)" if text and view.get("ended") else text


def concurrency(view: Mapping[str, Any], held: int | None = None, wide: bool = False) -> str:
    """`allow`, or `forbid 0/1` (with the key when it is not the channel's own id)."""
    policy = view.get("concurrency_policy")
    if policy in (None, "allow"):
        return str(policy or "-")
    used = "" if held is None else f"{held}/"
    key = view.get("concurrency_key")
    named = f" on {key}" if key and (wide or key != view.get("channel_id")) else ""
    return f"{policy} {used}{view.get('slots')}{named}"


STATUS_COLUMNS = (
    Column("CHANNEL", lambda s: s["name"], 100),
    Column("SCHEDULE", lambda s: schedule_of(s) or "(invalid)", 70),
    Column("TIMEZONE", lambda s: s.get("timezone"), 40),
    Column("NEXT FIRE (UTC)", lambda s: when(s.get("next_fire_at")), 80),
    Column("LAST RUN", lambda s: when(s.get("last_scheduled_for")), 50),
    Column("LAST STATUS", lambda s: s.get("last_status"), 90, status=True),
    # An open alert by its short name ("failed"), coloured as that status is.
    Column(
        "ALERT", lambda s: (s.get("open_alert") or "").rpartition(".")[2] or None, 85, status=True
    ),
    Column("PENDING", lambda s: s["pending"], 60),
    Column("CONCURRENCY", lambda s: concurrency(s, held=s.get("slots_held")), 20),
)


@api(root, "status", paged=PAGING, watched=WATCHING)
def status(s: Session, name_prefix: NamePrefix = None) -> None:
    """Per active channel, newest first: next fire, last run and its status, pending count,
    concurrency; with --watch, then each channel's row again whenever it changes."""
    query = {"name_prefix": name_prefix, **s.page}
    if s.watching:
        watch_rows(s, "/cron/status", query, "channel_id", STATUS_COLUMNS)
        return
    page = s.get("/cron/status", query)

    def human() -> None:
        s.out.table(STATUS_COLUMNS, page["data"], page, empty="(no active channels)")
        for c in s.get(
            "/channels", {"status": "paused", "name_prefix": name_prefix, "limit": 1000}
        )["data"]:
            s.out.say(f"{c['name']}: ", s.out.status("paused"), status_note(c) or "")

    s.out.answer(page, human)
