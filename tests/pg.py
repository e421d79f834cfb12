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
    name = f"cronledger_{purpose}_{uuid.uuid4().hex[:10]}"
    with _admin(server) as admin, admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    url = server.set(database=name).render_as_string(hide_password=False)
    try:
        yield url
    finally:
        try:
            drop_database(url)
        except sa.exc.DBAPIError as exc:  # one left behind is harmless: its name is unique
            warnings.warn(f"could not drop database {name}: {exc}", stacklevel=1)


def drop_database(url: str | sa.URL) -> None:
    """Drop the database at `url` now, whoever is connected to it, but never hang on it: a
    backend that cannot be terminated would otherwise block `DROP … WITH (FORCE)` forever."""
    url = sa.make_url(url)
    with _admin(url) as admin, admin.connect() as conn:
        conn.execute(sa.text("SET statement_timeout = '30s'"))
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{url.database}" WITH (FORCE)'))


@contextmanager
def _admin(url: sa.URL) -> Iterator[sa.Engine]:
    """An engine on the server's `postgres` database, for creating and dropping others."""
    admin = sa.create_engine(url.set(database="postgres"), isolation_level="AUTOCOMMIT")
    try:
        yield admin
    finally:
        admin.dispose()
