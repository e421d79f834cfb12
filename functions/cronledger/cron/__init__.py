"""The pure schedule compiler: `transport_config` in, an immutable `Schedule` out.

`compile_schedule` validates a document and reports every problem at once (`compiler`); a
`Schedule` says when it fires and plans a reconcile pass with no database and no clock of its
own (`compiled`); the walk in a zone, DST rules included, is `walk`. Datetimes in and out are
aware UTC; a naive one is refused.
"""

from cronledger.cron.compiled import (
    WALK_LIMIT,
    ConcurrencyPolicy,
    MisfirePolicy,
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
    "ConcurrencyPolicy",
    "FieldError",
    "MisfirePolicy",
    "PassPlan",
    "RetryPolicy",
    "Schedule",
    "ScheduleInvalid",
    "SkipSummary",
    "compile_schedule",
    "is_misfired",
    "kept_misfires",
]
