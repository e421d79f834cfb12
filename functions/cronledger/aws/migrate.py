"""`migrate`: run by the stack's CDK trigger on every deploy, before the other functions get new
code. An exception fails the deploy with its message; running it again is harmless (upgrade to
head, deploys taking turns on an advisory lock).

A first deploy may run while the master secret's first rotation is still changing the password
and before RDS Proxy reaches the cluster. So, within `CRONLEDGER_MIGRATE_WAIT_SECS`, it first
waits (at most half that time) while the secret `CRONLEDGER_DB_SECRET_ARN` has a rotation under
way, then migrates, retrying with backoff while the database is unavailable. Migrating makes the
statement timeout the database's default (how sessions through RDS Proxy get it), upgrades the
schema and grants the application role (`CRONLEDGER_DB_APP_USER`) the `cron_*` tables' rows.
Everything stops `STOP_MARGIN_SECS` before the deadline, so the deploy shows its error rather
than Lambda's timeout. It alone connects as the schema's owner (`owner`).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

# Every invocation reads the database secret's state: botocore is loaded (and traced) now.
import botocore.session  # noqa: F401
from aws_lambda_powertools.utilities.typing import LambdaContext

from cronledger.aws import runtime
from cronledger.aws.database import admin_engine
from cronledger.aws.runtime import logger, tracer
from cronledger.errors import CronledgerError
from cronledger.ledger import DatabaseUnavailable, DeadlineReached, Ledger
from cronledger.ledger.connecting import deadline
from cronledger.ledger.roles import grant_application_role
from cronledger.pacing import Backoff
from cronledger.targets.clients import default_clients

if TYPE_CHECKING:
    from mypy_boto3_secretsmanager import SecretsManagerClient

APP_USER = "CRONLEDGER_DB_APP_USER"
WAIT_SECS = "CRONLEDGER_MIGRATE_WAIT_SECS"
SECRET_ARN = "CRONLEDGER_DB_SECRET_ARN"
DEFAULT_WAIT_SECS = 240.0
#: Kept back from the function's deadline for the migration itself.
MIGRATION_SECS = 45.0
#: How long before the function's deadline everything stops, leaving time to say why.
STOP_MARGIN_SECS = 10.0
FIRST_RETRY_SECS = 1.0
ROTATION_POLL_SECS = 5.0

_log = logging.getLogger(__name__)


class DatabaseNeverAnswered(CronledgerError):
    """The database stayed unavailable for as long as the deploy may wait."""


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, bool]:
    started = time.monotonic()
    stop_by = runtime.deadline(context) - STOP_MARGIN_SECS
    until = min(started + wait_secs(os.environ), stop_by - MIGRATION_SECS)
    secret = os.environ.get(SECRET_ARN, "").strip()
    if secret:
        wait_for_rotation(
            default_clients().secretsmanager(), secret, started + (until - started) / 2
        )
    ledger, timeout_ms = owner(), runtime.settings().db_statement_timeout_ms
    try:
        with deadline(stop_by):
            tries = until_available(lambda: migrate(ledger, timeout_ms, stop_by), until)
    except DeadlineReached as exc:
        raise DeadlineReached(
            f"migrate stopped at its deadline, {STOP_MARGIN_SECS:.0f} s before the function's "
            f"timeout and {stop_by - started:.0f} s after it started: {exc}"
        ) from exc
    finally:
        ledger.dispose()  # its connections' timeouts were cut to this invocation's deadline
    logger.info("the ledger schema is up to date", extra={"tries": tries})
    return {"migrated": True}


@runtime.per_container
def owner() -> Ledger:
    engine = admin_engine()
    return runtime.ledger() if engine is None else Ledger(engine)


def migrate(ledger: Ledger, statement_timeout_ms: int, until: float | None = None) -> None:
    """Upgrade the schema and grant the application role when the stack names one, with the
    statement timeout as its own default; with no role, as the database's default. The
    schema's owner, building an index, is never held to it."""
    role = os.environ.get(APP_USER, "").strip()
    if not role:
        ledger.make_statement_timeout_default(statement_timeout_ms)
    ledger.migrate(until=until)
    if not role:
        logger.info(f"{APP_USER} is not set: no application role to grant")
        return
    grant_application_role(ledger, role, statement_timeout_ms=statement_timeout_ms)
    logger.info("the application role may use the cron_* tables", extra={"role": role})


def until_available(step: Callable[[], None], until: float) -> int:
    """Run `step` until it does not raise `DatabaseUnavailable`, backing off between tries;
    answer how many tries it took. `DatabaseNeverAnswered` when the next try would start past
    the monotonic `until`."""
    backoff = Backoff("migrate", FIRST_RETRY_SECS, _log)
    started = time.monotonic()
    while True:
        try:
            step()
        except DatabaseUnavailable as exc:
            wait = backoff.failed(exc)
            if time.monotonic() + wait > until:
                raise DatabaseNeverAnswered(
                    f"the ledger database stayed unavailable for "
                    f"{time.monotonic() - started:.0f} s ({backoff.failures} tries); the last "
                    f"error: {exc}"
                ) from exc
            time.sleep(wait)
            continue
        tries = backoff.failures + 1
        backoff.succeeded()
        return tries


def rotation_under_way(secret: Mapping[str, Any]) -> str | None:
    """Why a secret (a `DescribeSecret` answer) is not settled yet, or None when it is."""
    if secret.get("RotationEnabled") and not secret.get("LastRotatedDate"):
        return "its first rotation has not finished"
    for version, stages in secret.get("VersionIdsToStages", {}).items():
        if "AWSPENDING" in stages and "AWSCURRENT" not in stages:
            return f"version {version} is being rotated in"
    return None


def wait_for_rotation(
    client: SecretsManagerClient,
    secret_arn: str,
    until: float,
    sleep: Callable[[float], None] = time.sleep,
) -> bool:
    """Wait, until the monotonic `until` at most, for the secret to have no rotation under
    way; answer whether it settled (a rotation still under way then is logged and left)."""
    while True:
        reason = rotation_under_way(client.describe_secret(SecretId=secret_arn))
        if reason is None:
            return True
        if time.monotonic() + ROTATION_POLL_SECS > until:
            _log.warning("migrating although the database secret is not settled: %s", reason)
            return False
        _log.info("waiting for the database secret's rotation: %s", reason)
        sleep(ROTATION_POLL_SECS)


def wait_secs(environ: Mapping[str, str]) -> float:
    raw = environ.get(WAIT_SECS, "").strip()
    try:
        value = float(raw) if raw else DEFAULT_WAIT_SECS
    except ValueError:
        raise CronledgerError(f"{WAIT_SECS}={raw!r} is not a number of seconds") from None
    if value < 0:
        raise CronledgerError(f"{WAIT_SECS}={raw!r} must not be negative")
    return value
