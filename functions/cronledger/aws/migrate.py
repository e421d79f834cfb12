"""`migrate`: run by the stack's CDK trigger on every deploy, before the other functions get new
code (infra/cronledger_infra/migration.py). The trigger invokes it synchronously with an empty
event and reads only whether it failed: an exception fails the deploy, which CloudFormation
rolls back, with its message shown in the stack's events. Migrating is idempotent (upgrade to
head, deploys taking turns on an advisory lock), so running it again is harmless.

`migrate` is the one function that connects as the schema's owner. After upgrading it makes
sure the application role the other functions connect as (`CRONLEDGER_DB_APP_USER`, set by the
stack) exists with rights to the `cron_*` tables' rows and nothing more
(`cronledger.ledger.roles`), so a table a new revision adds is granted in the same deploy.
"""

from __future__ import annotations

import os
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from cronledger.aws import runtime
from cronledger.aws.runtime import logger, tracer
from cronledger.ledger.roles import grant_application_role

APP_USER = "CRONLEDGER_DB_APP_USER"


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, bool]:
    runtime.ledger().migrate()
    logger.info("the ledger schema is up to date")
    ensure_application_role()
    return {"migrated": True}


def ensure_application_role() -> None:
    """Grant the application role, when the stack names one (a database outside the stack,
    reached with CRONLEDGER_DATABASE_URL, may not want one)."""
    role = os.environ.get(APP_USER, "").strip()
    if not role:
        logger.info(f"{APP_USER} is not set: no application role to grant")
        return
    grant_application_role(runtime.ledger(), role)
    logger.info("the application role may use the cron_* tables", extra={"role": role})
