"""cdk-nag acknowledgements, made next to the resource they excuse and always with a reason.

A reason says why the finding does not apply here or what compensates for it; the tests read
every acknowledgement back from the template and refuse one without a real sentence.
"""

from __future__ import annotations

from collections.abc import Mapping

from aws_cdk import Acknowledgment, Validations
from constructs import IConstruct


def acknowledge(scope: IConstruct, reasons: Mapping[str, str]) -> None:
    """Acknowledge each rule id (`AwsSolutions-IAM5[Resource::*]`) on `scope` with its reason."""
    Validations.of(scope).acknowledge(
        *(Acknowledgment(id=rule, reason=reason) for rule, reason in reasons.items())
    )
