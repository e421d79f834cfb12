"""The threads targets run on: kept for the next target, never shared with a target that
has not returned, named and with a fresh context per target, and ended when idle."""

from __future__ import annotations

import contextvars
import threading

from cronledger.execute import TargetThreads
from tests.polling import wait_until

WAIT = 5.0
MARK: contextvars.ContextVar[str] = contextvars.ContextVar("mark")


def run_and_wait(threads: TargetThreads, *, fail: bool = False) -> threading.Thread:
    """Run a job on `threads` (one that raises, with `fail`) and answer the thread it ran
    on, once it has run."""
    ran: list[threading.Thread] = []
    done = threading.Event()

    def record() -> None:
        ran.append(threading.current_thread())
        done.set()
        if fail:
            raise RuntimeError("the target's own failure")

    threads.run(record)
    assert done.wait(WAIT)
    return ran[0]


def idle_count(threads: TargetThreads) -> int:
    with threads._lock:
        return len(threads._idle)


def wait_until_idle(threads: TargetThreads, count: int) -> None:
    wait_until(lambda: idle_count(threads) == count, timeout=WAIT, every=0.01)


def test_a_thread_that_ran_a_target_runs_the_next_one() -> None:
    threads = TargetThreads()
    first = run_and_wait(threads)
    wait_until_idle(threads, 1)
    assert run_and_wait(threads) is first


def test_a_job_that_raises_leaves_its_thread_usable() -> None:
    threads = TargetThreads()
    first = run_and_wait(threads, fail=True)
    wait_until_idle(threads, 1)
    assert run_and_wait(threads) is first


def test_a_target_that_never_returns_keeps_its_thread_and_the_next_gets_another() -> None:
    # Given a target that hangs (its attempt abandoned it)
    threads = TargetThreads()
    release = threading.Event()
    hung = threading.Event()

    def hang() -> None:
        hung.set()
        release.wait(WAIT)

    threads.run(hang)
    assert hung.wait(WAIT)

    # When the next target runs, it runs at once, on a thread of its own
    other = run_and_wait(threads)
    wait_until_idle(threads, 1)

    # And once the hung one returns, both threads wait for work
    release.set()
    wait_until_idle(threads, 2)
    assert other.is_alive()


def test_an_idle_thread_ends() -> None:
    threads = TargetThreads(idle_secs=0.05)
    thread = run_and_wait(threads)
    thread.join(WAIT)
    assert not thread.is_alive()
    assert idle_count(threads) == 0
    assert run_and_wait(threads) is not thread  # a new one takes the next target


def test_each_target_runs_under_its_own_name_and_in_a_fresh_context() -> None:
    # Given a target that names what it sees and sets a context variable
    threads = TargetThreads()
    seen: list[tuple[str, object]] = []
    done = threading.Event()

    def job() -> None:
        seen.append((threading.current_thread().name, MARK.get(None)))
        MARK.set("left behind")
        done.set()

    # When it runs twice on the same (kept) thread
    for name in ("target-a", "target-b"):
        done.clear()
        threads.run(job, name=name)
        assert done.wait(WAIT)
        wait_until_idle(threads, 1)

    # Then each run had its own name and saw nothing the one before it set
    assert seen == [("target-a", None), ("target-b", None)]
