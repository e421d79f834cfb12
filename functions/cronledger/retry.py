"""How many attempts an occurrence gets in all, and how long it waits between them.

A leaf module (nothing but the standard library) because both sides need the default: the
schedule compiler fills it into a channel's policy, and the ledger writes it for a row or a
stored document that names none. One constant, so the two cannot disagree.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Final

#: Attempts in all when a channel's `retry` names none.
DEFAULT_MAX_ATTEMPTS: Final = 3


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How many attempts one occurrence gets in all, and how long it waits between them.

    The wait before attempt `n + 1` is drawn uniformly from `[backoff_secs, ceiling]`, where
    the ceiling doubles per attempt from `backoff_secs` up to `max_backoff_secs`: full jitter
    above a floor, so retries of many failed occurrences spread out, yet no retry comes
    sooner than `backoff_secs` after the failure."""

    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    backoff_secs: int = 10
    max_backoff_secs: int = 300

    def ceiling_secs(self, attempt: int) -> float:
        """The longest wait after failed attempt `attempt` (1-based)."""
        doubled = self.backoff_secs * 2.0 ** min(max(attempt - 1, 0), 32)
        return float(max(self.backoff_secs, min(self.max_backoff_secs, doubled)))

    def backoff_secs_after(self, attempt: int, rng: random.Random | None = None) -> float:
        """A jittered wait after failed attempt `attempt`, in `[backoff_secs, ceiling]`."""
        return (rng or random).uniform(self.backoff_secs, self.ceiling_secs(attempt))
