"""How many attempts an occurrence gets in all, and how long it waits between them.

A leaf module, because the compiler fills the default into a channel's policy and the ledger
writes it for a row that names none: one constant, so the two cannot disagree.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Final

#: Attempts in all when a channel's `retry` names none.
DEFAULT_MAX_ATTEMPTS: Final = 3


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """The wait before attempt `n + 1` is uniform in `[backoff_secs, ceiling]`, the ceiling
    doubling per attempt up to `max_backoff_secs`: retries of many failures spread out, and
    none comes sooner than `backoff_secs`."""

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
