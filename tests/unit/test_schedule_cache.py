"""The schedule cache compiles a document once for every channel that shares it, gives each
channel its own id (and its own default concurrency key), and when full forgets the least
recently used document only, never all of them."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from cronledger.cron import compiler
from cronledger.ledger import DueChannel
from cronledger.schedule_cache import ScheduleCache

EVERY_MINUTE = {"schedule": "0 * * * * *", "timezone": "Europe/Paris"}


def due(channel_id: str, config: dict[str, Any] = EVERY_MINUTE) -> DueChannel:
    return DueChannel(channel_id, channel_id, 1, {}, json.dumps(config))


def counting_compiles(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    compiled: list[str] = []
    real = compiler.compile_schedule

    def compile_schedule(config: Any, channel_id: str, **kw: Any) -> Any:
        compiled.append(json.dumps(config, sort_keys=True))
        return real(config, channel_id, **kw)

    monkeypatch.setattr("cronledger.schedule_cache.compile_schedule", compile_schedule)
    return compiled


def test_channels_sharing_a_document_share_one_compile_and_keep_their_own_ids(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    compiled = counting_compiles(monkeypatch)
    cache = ScheduleCache()

    schedules = [cache.get(due(f"ch-{n}")) for n in range(1000)]

    assert len(compiled) == 1
    assert [s.channel_id for s in schedules] == [f"ch-{n}" for n in range(1000)]
    assert {s.config_hash for s in schedules} == {schedules[0].config_hash}
    # the default concurrency key is the channel's own id, as if compiled for it alone
    forbid = {**EVERY_MINUTE, "concurrency": {"policy": "forbid"}}
    assert cache.get(due("a", forbid)).singleton_key == "a"
    assert cache.get(due("b", forbid)).singleton_key == "b"
    keyed = {**EVERY_MINUTE, "concurrency": {"policy": "forbid", "key": "billing"}}
    assert cache.get(due("a", keyed)).singleton_key == "billing"
    assert cache.get(due("b", keyed)).singleton_key == "billing"
    # and its jitter is its own
    jittered = {**EVERY_MINUTE, "jitter_secs": 30}
    instant = schedules[0].next_after(datetime(2026, 1, 1, tzinfo=UTC))
    assert instant is not None
    spread = {cache.get(due(f"j-{n}", jittered)).due_at(instant) for n in range(20)}
    assert len(spread) > 1


def test_a_full_cache_forgets_the_least_recently_used_document_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    compiled = counting_compiles(monkeypatch)
    cache = ScheduleCache(capacity=3)
    documents = [{**EVERY_MINUTE, "payload": {"n": n}} for n in range(4)]
    for config in documents[:3]:
        cache.get(due("x", config))
    cache.get(due("x", documents[0]))  # used again: now the most recent

    cache.get(due("x", documents[3]))  # full: the least recent (1) goes
    compiled.clear()
    for config in (documents[0], documents[2], documents[3]):
        cache.get(due("x", config))

    assert compiled == [], "the other documents stayed compiled"
    assert len(cache._compiled) == 3
    cache.get(due("x", documents[1]))
    assert len(compiled) == 1
