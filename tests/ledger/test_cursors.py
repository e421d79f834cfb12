"""A cursor moves only by compare-and-set from the value and the scheduling hash it was
planned from, and resetting or pausing it drops the not-yet-due cron rows a lookahead pass
materialised."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import sqlalchemy as sa

from cronledger.ledger import (
    CHANNEL_ACTIVE,
    CHANNEL_ARCHIVED,
    CHANNEL_DRAFT,
    CHANNEL_PAUSED,
    COMPLETED,
    TRIGGER_MANUAL,
    CursorInit,
    CursorMove,
    CursorWrites,
    Ledger,
    OccurrenceFilter,
)
from cronledger.ledger.tables import channel_changes, channels
from cronledger.reconcile import reconcile_once
from cronledger.settings import Settings
from tests.ledger.helpers import (
    active_channel,
    advance_cursor,
    empty_tables,
    pause_cursor,
    row,
    upsert_cursor,
)


def test_a_cursor_advances_only_from_the_value_it_was_planned_from(ledger: Ledger) -> None:
    t0 = ledger.db_now()
    t1, t2 = t0 + timedelta(hours=1), t0 + timedelta(hours=2)
    upsert_cursor(ledger, "ch", 1, "hash", t0)

    # The winner moves it…
    assert advance_cursor(ledger, CursorMove("ch", t0, t1, "hash"))
    # …and a reconciler that planned from the old value writes nothing, rather than
    # dragging the cursor backwards and replaying a pass.
    assert not advance_cursor(ledger, CursorMove("ch", t0, t2, "hash"))

    [state] = ledger.cursors.schedule_states()
    assert state.next_fire_at == t1
    assert not advance_cursor(ledger, CursorMove("absent", t0, t1, "hash"))


def test_a_cursor_with_no_instants_left_is_parked(ledger: Ledger) -> None:
    t0 = ledger.db_now()
    upsert_cursor(ledger, "ch", 1, "hash", t0)

    assert advance_cursor(ledger, CursorMove("ch", t0, None, "hash"))

    [state] = ledger.cursors.schedule_states()
    assert state.next_fire_at is None
    parked = "a parked cursor is not at t0 any more"
    assert not advance_cursor(ledger, CursorMove("ch", t0, t0, "hash")), parked


def test_materialising_moves_exactly_the_cursors_whose_compare_and_set_won(
    ledger: Ledger,
) -> None:
    # Given three cursors, one of which another reconciler has already moved
    t0 = ledger.db_now()
    later = t0 + timedelta(minutes=5)
    for channel_id in ("a", "b", "c"):
        upsert_cursor(ledger, channel_id, 1, "hash", t0)
    assert advance_cursor(ledger, CursorMove("b", t0, later, "hash"))

    # When one pass moves all three (and a channel with no cursor) from t0, with a row each
    moves = [
        CursorMove(channel_id, t0, to, "hash")
        for channel_id, to in (("a", later), ("b", later), ("c", None), ("absent", later))
    ]
    inserted, moved = ledger.occurrences.materialise([row(t0, m.channel_id) for m in moves], moves)

    # Then only the cursors still at t0 moved, each to its own new value, with their rows
    assert moved == {"a", "c"}
    cursors = {s.channel_id: s.next_fire_at for s in ledger.cursors.schedule_states()}
    assert cursors == {"a": later, "b": later, "c": None}
    assert inserted == 2
    assert {o.channel_id for o in ledger.occurrences.list_occurrences().data} == {"a", "c"}
    assert ledger.occurrences.materialise([], []) == (0, set())


def test_a_plan_made_before_an_edit_reset_the_cursor_materialises_nothing(
    ledger: Ledger,
) -> None:
    # Given a pass that planned the next minute's rows from the cursor at t0 (lookahead)
    t0 = ledger.db_now()
    upsert_cursor(ledger, "ch", 1, "old-hash", t0)
    planned = [row(t0 + timedelta(seconds=s), "ch") for s in (0, 30)]

    # When the schedule is edited (the cursor reset elsewhere) before the pass writes
    reset_to = t0 + timedelta(hours=1)
    upsert_cursor(ledger, "ch", 2, "new-hash", reset_to)
    stale = CursorMove("ch", t0, t0 + timedelta(minutes=1), "old-hash")
    inserted, moved = ledger.occurrences.materialise(planned, [stale])

    # Then none of the stale plan's rows land, and the edit's cursor stands
    assert (inserted, moved) == (0, set())
    assert ledger.occurrences.list_occurrences().total == 0
    assert [s.next_fire_at for s in ledger.cursors.schedule_states()] == [reset_to]


def test_a_plan_made_under_another_schedule_loses_even_when_the_reset_lands_on_its_instant(
    ledger: Ledger,
) -> None:
    # Given passes that planned from the cursor at t0 under the old schedule, one channel
    # written alone and two in a batch (SQLite's and PostgreSQL's batch paths differ)
    t0 = ledger.db_now()
    t1 = t0 + timedelta(minutes=1)
    for channel_id in ("alone", "batched", "unchanged"):
        upsert_cursor(ledger, channel_id, 1, "old-hash", t0)

    # When an edit resets two of them onto that same instant under a new schedule
    upsert_cursor(ledger, "alone", 2, "new-hash", t0)
    upsert_cursor(ledger, "batched", 2, "new-hash", t0)

    # Then the stale moves lose, and only the unchanged channel moves and gets its row
    assert not advance_cursor(ledger, CursorMove("alone", t0, t1, "old-hash"))
    moves = [CursorMove(cid, t0, t1, "old-hash") for cid in ("batched", "unchanged")]
    inserted, moved = ledger.occurrences.materialise([row(t0, m.channel_id) for m in moves], moves)
    assert (inserted, moved) == (1, {"unchanged"})
    cursors = {
        s.channel_id: (s.next_fire_at, s.config_hash) for s in ledger.cursors.schedule_states()
    }
    assert cursors == {
        "alone": (t0, "new-hash"),
        "batched": (t0, "new-hash"),
        "unchanged": (t1, "old-hash"),
    }
    # And a plan made under the new schedule still wins from there
    assert advance_cursor(ledger, CursorMove("alone", t0, t1, "new-hash"))


def test_upserting_a_cursor_resets_it_and_clears_a_pause(ledger: Ledger) -> None:
    t0 = ledger.db_now()
    upsert_cursor(ledger, "ch", 1, "hash", t0)
    pause_cursor(ledger, "ch")
    assert ledger.cursors.schedule_states()[0].paused_at is not None

    upsert_cursor(ledger, "ch", 2, "other", t0 + timedelta(hours=3))

    [state] = ledger.cursors.schedule_states()
    assert state.paused_at is None, "reactivation must clear the pause"
    assert (state.channel_version, state.config_hash) == (2, "other")
    assert state.next_fire_at == t0 + timedelta(hours=3)


def test_pausing_keeps_the_first_pause_instant(ledger: Ledger) -> None:
    upsert_cursor(ledger, "ch", 1, "hash", ledger.db_now())
    pause_cursor(ledger, "ch")
    first = ledger.cursors.schedule_states()[0].paused_at

    pause_cursor(ledger, "ch")

    assert ledger.cursors.schedule_states()[0].paused_at == first


def test_pausing_or_resetting_drops_only_the_not_yet_due_pending_cron_rows(
    ledger: Ledger,
) -> None:
    for change in ("pause", "reset"):
        # Given a lookahead pass left future cron rows, beside a due one, a future manual
        # run and a future row that already ended
        now = ledger.db_now()
        channel = f"ch-{change}"
        upsert_cursor(ledger, channel, 1, "hash", now)
        due = row(now - timedelta(minutes=1), channel)
        future = [row(now + timedelta(minutes=m), channel) for m in (1, 2)]
        manual = row(now + timedelta(minutes=3), channel, trigger=TRIGGER_MANUAL)
        ended = row(now + timedelta(minutes=4), channel, status=COMPLETED)
        other = row(now + timedelta(minutes=1), "another-channel")
        assert ledger.occurrences.insert_occurrences([due, *future, manual, ended, other]) == 6

        # When the channel is paused, or its schedule changes
        if change == "pause":
            pause_cursor(ledger, channel)
        else:
            upsert_cursor(ledger, channel, 2, "new-hash", now + timedelta(hours=1))

        # Then only its future pending cron rows are gone
        kept = {
            o.id
            for o in ledger.occurrences.list_occurrences(OccurrenceFilter(channel_id=channel)).data
        }
        assert kept == {due.id, manual.id, ended.id}, change
        assert ledger.occurrences.get_occurrence(other.id).status == "pending"


def test_a_pass_reads_the_noted_changes_and_the_due_cursors_and_nothing_else(
    ledger: Ledger,
) -> None:
    # Given channels in every situation a pass can meet, their writes' notes taken away
    # once the cursors are set up (as a pass that lined them up would)
    now = ledger.db_now()
    horizon = now + timedelta(minutes=1)

    def channel(name: str, status: str = CHANNEL_ACTIVE) -> str:
        return ledger.channels.create_channel(
            name, {"schedule": "0 * * * * *"}, {}, 1000, status
        ).channel_id

    due = channel("due")
    upsert_cursor(ledger, due, 1, "hash", now + timedelta(seconds=30))
    idle = channel("idle")
    upsert_cursor(ledger, idle, 1, "hash", now + timedelta(hours=1))
    parked = channel("parked")
    upsert_cursor(ledger, parked, 1, "hash", None)
    resumed = channel("resumed")
    upsert_cursor(ledger, resumed, 1, "hash", now + timedelta(hours=1))
    stopped = channel("stopped")
    upsert_cursor(ledger, stopped, 1, "hash", now)
    upsert_cursor(ledger, "deleted-channel", 1, "hash", now)
    forget_notes(ledger)
    # And then the writes a pass has to hear of
    new = channel("new")
    ledger.channels.set_channel_status(resumed, "paused")
    ledger.channels.set_channel_status(resumed, CHANNEL_ACTIVE)
    edited = channel("edited")
    upsert_cursor(ledger, edited, 1, "hash", now + timedelta(hours=1))
    ledger.channels.new_channel_version(
        edited, {"schedule": "0 * * * * *", "payload": {}}, {}, 1000
    )
    with ledger.engine.begin() as conn:  # a live cursor, its channel archived behind its back
        conn.execute(
            sa.update(channels)
            .where(channels.c.channel_id == stopped)
            .values(status=CHANNEL_ARCHIVED)
        )
    draft = channel("draft", CHANNEL_DRAFT)

    # When a pass reads its work
    noted = {n.work.channel_id: n.work for n in ledger.cursors.noted_changes()}
    due_now = {w.channel_id: w for w in ledger.cursors.due_cursors(horizon)}

    # Then the notes are the channels written since, each with its channel and cursor
    assert set(noted) == {new, resumed, edited, draft}
    assert noted[new].state is None and noted[new].channel is not None
    assert noted[resumed].state is not None and noted[resumed].state.paused_at is not None
    assert noted[edited].channel is not None and noted[edited].channel.version == 2
    assert noted[draft].channel is None, "only an active channel is read with its note"
    # And the due cursors are the running ones at or before the horizon, with their channel
    # only if it is active
    assert set(due_now) == {due, stopped, "deleted-channel"}
    assert due_now[due].channel is not None and due_now[due].channel.name == "due"
    assert due_now[stopped].channel is None and due_now[stopped].state is not None
    assert due_now["deleted-channel"].channel is None
    assert idle not in due_now and parked not in due_now
    assert ledger.cursors.due_count(60, bound=100) == 3 + 4


def forget_notes(ledger: Ledger) -> None:
    with ledger.engine.begin() as conn:
        conn.execute(sa.delete(channel_changes))


def test_a_change_noted_after_the_read_is_not_forgotten(ledger: Ledger) -> None:
    # Given a new channel's note, read by a pass
    channel = ledger.channels.create_channel(
        "job", {"schedule": "0 * * * * *"}, {}, 1000, CHANNEL_ACTIVE
    )
    [read] = ledger.cursors.noted_changes()
    # And an edit noted after the read
    ledger.channels.new_channel_version(channel.channel_id, {"schedule": "30 * * * * *"}, {}, 1000)

    # When the pass writes the cursor and forgets the note it read
    ledger.cursors.write_cursors(
        CursorWrites(
            inits=[CursorInit(channel.channel_id, 1, "hash", ledger.db_now())],
            seen=[(channel.channel_id, read.change)],
        )
    )

    # Then the edit's note is still there for the next pass
    [again] = ledger.cursors.noted_changes()
    assert again.work.channel is not None and again.work.channel.version == 2
    assert again.change > read.change


def test_a_page_of_cursor_writes_equals_the_same_writes_one_by_one(ledger: Ledger) -> None:
    # Given cursors in each situation, and a future cron row for each
    now = ledger.db_now()
    later = now + timedelta(hours=1)
    for channel_id in ("reset", "adopted", "paused"):
        upsert_cursor(ledger, channel_id, 1, "hash", later)
        assert ledger.occurrences.insert_occurrence(row(later, channel_id))
    inits = [CursorInit(f"new-{n}", 1, "hash", now + timedelta(seconds=n)) for n in range(20)]
    inits.append(CursorInit("reset", 2, "other", now + timedelta(minutes=2)))

    # When they are written as one page
    ledger.cursors.write_cursors(
        CursorWrites(inits=inits, adopts=[("adopted", 3)], pauses=["paused"])
    )
    batched = {s.channel_id: s for s in ledger.cursors.schedule_states()}
    batched_rows = {o.channel_id for o in ledger.occurrences.list_occurrences().data}

    # And, on a clean ledger, one call at a time
    empty_tables(ledger)
    for channel_id in ("reset", "adopted", "paused"):
        upsert_cursor(ledger, channel_id, 1, "hash", later)
        assert ledger.occurrences.insert_occurrence(row(later, channel_id))
    for init in inits:
        upsert_cursor(ledger, *init)
    ledger.cursors.write_cursors(CursorWrites(adopts=[("adopted", 3)]))
    pause_cursor(ledger, "paused")
    single = {s.channel_id: s for s in ledger.cursors.schedule_states()}
    single_rows = {o.channel_id for o in ledger.occurrences.list_occurrences().data}

    # Then both leave the same cursors (but for when they were written) and the same rows
    def shape(states: dict[str, Any]) -> dict[str, tuple[Any, ...]]:
        return {
            k: (s.channel_version, s.config_hash, s.next_fire_at, s.paused_at is None)
            for k, s in states.items()
        }

    assert shape(batched) == shape(single)
    assert batched_rows == single_rows == {"adopted"}


def test_adopting_a_version_keeps_the_cursor_in_place_and_never_goes_back(
    ledger: Ledger,
) -> None:
    at = ledger.db_now() + timedelta(hours=1)
    upsert_cursor(ledger, "ch", 1, "hash", at)

    ledger.cursors.write_cursors(CursorWrites(adopts=[("ch", 3)]))
    [adopted] = ledger.cursors.schedule_states()
    ledger.cursors.write_cursors(CursorWrites(adopts=[("ch", 2), ("absent", 3)]))

    [state] = ledger.cursors.schedule_states()
    assert (adopted.channel_version, adopted.next_fire_at, adopted.config_hash) == (3, at, "hash")
    assert state == adopted, "a stale pass cannot move it back, nor adopt for a missing cursor"


def test_channels_written_without_a_note_are_found_by_the_sweep_and_brought_in_line(
    ledger: Ledger,
) -> None:
    # Given a channel whose cursor runs, then two writes that noted nothing (as a release
    # from before the notes makes during a rolling upgrade): a new channel, and a pause
    # (`running` fires yearly: its cursor is never due, so no pass meets it unless noted)
    settings = Settings()
    running = active_channel(ledger, "running", schedule="0 0 0 1 1 *")
    reconcile_once(ledger, settings)
    unnoted = active_channel(ledger, "unnoted")
    with ledger.engine.begin() as conn:
        conn.execute(
            sa.update(channels)
            .where(channels.c.channel_id == running.channel_id)
            .values(status=CHANNEL_PAUSED)
        )
        conn.execute(sa.delete(channel_changes))

    # When a pass runs, then the sweep, then another pass
    reconcile_once(ledger, settings)
    before = {
        s.channel_id: s
        for s in ledger.cursors.schedule_states([running.channel_id, unnoted.channel_id])
    }
    noted = ledger.cursors.note_drifted_channels()
    reconcile_once(ledger, settings)
    after = {
        s.channel_id: s
        for s in ledger.cursors.schedule_states([running.channel_id, unnoted.channel_id])
    }

    # Then the first pass saw neither; the sweep noted both, and the next pass caught up
    assert unnoted.channel_id not in before and before[running.channel_id].paused_at is None
    assert noted == 2
    assert after[unnoted.channel_id].next_fire_at is not None
    assert after[running.channel_id].paused_at is not None
    assert ledger.cursors.note_drifted_channels() == 0
