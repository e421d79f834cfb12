"""Occurrence ids: RFC 9562 version-7 UUIDs, unique and in minting order within a process,
and never repeated by a forked child (the random bytes are drawn ahead, many ids' worth)."""

from __future__ import annotations

import multiprocessing
import uuid

from cronledger import ids


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
    assert len({u.int & ((1 << 62) - 1) for u in parsed}) == count


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
    def random_part(i: str) -> int:
        return uuid.UUID(i).int & ((1 << 62) - 1)

    assert not {random_part(i) for i in parent} & {random_part(i) for i in theirs}
