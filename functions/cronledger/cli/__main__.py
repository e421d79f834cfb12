"""`python -m cronledger.cli`: the `cronledger` executable."""

from cronledger.cli import entry

entry()
