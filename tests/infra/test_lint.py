"""The template passes the two reviewers that need no AWS account: cfn-lint and cdk-nag.

cfn-lint must report no error (warnings are CDK's own redundant DependsOn). cdk-nag's
AwsSolutions pack runs inside the synth as a validation plugin; it must find nothing that is
not acknowledged, and every acknowledgement must say why in a real sentence.
"""

from __future__ import annotations

import json

import pytest
from aws_cdk import Validations
from cfnlint.api import ManualArgs, lint

from tests.infra.synthesis import Synthesized

pytestmark = pytest.mark.xdist_group(name="infra")


def test_cfn_lint_reports_no_errors(synthesized: Synthesized):
    matches = lint(
        json.dumps(synthesized.template), config=ManualArgs(regions=["us-east-1", "eu-west-1"])
    )

    errors = [str(match) for match in matches if match.rule.id.startswith("E")]
    assert errors == []


def test_cdk_nag_finds_nothing_unacknowledged(synthesized: Synthesized):
    report = json.loads((synthesized.outdir / "validation-report.json").read_text())
    violations = [
        (violation["ruleName"], construct["constructPath"])
        for plugin in report["pluginReports"]
        for violation in plugin.get("violations", [])
        for construct in violation["violatingConstructs"]
    ]

    assert synthesized.nag_failure is None, synthesized.nag_failure
    assert violations == []


def test_every_nag_acknowledgement_gives_its_reason(synthesized: Synthesized):
    acknowledged = {
        (construct.node.path, rule): reason
        for construct in synthesized.app.node.find_all()
        for entry in construct.node.metadata
        if entry.type == Validations.ACKNOWLEDGED_RULES_METADATA_KEY
        for rule, reason in entry.data.items()
        if "AwsSolutions-" in rule
    }

    assert acknowledged, "the stack acknowledges some findings, so this test can see a bad one"
    for (path, rule), reason in acknowledged.items():
        assert len(reason.split()) >= 8 and reason.rstrip().endswith("."), (path, rule, reason)
