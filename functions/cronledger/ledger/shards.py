"""Shards of a reconcile pass: disjoint ranges of a stable hash of `channel_id`.

A channel's key is the first 32 bits of the MD5 of its id, the same number in Python, in
PostgreSQL (`md5`, read as hex) and in SQLite (a function registered on each connection), so a
shard's read names the same channels whichever side computes it. Shard `index` of `count`
takes the keys in `[index * 2**32 // count, (index + 1) * 2**32 // count)`: for any count the
shards are disjoint and cover every key, so passes split differently (two coordinators, or a
count that changed between ticks) still each write a channel at most once per pass, and the
writes are conditional anyway. MD5 here is a spreading hash, not a security measure.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import sqlalchemy as sa

#: Keys run over [0, KEY_SPACE).
KEY_SPACE = 2**32
#: SQLite's name for `shard_key`, registered on every connection (`backend.py`).
SQLITE_FUNCTION = "cronledger_shard_key"


def shard_key(channel_id: str) -> int:
    """The channel's place in the key space, as both databases compute it."""
    return int(hashlib.md5(channel_id.encode(), usedforsecurity=False).hexdigest()[:8], 16)


def shard_key_sql(column: sa.ColumnElement[str], *, postgres: bool) -> sa.ColumnElement[int]:
    """`shard_key` of `column`, computed by the database. On PostgreSQL it is written out as
    text, matching the expression index on due cursors (migration 0009), which a bound
    parameter in its place would not."""
    if postgres:
        return sa.literal_column(
            f"(('x' || left(md5({column.table.name}.{column.name}), 8))::bit(32)::bigint)",
            sa.BigInteger(),
        )
    return sa.func.cronledger_shard_key(column, type_=sa.BigInteger())


@dataclass(frozen=True, slots=True)
class Shard:
    """Shard `index` of `count` (0 ≤ index < count); `Shard(0, 1)` is every channel."""

    index: int = 0
    count: int = 1

    def __post_init__(self) -> None:
        if not 0 <= self.index < self.count:
            raise ValueError(f"shard {self.index} of {self.count}: need 0 <= index < count")

    @property
    def low(self) -> int:
        return self.index * KEY_SPACE // self.count

    @property
    def high(self) -> int:
        """The first key past the shard."""
        return (self.index + 1) * KEY_SPACE // self.count

    def condition(self, column: sa.ColumnElement[str], *, postgres: bool) -> sa.ColumnElement[bool]:
        """The channels of `column` this shard takes. On PostgreSQL the whole is a range too:
        it names the key the index on due cursors holds, so that index, already in the
        pass's order, is the one read. On SQLite the whole is every row."""
        if self.count == 1 and not postgres:
            return sa.true()
        key = shard_key_sql(column, postgres=postgres)
        return sa.and_(key >= self.low, key < self.high)

    @staticmethod
    def split(count: int) -> list[Shard]:
        return [Shard(i, count) for i in range(count)]


WHOLE = Shard()
