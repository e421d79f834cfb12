"""Identifiers. Occurrence ids are UUIDv7: time-ordered, so the ledger's primary key and
its newest-first listing agree and a page of recent occurrences is an index range scan."""

from __future__ import annotations

import os
import threading
import time
import uuid

#: Random bytes drawn from the OS at a time (eight an id): a system call per id would cost
#: more than the rest of it.
RANDOM_AHEAD = 4096

_lock = threading.Lock()
_last_ms = 0
_counter = 0
_random = b""
_random_at = 0


def uuid7() -> uuid.UUID:
    """A RFC 9562 version-7 UUID, monotonic within this process (a 12-bit counter
    orders ids minted in the same millisecond)."""
    return uuid.UUID(int=_uuid7_int())


def _uuid7_int() -> int:
    global _last_ms, _counter, _random, _random_at
    with _lock:
        ms = time.time_ns() // 1_000_000
        if ms <= _last_ms:
            ms = _last_ms
            _counter += 1
            if _counter > 0xFFF:
                ms += 1
                _counter = 0
        else:
            _counter = 0
        _last_ms = ms
        counter = _counter
        if _random_at >= len(_random):
            _random, _random_at = os.urandom(RANDOM_AHEAD), 0
        drawn = _random[_random_at : _random_at + 8]
        _random_at += 8
    rand = int.from_bytes(drawn, "big") & ((1 << 62) - 1)
    # 48 bits of milliseconds, version 7, the 12-bit counter, variant 0b10, 62 random bits.
    return (ms & ((1 << 48) - 1)) << 80 | 0x7 << 76 | counter << 64 | 0b10 << 62 | rand


def _start_afresh_in_child() -> None:
    """A forked child gets its own lock (one held at the fork would stay held) and its own
    random bytes (the parent's leftovers would repeat its ids)."""
    global _lock, _random, _random_at
    _lock = threading.Lock()
    _random, _random_at = b"", 0


os.register_at_fork(after_in_child=_start_afresh_in_child)


def new_occurrence_id() -> str:
    """`str(uuid7())`, formatted straight from the number: a pass mints one per row."""
    h = f"{_uuid7_int():032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def new_claimant_id() -> str:
    """A claimant is minted per dispatch, so a re-claim by the same process is still a new holder."""
    return f"claim-{uuid.uuid4().hex}"
