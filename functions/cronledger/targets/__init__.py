"""Targets: what an occurrence runs, one model per type (`fields.TargetDocument`).

`target_errors` checks a document against its type's model under the operator's policy,
reporting every problem at `target.<key>`. `run_target` always answers with a `TargetOutcome`,
excerpts already cut: anything that goes wrong in a target, any exception included, is a failed
outcome, because the executor settles either way. It checks the document again first, because
the policy may have narrowed since the channel was saved.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
import traceback
from collections.abc import Mapping
from typing import Any, Final

from pydantic import TypeAdapter, ValidationError

from cronledger.errors import FieldError, ValidationFailed
from cronledger.excerpts import ERROR_MESSAGE_BYTES, truncate_excerpt
from cronledger.targets.aws_sdk import (
    EventBridgeTarget,
    LambdaTarget,
    SqsTarget,
    StepFunctionsTarget,
)
from cronledger.targets.clients import AwsClients, default_clients
from cronledger.targets.envelope import Envelope
from cronledger.targets.fields import TargetDocument, union
from cronledger.targets.http import HttpTarget
from cronledger.targets.interface import Delivery, TargetOutcome, timed_out
from cronledger.targets.policy import TargetPolicy
from cronledger.targets.python import PythonTarget
from cronledger.validation import field_errors

KINDS: Final[dict[str, type[TargetDocument]]] = {
    kind.type_name: kind
    for kind in (
        LambdaTarget,
        HttpTarget,
        StepFunctionsTarget,
        SqsTarget,
        EventBridgeTarget,
        PythonTarget,
    )
}
#: A target document: one of the types' models, by its `type`.
Target = union(list(KINDS.values()))
TARGET: Final = TypeAdapter[Any](Target)
REF_MAX_CHARS = 512
#: AWS error codes that say the target itself (function, queue, state machine, bus) is gone:
#: a retry would only meet the same answer.
TARGET_GONE_CODES = frozenset(
    {
        "ResourceNotFoundException",  # Lambda, EventBridge
        "AWS.SimpleQueueService.NonExistentQueue",
        "QueueDoesNotExist",
        "StateMachineDoesNotExist",
    }
)
#: Frames of a raising Python target's traceback kept on its attempt: where it failed.
TRACEBACK_FRAMES = 3
#: How many (document, policy) pairs `run_target` remembers as already checked and valid.
KNOWN_VALID_MOST = 4_096
_log = logging.getLogger(__name__)


def target_errors(doc: Any, policy: TargetPolicy) -> list[FieldError]:
    """Every problem with a target document, without raising (so the API can merge them with
    the schedule's into one answer). An empty list means the document is valid."""
    try:
        TARGET.validate_python(doc, context={"policy": policy})
    except ValidationError as exc:
        return field_errors(exc, ("target",))
    return []


_known_valid: dict[tuple[Any, ...], None] = {}
_known_valid_lock = threading.Lock()


def _errors_unless_known_valid(doc: Any, policy: TargetPolicy) -> list[FieldError]:
    """`target_errors`, remembering documents found valid under a policy, the oldest forgotten
    first. A document's verdict depends only on the document and the policy (its resolver and
    secret lookup included), so one found valid is valid again; an invalid one is checked every
    time, so a module that fails to import is tried again."""
    try:
        key = (json.dumps(doc, sort_keys=True), policy, policy.resolver, policy.secret_hosts)
    except (TypeError, ValueError):  # not a JSON document: checked, never remembered
        return target_errors(doc, policy)
    if key in _known_valid:
        return []
    errors = target_errors(doc, policy)
    if not errors:
        with _known_valid_lock:
            if len(_known_valid) >= KNOWN_VALID_MOST:
                del _known_valid[next(iter(_known_valid))]
            _known_valid[key] = None
    return errors


def validate_target(doc: Any, policy: TargetPolicy) -> None:
    """Raise `ValidationFailed` listing every problem with a target document."""
    errors = target_errors(doc, policy)
    if errors:
        raise ValidationFailed(errors, "invalid target")


def target_ref(doc: Mapping[str, Any]) -> str:
    """A short, secret-free description of a valid target for the ledger's `target_ref` column,
    e.g. `lambda:arn:aws:lambda:…:function:report` or `http:POST https://example.com/hook`."""
    text = KINDS[doc["type"]].ref(doc)
    return text if len(text) <= REF_MAX_CHARS else text[: REF_MAX_CHARS - 1] + "…"


def run_target(
    doc: Mapping[str, Any],
    envelope: Envelope,
    timeout_secs: float,
    clients: AwsClients | None = None,
    *,
    policy: TargetPolicy,
) -> TargetOutcome:
    """Deliver `envelope` to the target within `timeout_secs` where the service lets a caller
    bound the wait (HTTP, Lambda, Step Functions with `wait`); see each module for its rule."""
    errors = _errors_unless_known_valid(doc, policy)
    if errors:
        # A stored document that no longer validates is refused rather than guessed at.
        detail = "; ".join(f"{e.path}: {e.message}" for e in errors)
        return TargetOutcome(
            ok=False, error=truncate_excerpt(f"invalid target: {detail}"), permanent=True
        )
    if timeout_secs <= 0:
        return timed_out(0)
    # Loaded with the first target that runs, as the AWS SDK is (see clients.py).
    from botocore.exceptions import ReadTimeoutError

    kind = KINDS[doc["type"]]
    try:
        deadline = time.monotonic() + timeout_secs
        given = Delivery(envelope, timeout_secs, deadline, clients or default_clients(), policy)
        outcome = kind.run(doc, given)
    except ReadTimeoutError:
        return timed_out(timeout_secs)
    except BaseException as exc:  # SystemExit, KeyboardInterrupt… fail the attempt, as any error
        _log.warning("%s target %s failed", kind.type_name, target_ref(doc), exc_info=True)
        response = getattr(exc, "response", None)  # a ClientError's: what the service answered
        code = response.get("Error", {}).get("Code") if isinstance(response, dict) else None
        frames = None
        if kind is PythonTarget:  # its last frames: where it failed, not the executor's frames
            frames = "".join(traceback.format_exception(exc, limit=-TRACEBACK_FRAMES)).strip()
        outcome = TargetOutcome(
            ok=False,
            error=f"{type(exc).__name__}: {exc}",
            detail=frames,
            permanent=code in TARGET_GONE_CODES,
        )
    return dataclasses.replace(
        outcome,
        result=truncate_excerpt(outcome.result),
        error=truncate_excerpt(outcome.error, ERROR_MESSAGE_BYTES),
        detail=truncate_excerpt(outcome.detail, ERROR_MESSAGE_BYTES),
    )
