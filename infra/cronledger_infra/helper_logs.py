"""A log group with the installation's retention for each function CDK adds on its own (the
migration trigger's provider, the log-retention helper, the default security group's
restrictor), which would otherwise log to a group Lambda creates on first use and keeps
forever. Each is the stack's, so it goes with the stack: those functions only log what they
did to deploy it.

It runs last, once every construct has added its helpers, and looks only at functions CDK made
as raw resources: cronledger's own and CDK's SDK-call function have a log group already.
"""

from __future__ import annotations

from aws_cdk import CfnResource, RemovalPolicy, Stack, aws_logs as logs
from constructs import Construct

LAMBDA_FUNCTION = "AWS::Lambda::Function"


class HelperLogs(Construct):
    def __init__(
        self, scope: Construct, construct_id: str, *, log_retention: logs.RetentionDays
    ) -> None:
        super().__init__(scope, construct_id)
        helpers = [
            c
            for c in Stack.of(self).node.find_all()
            if type(c) is CfnResource and c.cfn_resource_type == LAMBDA_FUNCTION
        ]
        for helper in helpers:
            parent = helper.node.scope
            assert parent is not None
            group = logs.LogGroup(
                self,
                "".join(ch for ch in parent.node.id if ch.isalnum()),
                retention=log_retention,
                removal_policy=RemovalPolicy.DESTROY,
            )
            helper.add_property_override("LoggingConfig.LogGroup", group.log_group_name)
