"""cronledger: a durable cron scheduler that keeps one ledger row for every scheduled instant."""

__version__ = "0.1.0"

from cronledger.declare import schedule

__all__ = ["__version__", "schedule"]
