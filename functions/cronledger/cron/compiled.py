"""A compiled `Schedule`: when it fires, and what one reconcile pass should write.

Pure: the caller passes `now` (the database's clock) and gets a plan, so every misfire rule
(docs/guarantees.md#misfire) can be tested exhaustively and two reconcilers planning one pass
agree row for row. Every answer keeps to the schedule's `starts_at`/`ends_at` bounds, so
reconcile, preview, status and backfill agree without re-checking them. When the late instants
of a pass alone exceed `WALK_LIMIT`, its next cursor is the first one not kept: none is lost.
"""

from __future__ import annotations

import hashlib
import json
from bisect import bisect_left
from collections.abc import Hashable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Final, Literal

from cronledger.alerts import AlertRules
from cronledger.cron.walk import (
    EPOCH,
    FIRST_SECOND,
    LAST_SECOND,
    Bounded,
    Survey,
    ceil_seconds,
    floor_seconds,
    instant,
)
from cronledger.instants import require_utc, to_rfc3339
from cronledger.retry import RetryPolicy as RetryPolicy  # its home; schedules carry one

MisfirePolicy = Literal["skip", "latest", "catch_up"]
ConcurrencyPolicy = Literal["allow", "forbid", "queue_one", "replace"]

WALK_LIMIT: Final = 200_000
"""The most instants one walk returns, so a pathological window cannot hang a pass."""
FEW_DUE: Final = 8
"""Up to this many due instants, a plan lists them in the walk that finds the next one."""


def is_misfired(due_at: datetime, now: datetime, grace: timedelta) -> bool:
    """Whether an instant due at `due_at` (jitter included) is misfired at `now`, not merely
    late: the one rule reconcile plans by and an attempt is judged by at start."""
    return due_at < now - grace


def jitter(channel_id: str, scheduled_for: datetime, jitter_secs: int) -> timedelta:
    """How long after `scheduled_for` its row is due: whole milliseconds in `[0, jitter_secs)`,
    from a hash of channel and instant (never `hash()`, which differs between processes).
    It is shorter than the schedule's shortest gap (`config`), so due times keep its order."""
    if jitter_secs <= 0:
        return timedelta(0)
    if scheduled_for.tzinfo is None:
        raise ValueError(f"scheduled_for is naive ({scheduled_for.isoformat()})")
    key = f"{channel_id}\n{int(scheduled_for.timestamp() // 1)}".encode()
    digest = hashlib.blake2b(key, digest_size=8, person=b"cronledger.jit").digest()
    return timedelta(milliseconds=int.from_bytes(digest, "big") % (jitter_secs * 1000))


def _require_count(value: int, least: int, requirement: str) -> None:
    """Refuse a `value` that is not an integer (a boolean is not one) of at least `least`."""
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(f"{requirement}, got {value!r}")


def kept_misfires(policy: MisfirePolicy, count: int, catch_up: int) -> range:
    """Which of `count` misfired instants (oldest at 0) `policy` runs: `skip` none, `latest`
    the newest, `catch_up` the oldest `catch_up`. Always a prefix or a suffix."""
    if count <= 0 or policy == "skip":
        return range(0)
    if policy == "latest":
        return range(count - 1, count)
    return range(min(count, catch_up))


@dataclass(frozen=True, slots=True)
class SkipSummary:
    """The misfired instants a pass dropped, as one `skipped_misfire` row carried by `newest`."""

    oldest: datetime
    newest: datetime
    count: int
    reason: str


@dataclass(frozen=True, slots=True)
class PassPlan:
    """What one reconcile pass writes: rows to insert, one summary, where the cursor goes."""

    materialise: list[datetime]
    skipped: SkipSummary | None
    next_cursor: datetime | None


