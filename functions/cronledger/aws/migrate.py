"""`migrate`: run by the stack's CDK trigger on every deploy, before the other functions get new
code (infra/cronledger_infra/migration.py). The trigger invokes it synchronously with an empty
event and reads only whether it failed: an exception fails the deploy, which CloudFormation
rolls back, with its message shown in the stack's events. Migrating is idempotent (upgrade to
head, deploys taking turns on an advisory lock), so running it again is harmless.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from cronledger.aws import runtime
from cronledger.aws.runtime import logger, tracer


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, bool]:
    runtime.ledger().migrate()
    logger.info("the ledger schema is up to date")
    return {"migrated": True}
