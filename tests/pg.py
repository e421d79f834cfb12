"""Scratch PostgreSQL databases for tests and benchmarks: created on a server, dropped after,
each with a name of its own so runs on one machine never meet."""

from __future__ import annotations

import uuid
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

import sqlalchemy as sa


@contextmanager
def scratch_database(server_url: str | sa.URL, purpose: str) -> Iterator[str]:
    """A fresh, empty database on the server at `server_url` (its URL, password included),
    dropped when the block ends. Creating it raises if the server cannot be reached."""
    server = sa.make_url(server_url)
    admin = sa.create_engine(server.set(database="postgres"), isolation_level="AUTOCOMMIT")
    name = f"cronledger_{purpose}_{uuid.uuid4().hex[:10]}"
    try:
        with admin.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
        yield server.set(database=name).render_as_string(hide_password=False)
    finally:
        _drop(admin, name)
        admin.dispose()


def _drop(admin: sa.Engine, name: str) -> None:
    """Drop a scratch database, but never hang on it: a backend that cannot be terminated
    would otherwise block `DROP … WITH (FORCE)` forever. One left behind is reported, and
    harmless (its name is unique)."""
    try:
        with admin.connect() as conn:
            conn.execute(sa.text("SET statement_timeout = '30s'"))
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    except sa.exc.DBAPIError as exc:
        warnings.warn(f"could not drop database {name}: {exc}", stacklevel=1)
