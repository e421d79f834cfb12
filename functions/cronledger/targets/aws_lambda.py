"""Lambda target: a synchronous invoke, successful when it returns without `FunctionError`.
The budget is the client's read timeout, never retried (a retry runs the function twice). A
timeout does not stop the function; the envelope's `fencing_token` tells such a straggler it
was superseded.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import ValidationInfo, field_validator

from cronledger.targets.clients import arn_region
from cronledger.targets.envelope import envelope_json
from cronledger.targets.fields import TargetDocument, text
from cronledger.targets.interface import Delivery, TargetOutcome
from cronledger.validation import refused

_ARN = r"arn:aws[a-z-]*:lambda:[a-z0-9-]+:\d{12}:function:"
_QUALIFIER = r"\$LATEST|[A-Za-z0-9_-]{1,128}"
_FUNCTION = re.compile(rf"({_ARN})?[A-Za-z0-9_-]{{1,64}}(:({_QUALIFIER}))?")


class LambdaTarget(TargetDocument):
    type: Literal["lambda"]
    function_arn: text(  # type: ignore[valid-type]
        "arn:aws:lambda:eu-west-1:123456789012:function:nightly-report",
        170,
        _FUNCTION,
        "must be a function name or a function ARN",
    )
    qualifier: text(  # type: ignore[valid-type]
        "live", 128, re.compile(_QUALIFIER), "must be a version number, an alias name or $LATEST"
    ) = None

    @field_validator("qualifier")
    @classmethod
    def _in_one_place(cls, qualifier: str | None, info: ValidationInfo) -> str | None:
        function = info.data.get("function_arn")
        if function and qualifier and _inline_qualifier(function):
            raise refused(
                "invalid",
                "function_arn already ends with a qualifier; give the version or alias in one "
                "place",
            )
        return qualifier

    @classmethod
    def ref(cls, doc: Mapping[str, Any]) -> str:
        qualifier = doc.get("qualifier")
        return f"lambda:{doc['function_arn']}" + (f":{qualifier}" if qualifier else "")

    @classmethod
    def run(cls, doc: Mapping[str, Any], delivery: Delivery) -> TargetOutcome:
        function = doc["function_arn"]
        client = delivery.clients.lambda_(arn_region(function), delivery.timeout_secs)
        options = {"Qualifier": doc["qualifier"]} if doc.get("qualifier") else {}
        response = client.invoke(
            FunctionName=function,
            InvocationType="RequestResponse",
            Payload=envelope_json(delivery.envelope).encode("utf-8"),
            **options,
        )
        answer = response["Payload"].read().decode("utf-8", errors="replace")
        function_error = response.get("FunctionError")
        if function_error:
            error = f"{function_error} function error: {_reason(answer)}"
            return TargetOutcome(ok=False, result=answer, error=error)
        return TargetOutcome(ok=True, result=answer)


def _inline_qualifier(function: str) -> bool:
    parts = function.split(":")
    return len(parts) == 8 if function.startswith("arn:") else len(parts) == 2


def _reason(answer: str) -> str:
    """`errorType: errorMessage` from Lambda's error document, or the raw answer's start."""
    try:
        document = json.loads(answer)
    except ValueError:
        return answer[:500]
    if isinstance(document, dict) and "errorMessage" in document:
        kind = document.get("errorType")
        return f"{kind}: {document['errorMessage']}" if kind else str(document["errorMessage"])
    return answer[:500]
