"""How a batch's writes are grouped: a group is written once every attempt that may still
join it has joined, once it is full, or when its wait runs out, and at once when an end's
lease margin would otherwise pass; each caller gets its own answer, or the write's error."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from cronledger.execute import _Together
from cronledger.pacing import Clock


class Writes:
    def __init__(self, fail: bool = False) -> None:
        self.groups: list[list[int]] = []
        self.fail = fail

    def __call__(self, requests: list[int]) -> list[int]:
        self.groups.append(list(requests))
        if self.fail:
            raise ConnectionError("database away")
        return [r * 10 for r in requests]


def test_a_group_is_written_once_every_party_has_called_or_left() -> None:
    writes = Writes()
    together = _Together(writes, parties=4, clock=Clock(), wait_secs=3600)
    together.leave()  # one attempt that will never call
    with ThreadPoolExecutor(3) as pool:
        answers = list(pool.map(together.call, [1, 2, 3]))
    assert answers == [10, 20, 30]
    assert [sorted(g) for g in writes.groups] == [[1, 2, 3]]


def test_a_full_group_is_written_without_waiting_for_the_rest() -> None:
    writes = Writes()
    together = _Together(writes, parties=10, clock=Clock(), most=2, wait_secs=3600)
    with ThreadPoolExecutor(2) as pool:
        assert sorted(pool.map(together.call, [1, 2])) == [10, 20]
    assert [sorted(g) for g in writes.groups] == [[1, 2]]


def test_a_call_whose_margin_has_come_is_written_at_once_alone() -> None:
    now = [100.0]
    clock = Clock(monotonic=lambda: now[0])
    writes = Writes()
    together = _Together(writes, parties=3, clock=clock, wait_secs=3600)
    # Others of the batch may still call, but this end must go before monotonic 100
    assert together.call(7, latest=100.0) == 70
    assert writes.groups == [[7]]


def test_a_group_waits_no_longer_than_its_wait_for_parties_that_do_not_call() -> None:
    writes = Writes()
    together = _Together(writes, parties=3, clock=Clock(), wait_secs=0.01)
    assert together.call(5) == 50
    assert writes.groups == [[5]]


def test_every_caller_of_a_group_whose_write_failed_gets_the_error_and_may_call_again() -> None:
    writes = Writes(fail=True)
    together = _Together(writes, parties=2, clock=Clock(), wait_secs=3600)
    errors: list[BaseException] = []

    def call(request: int) -> None:
        try:
            together.call(request)
        except ConnectionError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=call, args=(r,)) for r in (1, 2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(errors) == 2 and len(writes.groups) == 1
    writes.fail = False
    with ThreadPoolExecutor(2) as pool:
        assert sorted(pool.map(together.call, [1, 2])) == [10, 20]
    assert [sorted(g) for g in writes.groups[1:]] == [[1, 2]]
