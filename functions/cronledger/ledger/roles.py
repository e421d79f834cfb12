"""The application role (docs/guarantees.md#security) every function but `migrate` connects
as on AWS: it reads and writes the rows of the `cron_*` tables (and uses their sequences) and
nothing else; it owns, creates (`CREATE` and `TEMPORARY` are revoked from `PUBLIC`) and reads
no other table, so SQL of a caller's choosing can only do what the scheduler can. Granting is
idempotent and runs after every migration; given `rds_iam`, the role logs in with IAM tokens.
"""

from __future__ import annotations

import re
import time

import sqlalchemy as sa

from cronledger.ledger.migration import LOCK_POLL_SECS, MIGRATION_LOCK_ID
from cronledger.ledger.repository import Ledger

ROLE_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")
TABLE_PREFIX = "cron_"
_ROW_PRIVILEGES = "SELECT, INSERT, UPDATE, DELETE"
_SEQUENCE_PRIVILEGES = "USAGE, SELECT, UPDATE"


def grant_application_role(
    ledger: Ledger, role: str, *, statement_timeout_ms: int | None = None
) -> None:
    """Create `role` if need be and give it exactly the rights above (PostgreSQL), with
    `statement_timeout_ms` as its sessions' default (RDS Proxy takes no startup parameters)."""
    if not ROLE_NAME.fullmatch(role):
        raise ValueError(f"{role!r} is not a role name: lowercase letters, digits and '_'")
    if ledger.engine.dialect.name != "postgresql":
        raise ValueError("an application role is a PostgreSQL concept; this ledger is not one")
    quote = ledger.engine.dialect.identifier_preparer.quote
    with ledger.engine.begin() as conn:
        # Deploys take turns, as migrations do (`migration`): two CREATE ROLE would fail one.
        take = sa.select(sa.func.pg_try_advisory_xact_lock(MIGRATION_LOCK_ID))
        while not conn.execute(take).scalar_one():
            time.sleep(LOCK_POLL_SECS)
        name = quote(role)
        exists = conn.execute(
            sa.text("SELECT 1 FROM pg_roles WHERE rolname = :role"), {"role": role}
        ).first()
        if exists is None:
            # PostgreSQL's defaults: no superuser, no CREATEDB, no CREATEROLE, no replication.
            conn.execute(sa.text(f"CREATE ROLE {name} LOGIN"))
        else:
            # (NOSUPERUSER is not said: only a true superuser may, and on RDS nobody is.)
            conn.execute(sa.text(f"ALTER ROLE {name} LOGIN NOCREATEDB NOCREATEROLE"))
        if conn.execute(sa.text("SELECT 1 FROM pg_roles WHERE rolname = 'rds_iam'")).first():
            conn.execute(sa.text(f"GRANT rds_iam TO {name}"))
        database = quote(conn.execute(sa.text("SELECT current_database()")).scalar_one())
        schema = conn.execute(sa.text("SELECT current_schema()")).scalar_one()
        conn.execute(sa.text(f"REVOKE CREATE ON SCHEMA {quote(schema)} FROM PUBLIC"))
        conn.execute(sa.text(f"REVOKE TEMPORARY ON DATABASE {database} FROM PUBLIC"))
        conn.execute(sa.text(f"GRANT CONNECT ON DATABASE {database} TO {name}"))
        conn.execute(sa.text(f"GRANT USAGE ON SCHEMA {quote(schema)} TO {name}"))
        for table in _owned_by_schema(conn, schema, "r"):
            conn.execute(sa.text(f"GRANT {_ROW_PRIVILEGES} ON TABLE {quote(table)} TO {name}"))
        for sequence in _owned_by_schema(conn, schema, "S"):
            conn.execute(
                sa.text(f"GRANT {_SEQUENCE_PRIVILEGES} ON SEQUENCE {quote(sequence)} TO {name}")
            )
        if statement_timeout_ms is not None:
            # A utility statement takes no bind parameters: the name is checked above.
            conn.execute(
                sa.text(f"ALTER ROLE {name} SET statement_timeout = {int(statement_timeout_ms)}")
            )


def _owned_by_schema(conn: sa.Connection, schema: str, kind: str) -> list[str]:
    """The schema's `cron_*` relations of one kind (`r` tables, `S` sequences)."""
    rows = conn.execute(
        sa.text(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = :schema AND c.relkind = :kind AND c.relname LIKE :prefix "
            "ORDER BY c.relname"
        ),
        {"schema": schema, "kind": kind, "prefix": TABLE_PREFIX.replace("_", r"\_") + "%"},
    )
    return [row[0] for row in rows]
