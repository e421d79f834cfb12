"""Occurrence ids: RFC 9562 version-7 UUIDs, unique and in minting order within a process,
and never repeated by a forked child (the random bytes are drawn ahead, many ids' worth),
which can mint whatever another thread of its parent was doing at the fork."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
import uuid
import warnings
from array import array

from cronledger import ids

#: Children forked while another thread mints; each must mint an id within the deadline.
FORKS = 20
CHILD_DEADLINE_SECS = 10.0
#: An id's random part: what a child sharing its parent's random bytes would repeat.
RANDOM_BITS = (1 << 62) - 1


def test_ids_are_version_seven_unique_and_in_minting_order() -> None:
    # Given more ids than one draw of random bytes covers, minted within a few milliseconds
    count = 3 * ids.RANDOM_AHEAD // 8
    minted = [ids.new_occurrence_id() for _ in range(count)]

    # Then each is a version-7 RFC 9562 UUID, none repeats, and text order is minting order
    parsed = [uuid.UUID(i) for i in minted]
    assert {(u.version, u.variant) for u in parsed} == {(7, uuid.RFC_4122)}
    assert len(set(minted)) == count
    assert sorted(minted) == minted
    # And the random part differs from id to id (not a counter, not one draw repeated)
    assert len({u.int & RANDOM_BITS for u in parsed}) == count


def _mint(count: int, out: multiprocessing.Queue[list[str]]) -> None:
    out.put([ids.new_occurrence_id() for _ in range(count)])


def test_a_forked_child_draws_random_bytes_of_its_own() -> None:
    # Given a parent holding random bytes drawn ahead
    ids.new_occurrence_id()
    context = multiprocessing.get_context("fork")
    out: multiprocessing.Queue[list[str]] = context.Queue()

    # When a forked child and the parent each mint ids
    child = context.Process(target=_mint, args=(100, out))
    child.start()
    parent = [ids.new_occurrence_id() for _ in range(100)]
    theirs = out.get(timeout=60)
    child.join(60)

    # Then their random parts never coincide
    assert not {_random_part(i) for i in parent} & {_random_part(i) for i in theirs}


def _random_part(i: str) -> int:
    return uuid.UUID(i).int & RANDOM_BITS


def _fork_a_minting_child(read_end: int, write_end: int) -> int:
    """A child that mints one id, writes it to `write_end`, and exits without running
    anything of the parent's (no atexit, no pytest teardown). Answers its pid."""
    with warnings.catch_warnings():
        # Python 3.12+ warns that forking a multi-threaded process may deadlock the child:
        # that deadlock is what this test is for.
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:
        status = 1
        try:
            os.close(read_end)
            os.write(write_end, ids.new_occurrence_id().encode())
            status = 0
        finally:
            os._exit(status)
    return pid


def _exit_codes_by(deadline: float, pids: list[int]) -> dict[int, int]:
    """The exit codes of the children that exited by `deadline`; the others are killed."""
    exited: dict[int, int] = {}
    while len(exited) < len(pids) and time.monotonic() < deadline:
        for pid in pids:
            if pid not in exited:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    exited[pid] = os.waitstatus_to_exitcode(status)
        time.sleep(0.01)
    for pid in pids:
        if pid not in exited:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    return exited


def test_a_child_forked_while_another_thread_mints_can_mint_ids_of_its_own() -> None:
    # Given a thread that mints ids without pause, so it often holds the ids lock (drawing
    # random bytes under it) at the instant of a fork; it keeps each id's random part only,
    # as it mints millions when the machine is busy
    pipes = [os.pipe() for _ in range(FORKS)]  # made first: each is a GIL hand-off
    stop = threading.Event()
    parent_random = array("Q")

    def mint_until_stopped() -> None:
        while not stop.is_set():
            parent_random.append(ids.uuid7().int & RANDOM_BITS)

    minter = threading.Thread(target=mint_until_stopped, daemon=True)
    minter.start()
    while len(parent_random) < ids.RANDOM_AHEAD // 8:
        time.sleep(0.001)

    # When the main thread forks children meanwhile, each to mint one id; every other one
    # right after an id of its own, so the parent's random bytes are part used at the fork
    pids = []
    try:
        for n, pipe in enumerate(pipes):
            if n % 2:
                parent_random.append(ids.uuid7().int & RANDOM_BITS)
            pids.append(_fork_a_minting_child(*pipe))
    finally:
        stop.set()
        minter.join()
    # (and the parent mints a full draw more: bytes a child shared would be among them)
    parent_random.extend(ids.uuid7().int & RANDOM_BITS for _ in range(ids.RANDOM_AHEAD // 8))

    # Then every child exits on its own within the deadline (one stuck on a lock it
    # inherited held is killed, so the test fails rather than hangs)
    exited = _exit_codes_by(time.monotonic() + CHILD_DEADLINE_SECS, pids)
    minted_by_children = []
    for read_end, write_end in pipes:
        os.close(write_end)
        with os.fdopen(read_end, "rb") as answer:
            minted_by_children.append(answer.read().decode())
    stuck = FORKS - len(exited)
    assert not stuck, f"{stuck} of {FORKS} forked children hung minting an id"
    assert set(exited.values()) == {0}
    # And each child drew random bytes of its own: no id's random part is one of the parent's
    theirs = {_random_part(i) for i in minted_by_children}
    assert len(theirs) == FORKS
    assert not theirs & set(parent_random)
