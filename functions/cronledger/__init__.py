"""cronledger: a durable cron scheduler that keeps one ledger row for every scheduled instant."""

__version__ = "0.1.0"
