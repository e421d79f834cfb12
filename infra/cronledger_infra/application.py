"""The CDK app: cdk.json's context, the props it yields, one stack, and cdk-nag watching it.

The stack is named after the installation (`-c cronledger:name=…`, default `Cronledger`).

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

from aws_cdk import App, Validations, aws_lambda as lambda_
from cdk_nag import AwsSolutionsChecks

from cronledger_infra.props import CronledgerProps
from cronledger_infra.stack import PROJECT_ROOT, CronledgerStack


def build_app(
    context: Mapping[str, Any] | None = None,
    outdir: str | None = None,
    *,
    code: lambda_.Code | None = None,
) -> App:
    """The app with its stack; `context` adds to (and overrides) cdk.json's context. `code`
    replaces the bundled asset (the tests' source-only one): a Python argument, so nothing on
    the `cdk` command line can deploy functions without their dependencies."""
    app = new_app(context, outdir)
    props = CronledgerProps.from_context(app.node.get_all_context())
    installation(app, props, code=code)
    Validations.of(app).add_plugins(AwsSolutionsChecks(app, verbose=True))
    return app


def new_app(context: Mapping[str, Any] | None = None, outdir: str | None = None) -> App:
    """An app with cdk.json's context (its feature flags decide, e.g., that the proxy's name
    is derived from the stack's), plus `context`."""
    cdk_json = json.loads((PROJECT_ROOT / "cdk.json").read_text())
    return App(context={**cdk_json.get("context", {}), **(context or {})}, outdir=outdir)


def installation(
    app: App, props: CronledgerProps, *, code: lambda_.Code | None = None
) -> CronledgerStack:
    """One installation's stack, named after it."""
    return CronledgerStack(
        app,
        props.name,
        props=props,
        code=code,
        description=f"cronledger {props.name}: a durable serverless cron scheduler",
    )
