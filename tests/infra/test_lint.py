"""The template passes the two reviewers that need no AWS account: cfn-lint and cdk-nag.

cfn-lint must report no error (warnings are CDK's own redundant DependsOn). cdk-nag's
AwsSolutions pack runs inside the synth as a validation plugin; it must find nothing that is
not acknowledged, and every acknowledgement must say why in a real sentence. The report also
carries the synth's own warnings; the one a synth without anybody to page must give is expected
(test_alarms.py), any other is a finding.
"""

from __future__ import annotations

import json

import pytest
from aws_cdk import Validations
from cfnlint.api import ManualArgs, lint

from tests.infra.synthesis import Synthesized

pytestmark = pytest.mark.xdist_group(name="infra")

#: The warning every synth without alarm_email or alarm_topic_arn gives, on purpose.
NOBODY_PAGED = "Annotation::cronledger:alarms-unheard"


def findings(synthesized: Synthesized) -> list[tuple[str, str]]:
    """(rule, construct path) of each finding in the validation report, the expected warning
    aside."""
    report = json.loads((synthesized.outdir / "validation-report.json").read_text())
    return [
        (violation["ruleName"], construct["constructPath"])
        for plugin in report["pluginReports"]
        for violation in plugin.get("violations", [])
        if violation["ruleName"] != NOBODY_PAGED
        for construct in violation["violatingConstructs"]
    ]


def test_cfn_lint_reports_no_errors(synthesized: Synthesized):
    matches = lint(
        json.dumps(synthesized.template), config=ManualArgs(regions=["us-east-1", "eu-west-1"])
    )

    errors = [str(match) for match in matches if match.rule.id.startswith("E")]
    assert errors == []


def test_cdk_nag_finds_nothing_unacknowledged(synthesized: Synthesized):
    assert synthesized.nag_failure is None, synthesized.nag_failure
    assert findings(synthesized) == []


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
