"""What every operator command shares: the global options, the API client, the renderer, and
the one boundary where an error becomes a message and an exit code.

The global options are accepted before the subcommand and after it (`api` adds them to each
command's signature, so its help lists them); one given after the subcommand wins. Exit codes:
0 done; 1 the API refused; 2 bad usage or an unreadable file; 3 the API is unreachable.
"""

from __future__ import annotations

import functools
import inspect
import os
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Final

import typer

from cronledger.api_client import (
    DEFAULT_API_URL,
    PREFIX,
    ApiClient,
    ApiError,
    Unreachable,
    check_api_url,
    segment,
)
from cronledger.cli.documents import UsageError
from cronledger.cli.output import Format, Out
from cronledger.cli.watching import Interval, Watch, WatchFor

EXIT_OK, EXIT_API, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3
_AGE: Final = re.compile(r"(\d+)([smhd])")
_UNITS: Final = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}
GLOBAL_PANEL: Final = "Global options"


def _api_url(value: str | None) -> str | None:
    if value is None:
        return None
    try:
        return check_api_url(value)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


def _api_url_option(**extra: Any) -> Any:
    return typer.Option(
        "--api-url",
        help=f"the API's base URL (default: $CRONLEDGER_API_URL, else {DEFAULT_API_URL})",
        callback=_api_url,
        rich_help_panel=GLOBAL_PANEL,
        show_default=False,
        **extra,
    )


ApiUrl = Annotated[str | None, _api_url_option()]
RootApiUrl = Annotated[str | None, _api_url_option(envvar="CRONLEDGER_API_URL", show_envvar=False)]
Output = Annotated[
    Format | None,
    typer.Option(
        "--output",
        "-o",
        help="table (fits the terminal), wide (every column), json or yaml",
        rich_help_panel=GLOBAL_PANEL,
        show_default=False,
    ),
]
Json = Annotated[bool, typer.Option("--json", help="same as -o json", rich_help_panel=GLOBAL_PANEL)]


def _channel_names(ctx: typer.Context, incomplete: str) -> list[str]:
    """Shell completion of a CHANNEL: the names the API knows (none if it cannot be asked)."""
    given = ctx.params.get("api_url") or ctx.find_root().params.get("api_url")
    url = given or os.environ.get("CRONLEDGER_API_URL") or DEFAULT_API_URL
    try:
        query = {"name_prefix": incomplete or None, "limit": 1000}
        page = ApiClient(url, timeout=2).call("GET", f"{PREFIX}/channels", query)
    except (ApiError, Unreachable, ValueError):
        return []
    return sorted(c["name"] for c in page["data"] if c["name"].startswith(incomplete))


ChannelRef = Annotated[
    str,
    typer.Argument(help="a channel name or id", show_default=False, autocompletion=_channel_names),
]
ChannelFilter = Annotated[str | None, typer.Option("--channel", "-c", help="a channel name or id")]
Limit = Annotated[int, typer.Option(min=1, max=1000, help="rows per page, 1..1000")]
Offset = Annotated[int, typer.Option(min=0, help="rows to skip, up to 10000 (then use --after)")]
After = Annotated[
    str | None, typer.Option(help="the page after this key (the footer names it: --after …)")
]
Yes = Annotated[bool, typer.Option("--yes", "-y", help="do it without asking")]


def instant(value: str | None) -> str | None:
    """An age like `24h` becomes now - 24h; a date-time passes through (the API checks it
    further, e.g. for its offset); anything else is a UsageError."""
    if value is None:
        return None
    age = _AGE.fullmatch(value.strip())
    if age is None:
        try:
            datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            raise UsageError(
                f"{value!r} is neither an RFC 3339 time (2026-09-01T00:00:00Z) nor an age "
                "(24h, 30m, 7d)"
            ) from None
        return value
    delta = timedelta(**{_UNITS[age.group(2)]: int(age.group(1))})
    return (datetime.now(UTC) - delta).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Session:
    """One command's view of the world: the API, where its answers are printed, and the paging
    and `--watch` options of a listing (`api(paged=…, watched=…)`)."""

    api: ApiClient
    out: Out
    #: `--limit`, `--offset` and `--after`, as the API's query terms.
    page: dict[str, Any]
    #: With `--watch`: seconds between polls, and after which to stop (None: at Ctrl-C).
    watching: tuple[float, float | None] | None

    def get(self, path: str, query: Mapping[str, Any] | None = None) -> Any:
        return self.api.call("GET", f"{PREFIX}{path}", query)

    def send(
        self, method: str, path: str, body: Any = None, query: Mapping[str, Any] | None = None
    ) -> Any:
        return self.api.call(method, f"{PREFIX}{path}", query, body=body)

    def each(self, path: str, query: Mapping[str, Any]) -> list[Any]:
        """Every item of a list, following its pages (`next`)."""
        items: list[Any] = []
        given = {**query, "limit": 1000}
        while True:
            page = self.get(path, given)
            items += page["data"]
            if not page.get("next"):
                return items
            given["after"] = page["next"]

    def named(self, name: str) -> dict[str, Any] | None:
        found: list[dict[str, Any]] = self.get("/channels", {"name": name})["data"]
        return found[0] if found else None

    def found(self, path: str, missing: Exception) -> dict[str, Any]:
        """The item at `path`; `missing` raised if the API has none (404)."""
        try:
            item: dict[str, Any] = self.get(path)["data"]
        except ApiError as exc:
            if exc.status == 404:
                raise missing from None
            raise
        return item

    def channel(self, ref: str) -> dict[str, Any]:
        """The channel named `ref`, else the one whose id it is; an error naming both."""
        message = f"no channel named {ref!r} or with that id; `channels list` shows them"
        missing = ApiError(404, {"error": {"code": "not_found", "message": message}})
        return self.named(ref) or self.found(f"/channels/{segment(ref)}", missing)

    def channel_id(self, ref: str | None) -> str | None:
        return None if ref is None else str(self.channel(ref)["channel_id"])


