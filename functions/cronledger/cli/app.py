"""The `cronledger` command line (Typer): the root, and the commands that run something here.

Every failure exits non-zero with one message, never a traceback. A command that prints and
exits ends quietly on a closed pipe (`… | head -1`); to `dev` and `console`, which serve until
stopped, a peer that goes away is an ordinary error, so a broken pipe never ends them.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Sequence
from functools import cache, partial
from typing import Annotated, Final

import sqlalchemy as sa
import typer

from cronledger import __version__
from cronledger.cli.channels import channels, root as channel_commands
from cronledger.cli.events import root as event_commands
from cronledger.cli.occurrences import occurrences, root as occurrence_commands
from cronledger.cli.session import Json, Output, RootApiUrl, Session, api
from cronledger.settings import Settings

app = typer.Typer(
    help="cronledger: a durable cron scheduler that keeps a ledger of every scheduled instant.",
    no_args_is_help=True,
    rich_markup_mode="markdown",
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.add_typer(channels, name="channels")
app.add_typer(occurrences, name="occurrences")
for commands in (channel_commands, occurrence_commands, event_commands):
    app.registered_commands += commands.registered_commands

#: The commands that serve until stopped: a broken pipe ends one request, not the process.
SERVERS: Final = frozenset({"dev", "console"})
#: What `entry` hands the root command: only the executable changes its signal handling (a
#: test calling `main` in-process must not).
_EXECUTABLE: Final = "executable"


def _version(value: bool) -> None:
    if value:
        typer.echo(f"cronledger {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    ctx: typer.Context,
    api_url: RootApiUrl = None,
    output: Output = None,
    json_: Json = False,
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="print the version"),
    ] = False,
) -> None:
    if ctx.obj == _EXECUTABLE and ctx.invoked_subcommand not in SERVERS:
        # A closed pipe ends the command quietly, as it ends a C tool (exit 141).
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)


DatabaseUrl = Annotated[
    str | None,
    typer.Option(
        help="default: $CRONLEDGER_DATABASE_URL or a local SQLite file", show_default=False
    ),
]


def _database_url(given: str | None) -> str:
    """`--database-url`, else the settings' (checked like every setting)."""
    return given or Settings.from_env().database_url


@app.command()
def migrate(database_url: DatabaseUrl = None) -> None:
    """Upgrade a database to the newest schema."""
    from cronledger.ledger import Ledger

    url = _database_url(database_url)
    # An index build sends nothing until it ends: no read timeout (keepalives still run).
    Ledger.connect(url, socket_timeout_secs=None).migrate()
    typer.echo(f"migrated {sa.make_url(url).render_as_string(hide_password=True)}")


@app.command()
def dev(
    database_url: DatabaseUrl = None,
    demo: Annotated[bool, typer.Option(help="create a demo channel firing every 5 s")] = False,
    host: Annotated[str, typer.Option(help="the API's address")] = "127.0.0.1",
    allow_remote: Annotated[
        bool,
        typer.Option(
            help="let --host be an address other machines can reach (the API has no authentication)"
        ),
    ] = False,
    port: Annotated[int, typer.Option(min=0, max=65535, help="the API's port")] = 8080,
) -> None:
    """Run the scheduler locally in one process: the API (and the web console at /console),
    reconcile, claim and execute."""
    from cronledger.local import run_dev

    run_dev(_database_url(database_url), host, port, demo, allow_remote)


@api(app, "console")
def console(
    s: Session,
    port: Annotated[
        int, typer.Option(min=0, max=65535, help="the local port (0: any free one)")
    ] = 8001,
) -> None:
    """Serve the web console on 127.0.0.1 and pass its requests to the API, signed (SigV4)
    when the API is on AWS, as `kubectl proxy` does."""
    from cronledger.console.proxy import serve_console

    serve_console(s.api, port, s.out)


#: The command tree, built once per process: it keeps no state between the runs it parses.
_command = cache(partial(typer.main.get_command, app))


def main(argv: Sequence[str] | None = None, *, executable: bool = False) -> int:
    """Run the command line; the exit code. `executable`: this process is the `cronledger`
    executable, running that command alone."""
    command = _command()
    try:
        command.main(args=argv, prog_name="cronledger", obj=_EXECUTABLE if executable else None)
    except SystemExit as exit:
        return exit.code if isinstance(exit.code, int) else (0 if exit.code is None else 1)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # the command line's boundary: one line, no traceback
        print(f"cronledger: error: {exc}", file=sys.stderr)
        return 1
    return 0


def entry() -> None:
    """The `cronledger` executable."""
    sys.exit(main(executable=True))
