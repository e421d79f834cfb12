"""The `cronledger` command line.

`cronledger migrate` upgrades a database to the newest schema; `cronledger dev --demo` runs the
scheduler locally; the operator commands (`channels`, `occurrences`, `trigger`, `retry`,
`cancel`, `status`, `preview`) talk to the HTTP API. Every failure exits non-zero with a
one-line message, never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import sqlalchemy as sa

from cronledger.operator_cli import add_operator_commands
from cronledger.settings import Settings


def _database_url(args: argparse.Namespace) -> str:
    """`--database-url`, else the settings' (`CRONLEDGER_DATABASE_URL`, checked like every
    setting, or the default)."""
    url: str = args.database_url or Settings.from_env().database_url
    return url


def _cmd_migrate(args: argparse.Namespace) -> int:
    from cronledger.ledger import Ledger

    url = _database_url(args)
    Ledger.connect(url).migrate()
    print(f"migrated {sa.make_url(url).render_as_string(hide_password=True)}")
    return 0


def _cmd_dev(args: argparse.Namespace) -> int:
    from cronledger.local import run_dev

    return run_dev(
        _database_url(args), args.host, args.port, args.demo, allow_remote=args.allow_remote
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cronledger", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    migrate = sub.add_parser("migrate", help="upgrade a database to the newest schema")
    migrate.add_argument(
        "--database-url", help="default: $CRONLEDGER_DATABASE_URL or a local SQLite file"
    )
    migrate.set_defaults(func=_cmd_migrate)

    dev = sub.add_parser("dev", help="run the scheduler locally in one process")
    dev.add_argument("--database-url")
    dev.add_argument("--demo", action="store_true", help="create a demo channel firing every 5 s")
    dev.add_argument("--host", default="127.0.0.1", help="the API's address (default 127.0.0.1)")
    dev.add_argument(
        "--allow-remote",
        action="store_true",
        help="let --host be an address other machines can reach (the API has no authentication)",
    )
    dev.add_argument("--port", type=int, default=8080)
    dev.set_defaults(func=_cmd_dev)

    add_operator_commands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # the command line's boundary: one line, no traceback
        print(f"cronledger: error: {exc}", file=sys.stderr)
        return 1
    return code


if __name__ == "__main__":
    sys.exit(main())
