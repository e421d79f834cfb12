"""cronledger's AWS infrastructure as a CDK construct library: `Cronledger`, one installation
to put in any CDK app (with `add_channel` and `schedule` for the channels it runs), and the
stack that holds one on its own (`infra/app.py`)."""

from cronledger_infra.channels import Channel
from cronledger_infra.cronledger import Cronledger
from cronledger_infra.props import CronledgerProps

__all__ = ["Channel", "Cronledger", "CronledgerProps"]
