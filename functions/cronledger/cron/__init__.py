"""The pure schedule compiler: `transport_config` in, an immutable `Schedule` out.

Datetimes in and out are aware UTC; a naive one is refused.
"""

from cronledger.cron.compiled import (
    WALK_LIMIT,
    PassPlan,
    RetryPolicy,
    Schedule,
    SkipSummary,
    is_misfired,
    kept_misfires,
)
from cronledger.cron.compiler import ScheduleInvalid, compile_schedule
from cronledger.errors import FieldError

__all__ = [
    "WALK_LIMIT",
    "FieldError",
    "PassPlan",
    "RetryPolicy",
    "Schedule",
    "ScheduleInvalid",
    "SkipSummary",
    "compile_schedule",
    "is_misfired",
    "kept_misfires",
]
