"""`channels`: the on-event handler of the custom resources a CDK app's declared channels are.
Create and Update apply the declared document; Delete archives the channel or purges it
(`Removal`). The physical id is the channel's id. Whatever it raises fails the deploy with its
message (for a refused document, the API's, every problem with its path); what it did is in
the answer's `Data`, which the stack publishes as an output.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from cronledger.api import create_app
from cronledger.aws import runtime
from cronledger.aws.runtime import logger
from cronledger.channels_as_code import (
    DeployRefused,
    InProcessApi,
    apply_declared,
    remove_declared,
)


@runtime.per_container
def api() -> InProcessApi:
    return InProcessApi(create_app(runtime.ledger(), runtime.settings()))


@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    answer = on_event(api(), event)
    logger.info("channel applied", extra={"request": event.get("RequestType"), **answer["Data"]})
    return answer


def on_event(api: InProcessApi, event: Mapping[str, Any]) -> dict[str, Any]:
    request = event.get("RequestType")
    properties = event.get("ResourceProperties") or {}
    deployer = str(properties.get("Deployer") or "this stack")
    if request == "Delete":
        channel_id = str(event.get("PhysicalResourceId") or "")
        purge = properties.get("Removal") == "purge"
        said = remove_declared(api, channel_id, purge, deployer)
        return {"PhysicalResourceId": channel_id, "Data": {"Summary": said}}
    if request not in ("Create", "Update"):
        raise DeployRefused(f"unknown custom resource request {request!r}")
    document = _document(properties)
    previous = _document(event["OldResourceProperties"]) if request == "Update" else None
    applied = apply_declared(api, document, previous, deployer)
    return {
        "PhysicalResourceId": applied.channel_id,
        "Data": {
            "ChannelId": applied.channel_id,
            "Version": str(applied.version),
            "Outcome": applied.outcome,
            "Summary": applied.summary,
        },
    }


def _document(properties: Mapping[str, Any]) -> dict[str, Any]:
    """The declared document, which the stack sends as one JSON string."""
    try:
        document = json.loads(properties.get("Document") or "")
    except ValueError:
        raise DeployRefused("the custom resource's Document is not JSON") from None
    if not isinstance(document, dict):
        raise DeployRefused("the custom resource's Document is not a JSON object")
    return document