@dataclass(frozen=True, eq=False)
class Schedule:
    """A validated schedule, built by `compile_schedule`; immutable, so threads share it."""

    channel_id: str
    #: The cron expression; None for a one-time schedule.
    expression: str | None
    #: A one-time schedule's local date-time (`YYYY-MM-DDTHH:MM:SS` in `timezone`), or None.
    at: str | None
    timezone: str
    payload_json: str
    misfire_policy: MisfirePolicy
    max_catch_up: int
    concurrency_policy: ConcurrencyPolicy
    concurrency_key: str
    slots: int
    retry: RetryPolicy
    #: Instants before `starts_at` or after `ends_at` never fire (None: unbounded).
    starts_at: datetime | None
    ends_at: datetime | None
    jitter_secs: int
    config_hash: str
    _calendar: Bounded = field(repr=False)
    #: Who is told of what (not in `config_hash`: it never moves when the channel fires).
    alerts: AlertRules = field(default_factory=AlertRules)

    @property
    def payload(self) -> dict[str, Any]:
        """A fresh copy each time: a target that edits its payload cannot edit the schedule."""
        copy: dict[str, Any] = json.loads(self.payload_json)
        return copy

    @property
    def singleton_key(self) -> str | None:
        """The lock name under `forbid`, `queue_one` and `replace`; `None` when runs may
        overlap."""
        return None if self.concurrency_policy == "allow" else self.concurrency_key

    def due_at(self, instant: datetime) -> datetime:
        """When the row of `instant` becomes claimable: the instant plus its jitter."""
        return instant + jitter(self.channel_id, instant, self.jitter_secs)

    def fires_in(self, start: datetime, end: datetime, cap: int = WALK_LIMIT) -> list[datetime]:
        """Every instant in `[start, end]` (both ends inclusive), ascending, at most
        `min(cap, WALK_LIMIT)` of them, earliest first. An inverted window is empty."""
        lo = ceil_seconds(require_utc(start, "start"))
        hi = floor_seconds(require_utc(end, "end"))
        _require_count(cap, 0, "cap must be a non-negative integer")
        return [instant(s) for s in self._calendar.instants(lo, hi, min(cap, WALK_LIMIT))]

    def next_after(self, t: datetime) -> datetime | None:
        """The first instant strictly after `t`; `None` if the schedule never fires again."""
        first = self._calendar.first(floor_seconds(require_utc(t, "t")) + 1, LAST_SECOND)
        return None if first is None else instant(first)

    def plan_pass(
        self,
        cursor: datetime,
        now: datetime,
        grace: timedelta,
        instance_max_catch_up: int,
        shared: dict[Hashable, PassPlan] | None = None,
    ) -> PassPlan:
        """Plan the due instants in `[cursor, now]` by the module's rules. `shared`: the plans
        of one pass so far. A plan with no misfired instant depends only on the calendar and
        the window, so channels of one calendar due from one cursor share it (not to be
        changed)."""
        key = (self._calendar, cursor, now, grace, instance_max_catch_up)
        if shared is not None and (plan := shared.get(key)) is not None:
            return plan  # made from these very arguments, which passed every check then
        cursor_s = ceil_seconds(require_utc(cursor, "cursor"))
        now = require_utc(now, "now")
        if not isinstance(grace, timedelta) or grace < timedelta(0):
            raise ValueError(f"grace must be a non-negative timedelta, got {grace!r}")
        _require_count(instance_max_catch_up, 1, "instance_max_catch_up must be an integer >= 1")
        now_s = floor_seconds(now)
        late_cutoff = ceil_seconds(now - grace) if grace < now - EPOCH else FIRST_SECOND
        catch_up = min(self.max_catch_up, instance_max_catch_up)

        # Most passes find a few instants due: one walk lists them and the next one.
        few = self._calendar.instants(cursor_s, LAST_SECOND, FEW_DUE + 1)
        due = [s for s in few if s <= now_s]
        if len(due) > FEW_DUE:
            return self._plan_outage(cursor_s, now, grace, late_cutoff, catch_up)
        split = bisect_left(due, late_cutoff)
        head = due[: min(split, self._listed(catch_up))]
        misfired = Survey(split, head, due[max(0, split - 3) : split])
        misfired, still_late = self._late_by_jitter(misfired, late_cutoff, now, grace)
        late = due[split:] if still_late is None else [still_late, *due[split:]]
        next_cursor = few[len(due)] if len(few) > len(due) else None
        plan = self._plan(misfired, catch_up, late, next_cursor)
        if shared is not None and not split:  # none misfired: no policy, no jitter in it
            shared[key] = plan
        return plan

    def _plan_outage(
        self, cursor_s: int, now: datetime, grace: timedelta, late_cutoff: int, catch_up: int
    ) -> PassPlan:
        """`plan_pass` after an outage: what was missed is counted without listing it."""
        now_s = floor_seconds(now)
        late_from = max(cursor_s, late_cutoff)
        misfired = self._calendar.survey(
            cursor_s, min(late_from - 1, now_s), self._listed(catch_up)
        )
        misfired, still_late = self._late_by_jitter(misfired, late_cutoff, now, grace)
        late_from = late_from if still_late is None else still_late
        # Asking for one instant more than there is room for tells a truncated walk apart.
        room = WALK_LIMIT - len(kept_misfires(self.misfire_policy, misfired.count, catch_up))
        late = self._calendar.instants(late_from, now_s, room + 1)
        if len(late) > room:
            return self._plan(misfired, catch_up, late[:room], late[room])
        return self._plan(
            misfired, catch_up, late, self._calendar.first(max(now_s + 1, cursor_s), LAST_SECOND)
        )

    def _listed(self, catch_up: int) -> int:
        """How many of the oldest misfired instants a plan lists: those `catch_up` keeps, and
        the first one dropped, which the summary names."""
        return (catch_up if self.misfire_policy == "catch_up" else 0) + 1

    def _late_by_jitter(
        self, misfired: Survey, late_cutoff: int, now: datetime, grace: timedelta
    ) -> tuple[Survey, int | None]:
        """`misfired` without its newest instant, and that instant, if its jitter carries its
        row past the cutoff; only that one can be, since the jitter is shorter than every gap.
        Else `misfired` as it is, and None."""
        if not self.jitter_secs or not misfired.count:
            return misfired, None
        newest = misfired.tail[-1]
        if newest < late_cutoff - self.jitter_secs:
            return misfired, None
        if is_misfired(self.due_at(instant(newest)), now, grace):
            return misfired, None
        return misfired.without_newest(), newest

    def _plan(
        self, misfired: Survey, catch_up: int, late: list[int], next_cursor: int | None
    ) -> PassPlan:
        """What the policy keeps of the misfired, the one summary of the rest, and the late."""
        keep = kept_misfires(self.misfire_policy, misfired.count, catch_up)
        kept = [misfired.at(i) for i in keep]
        skipped = None
        if misfired.count > len(keep):
            # What a policy keeps is a prefix or a suffix: the rest is one contiguous run.
            first, last = (
                (keep.stop, misfired.count - 1) if keep.start == 0 else (0, keep.start - 1)
            )
            oldest, newest = instant(misfired.at(first)), instant(misfired.at(last))
            count = misfired.count - len(keep)
            skipped = SkipSummary(
                oldest=oldest,
                newest=newest,
                count=count,
                reason=(
                    f"skipped {count} missed occurrence(s) between {to_rfc3339(oldest)} and "
                    f'{to_rfc3339(newest)} (misfire_policy "{self.misfire_policy}")'
                ),
            )
        return PassPlan(
            materialise=[instant(s) for s in kept + late],
            skipped=skipped,
            next_cursor=None if next_cursor is None else instant(next_cursor),
        )
