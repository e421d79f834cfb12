"""The pure schedule compiler: `transport_config` in, an immutable `Schedule` out.

Datetimes in and out are aware UTC; a naive one is refused.
"""

from cronledger.cron.compiled import (
    WALK_LIMIT as WALK_LIMIT,
    PassPlan as PassPlan,
    RetryPolicy as RetryPolicy,
    Schedule as Schedule,
    SkipSummary as SkipSummary,
    is_misfired as is_misfired,
    kept_misfires as kept_misfires,
)
from cronledger.cron.compiler import (
    ScheduleInvalid as ScheduleInvalid,
    compile_schedule as compile_schedule,
)
from cronledger.errors import FieldError as FieldError
