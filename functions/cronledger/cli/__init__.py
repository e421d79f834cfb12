"""The `cronledger` command line: `app` (Typer), `main(argv)` for an exit code, `entry()` for the
executable."""

from cronledger.cli.app import app, entry, main

__all__ = ["app", "entry", "main"]
