"""Synthesizing the stack for tests, and reading the template back.

The synth runs with cdk-nag attached, exactly as `make synth` does; a nag failure is kept, not
raised, so the nag test reports it and every other test still reads the template. The code asset
is the package source (`source_only_code`): the template has the same shape, in seconds.
Target ARNs of every kind are given so the executor's named-target grants are synthesized too.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

INFRA = Path(__file__).resolve().parents[2] / "infra"
if str(INFRA) not in sys.path:
    sys.path.insert(0, str(INFRA))

TARGET_KMS_KEY = "arn:aws:kms:eu-west-1:111111111111:key/1234abcd-12ab-34cd-56ef-1234567890ab"
TARGET_ARNS = (
    "arn:aws:lambda:eu-west-1:111111111111:function:nightly-report",
    "arn:aws:states:eu-west-1:111111111111:stateMachine:month-end",
    "arn:aws:sqs:eu-west-1:111111111111:jobs",
    "arn:aws:events:eu-west-1:111111111111:event-bus/ops",
)


@dataclass(frozen=True)
class Synthesized:
    app: Any
    outdir: Path
    template: dict[str, Any]
    nag_failure: str | None
    profile: str = "standard"

    def resources(self, resource_type: str) -> dict[str, dict[str, Any]]:
        """Logical id → properties of every resource of one type."""
        return {
            logical_id: resource.get("Properties", {})
            for logical_id, resource in self.template["Resources"].items()
            if resource["Type"] == resource_type
        }

    def functions(self) -> dict[str, str]:
        """Handler entry point → logical id, for cronledger's own functions."""
        return {
            props["Handler"]: logical_id
            for logical_id, props in self.resources("AWS::Lambda::Function").items()
            if str(props.get("Handler", "")).startswith("cronledger.")
        }


def synthesize(
    outdir: Path, profile: str | None = None, more: dict[str, str] | None = None
) -> Synthesized:
    """The stack under `profile` (the default's when None), with `more` context values."""
    from cronledger_infra.application import build_app
    from cronledger_infra.bundling import source_only_code
    from cronledger_infra.props import DEFAULT_NAME
    from cronledger_infra.stack import PROJECT_ROOT

    context = {
        "cronledger:target_arns": ",".join(TARGET_ARNS),
        "cronledger:target_kms_keys": TARGET_KMS_KEY,
    }
    if profile is not None:
        context["cronledger:profile"] = profile
    context.update(more or {})
    app = build_app(context, outdir=str(outdir), code=source_only_code(PROJECT_ROOT))
    try:
        app.synth()
        failure = None
    except RuntimeError as exc:  # cdk-nag's findings fail the synth after writing it
        failure = str(exc)
    template = json.loads((outdir / f"{DEFAULT_NAME}.template.json").read_text())
    return Synthesized(
        app=app,
        outdir=outdir,
        template=template,
        nag_failure=failure,
        profile=profile or "standard",
    )
