"""The VPC: nothing in it has a public address, and AWS APIs are reached without the internet.

Two AZs, three subnet groups: `app` (the functions, the endpoints), `data` (the database and
its proxy: isolated, no route out) and, only when NAT gateways are wanted, `public` for them.
NAT is what lets an `http` target on the internet be reached; with `nat_gateways=0` the `app`
subnets are isolated too and only AWS services with an interface endpoint are reachable. The
endpoints are for the services the functions (and the proxy, for its secret) call, so that
traffic stays inside the VPC either way (and, without NAT, so that it leaves at all: an `ssm`
endpoint for `secret_headers` naming SSM parameters, `sync-states` for Express machines run
with `wait`); the `lean` profile puts them in one AZ only (an
endpoint is billed per AZ; the other AZ's functions reach it across). Rejected traffic is
flow-logged.
"""

from __future__ import annotations

from aws_cdk import aws_ec2 as ec2, aws_logs as logs
from constructs import Construct

#: The VPC's range unless the operator chooses one (`vpc_cidr`).
DEFAULT_CIDR = "10.40.0.0/16"
_ENDPOINTS = {
    "secretsmanager": ec2.InterfaceVpcEndpointAwsService.SECRETS_MANAGER,
    "lambda": ec2.InterfaceVpcEndpointAwsService.LAMBDA_,
    "states": ec2.InterfaceVpcEndpointAwsService.STEP_FUNCTIONS,
    "sqs": ec2.InterfaceVpcEndpointAwsService.SQS,
    "events": ec2.InterfaceVpcEndpointAwsService.EVENTBRIDGE,
    # Only when asked for: what some targets need without NAT (profiles.OPTIONAL_ENDPOINTS).
    "ssm": ec2.InterfaceVpcEndpointAwsService.SSM,
    "sync-states": ec2.InterfaceVpcEndpointAwsService.STEP_FUNCTIONS_SYNC,
    "xray": ec2.InterfaceVpcEndpointAwsService.XRAY,
}


class Network(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cidr: str,
        nat_gateways: int,
        endpoints: tuple[str, ...],
        endpoint_azs: int,
        log_retention: logs.RetentionDays,
    ) -> None:
        super().__init__(scope, construct_id)
        app_type = (
            ec2.SubnetType.PRIVATE_WITH_EGRESS if nat_gateways else ec2.SubnetType.PRIVATE_ISOLATED
        )
        subnets = [
            ec2.SubnetConfiguration(name="app", subnet_type=app_type, cidr_mask=22),
            ec2.SubnetConfiguration(
                name="data", subnet_type=ec2.SubnetType.PRIVATE_ISOLATED, cidr_mask=24
            ),
        ]
        if nat_gateways:
            subnets.append(
                ec2.SubnetConfiguration(
                    name="public", subnet_type=ec2.SubnetType.PUBLIC, cidr_mask=24
                )
            )
        self.vpc = ec2.Vpc(
            self,
            "Vpc",
            ip_addresses=ec2.IpAddresses.cidr(cidr),
            max_azs=2,
            nat_gateways=nat_gateways,
            subnet_configuration=subnets,
        )
        self.app_subnets = ec2.SubnetSelection(subnet_group_name="app")
        self.data_subnets = ec2.SubnetSelection(subnet_group_name="data")

        endpoint_security = ec2.SecurityGroup(
            self,
            "EndpointSecurity",
            vpc=self.vpc,
            description="HTTPS from inside the VPC to the AWS service endpoints",
            allow_all_outbound=False,
        )
        endpoint_security.add_ingress_rule(ec2.Peer.ipv4(cidr), ec2.Port.tcp(443))
        app = self.vpc.select_subnets(subnet_group_name="app").subnets
        endpoint_subnets = ec2.SubnetSelection(subnets=app[:endpoint_azs])
        for name in endpoints:
            self.vpc.add_interface_endpoint(
                "".join(part.capitalize() for part in name.split("-")) + "Endpoint",
                service=_ENDPOINTS[name],
                subnets=endpoint_subnets,
                private_dns_enabled=True,
                security_groups=[endpoint_security],
                open=False,
            )

        flow_logs = logs.LogGroup(self, "FlowLogs", retention=log_retention)
        self.vpc.add_flow_log(
            "RejectedTraffic",
            destination=ec2.FlowLogDestination.to_cloud_watch_logs(flow_logs),
            traffic_type=ec2.FlowLogTrafficType.REJECT,
        )
