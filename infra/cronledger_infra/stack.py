"""The cronledger stack: one `Cronledger` installation and nothing of its own.

The installation is the stack's `Default` child, which CDK leaves out of logical IDs, so every
resource keeps the logical ID it had when the stack held the constructs itself: an upgrade
from such a stack updates its resources in place (the database and its secret above all)
instead of replacing them. The stack carries the installation tag too, for the helpers CDK
puts at the stack's root (the log-retention and SDK-call functions).
"""

from __future__ import annotations

from typing import Any

from aws_cdk import Stack, Tags, aws_ec2 as ec2, aws_lambda as lambda_
from constructs import Construct

from cronledger_infra.cronledger import INSTALLATION_TAG, PROJECT_ROOT, Cronledger
from cronledger_infra.props import CronledgerProps

__all__ = ["INSTALLATION_TAG", "PROJECT_ROOT", "CronledgerStack"]


class CronledgerStack(Stack):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        props: CronledgerProps,
        code: lambda_.Code | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        # A proxy's target group takes no tags, though CDK would give it some.
        Tags.of(self).add(
            INSTALLATION_TAG, props.name, exclude_resource_types=["AWS::RDS::DBProxyTargetGroup"]
        )
        self.installation = Cronledger(self, "Default", props=props, code=code)
        _keep_descriptions_of_paths(self.installation)


def _keep_descriptions_of_paths(installation: Cronledger) -> None:
    """Security groups CDK describes by their construct path (the secret rotation's) keep
    the description they had without the `Default` step: a changed description would replace
    the group on upgrade."""
    for construct in installation.node.find_all():
        if isinstance(construct, ec2.CfnSecurityGroup):
            path = construct.node.scope.node.path if construct.node.scope else ""
            if construct.group_description == path:
                construct.group_description = path.replace("/Default/", "/", 1)