#: The options `api` adds to a command, after its own: a listing's paging (`paged`), `--watch`'s
#: (`watched`), and the global ones; each as (name, annotation, default).
Added = tuple[tuple[str, Any, Any], ...]
LIMIT: Final = ("limit", Limit, 50)
OFFSET: Final = ("offset", Offset, 0)
AFTER: Final = ("after", After, None)
PAGING: Final = (LIMIT, OFFSET, AFTER)
PACING: Final = (("interval", Interval, 2.0), ("watch_for", WatchFor, None))
WATCHING: Final = (("watch", Watch, False), *PACING)
GLOBALS: Final = (("api_url", ApiUrl, None), ("output", Output, None), ("json_", Json, False))


def api(
    app: typer.Typer,
    name: str,
    *,
    paged: Added = (),
    watched: Added = (),
    **options: Any,
) -> Callable[..., Any]:
    """Register `func(session, …)` as a command of `app` that talks to the API: the paging,
    watch and global options join its own (the session holds their values), and its errors
    leave through `run`."""
    added = [*paged, *watched, *GLOBALS]

    def register(func: Callable[..., None]) -> Callable[..., None]:
        signature = inspect.signature(func, eval_str=True)
        own = list(signature.parameters.values())[1:]  # the session is ours to give
        keyword = inspect.Parameter.KEYWORD_ONLY
        extra = [inspect.Parameter("ctx", keyword, annotation=typer.Context)]
        extra += [inspect.Parameter(n, keyword, default=d, annotation=a) for n, a, d in added]

        @functools.wraps(func)
        def command(ctx: typer.Context, **kwargs: Any) -> None:
            given = {n: kwargs.pop(n) for n, _, _ in added}
            root = ctx.find_root().params
            api_url = given["api_url"] or root.get("api_url") or DEFAULT_API_URL
            fmt = given["output"] or root.get("output") or Format.table
            if given["json_"] or root.get("json_"):
                fmt = Format.json
            page = {n: given[n] for n, _, _ in paged}
            watching = (given["interval"], given["watch_for"]) if given.get("watch") else None
            session = Session(ApiClient(api_url), Out(fmt), page, watching)
            run(session.out, lambda: func(session, **kwargs))

        command.__signature__ = signature.replace(parameters=[*own, *extra])  # type: ignore[attr-defined]
        app.command(name, **options)(command)
        return func

    return register


def run(out: Out, body: Callable[[], None]) -> None:
    """The boundary of every command: an error is said once, and is an exit code."""
    try:
        body()
    except ApiError as exc:
        if out.for_scripts:
            out.data(exc.body)  # scripts get the API's error envelope as well
        out.error(str(exc), exc.details)
        raise typer.Exit(EXIT_API) from None
    except (Unreachable, UsageError) as exc:
        out.error(str(exc))
        raise typer.Exit(EXIT_USAGE if isinstance(exc, UsageError) else EXIT_UNREACHABLE) from None


def confirm(out: Out, question: str, yes: bool) -> None:
    """Go on if `--yes` was given or a person at the terminal says yes. No one to ask is a
    UsageError; a "no", Ctrl-C or end of input ends the command with the usage exit code."""
    if yes:
        return
    try:
        interactive = sys.stdin.isatty()
    except (AttributeError, ValueError, OSError):
        interactive = False
    if not interactive:
        raise UsageError(f"{question} Add --yes to confirm.")
    try:
        agreed = typer.confirm(question, default=False, err=True)
    except typer.Abort:  # Ctrl-C or end of input at the prompt: a "no", said as one
        agreed = False
    if not agreed:
        out.error("Nothing was done.")
        raise typer.Exit(EXIT_USAGE)
