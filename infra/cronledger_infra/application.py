"""The CDK app: cdk.json's context, the props it yields, one stack, and cdk-nag watching it.

`cdk synth` (the CLI) and `make synth` (`python infra/app.py`, no CLI) must produce the same
template, so the feature flags in cdk.json are read here too; the CLI's own context still wins.
The stack is environment-agnostic (account and region come from the deploying credentials), so
an offline synth and a deploy produce the same template. cdk-nag's AwsSolutions pack runs as a
validation plugin: an unacknowledged finding fails the synth.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from aws_cdk import App, Validations
from cdk_nag import AwsSolutionsChecks

from cronledger_infra.props import CronledgerProps
from cronledger_infra.stack import PROJECT_ROOT, CronledgerStack

STACK_NAME = "Cronledger"


def build_app(context: Mapping[str, Any] | None = None, outdir: str | None = None) -> App:
    """The app with its stack; `context` adds to (and overrides) cdk.json's context."""
    cdk_json = json.loads((PROJECT_ROOT / "cdk.json").read_text())
    app = App(context={**cdk_json.get("context", {}), **(context or {})}, outdir=outdir)
    props = CronledgerProps.from_context(app.node.get_all_context())
    CronledgerStack(
        app,
        STACK_NAME,
        props=props,
        description="cronledger: a durable serverless cron scheduler",
    )
    Validations.of(app).add_plugins(AwsSolutionsChecks(app, verbose=True))
    return app
