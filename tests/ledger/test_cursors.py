"""A cursor moves only by compare-and-set from the value and the scheduling hash it was
planned from, and resetting or pausing it drops the not-yet-due cron rows a lookahead pass
materialised."""

from __future__ import annotations

from datetime import timedelta

from cronledger.ledger import (
    CHANNEL_ACTIVE,
    CHANNEL_ARCHIVED,
    CHANNEL_DRAFT,
    COMPLETED,
    TRIGGER_MANUAL,
    CursorMove,
    Ledger,
    OccurrenceFilter,
)
from tests.ledger.helpers import advance_cursor, row


def test_a_cursor_advances_only_from_the_value_it_was_planned_from(ledger: Ledger) -> None:
    t0 = ledger.db_now()
    t1, t2 = t0 + timedelta(hours=1), t0 + timedelta(hours=2)
    ledger.upsert_cursor("ch", 1, "hash", t0)

    # The winner moves it…
    assert advance_cursor(ledger, CursorMove("ch", t0, t1, "hash"))
    # …and a reconciler that planned from the old value writes nothing, rather than
    # dragging the cursor backwards and replaying a pass.
    assert not advance_cursor(ledger, CursorMove("ch", t0, t2, "hash"))

    [state] = ledger.schedule_states()
    assert state.next_fire_at == t1
    assert not advance_cursor(ledger, CursorMove("absent", t0, t1, "hash"))


def test_a_cursor_with_no_instants_left_is_parked(ledger: Ledger) -> None:
    t0 = ledger.db_now()
    ledger.upsert_cursor("ch", 1, "hash", t0)

    assert advance_cursor(ledger, CursorMove("ch", t0, None, "hash"))

    [state] = ledger.schedule_states()
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
        ledger.upsert_cursor(channel_id, 1, "hash", t0)
    assert advance_cursor(ledger, CursorMove("b", t0, later, "hash"))

    # When one pass moves all three (and a channel with no cursor) from t0, with a row each
    moves = [
        CursorMove(channel_id, t0, to, "hash")
        for channel_id, to in (("a", later), ("b", later), ("c", None), ("absent", later))
    ]
    inserted, moved = ledger.materialise([row(t0, m.channel_id) for m in moves], moves)

    # Then only the cursors still at t0 moved, each to its own new value, with their rows
    assert moved == {"a", "c"}
    cursors = {s.channel_id: s.next_fire_at for s in ledger.schedule_states()}
    assert cursors == {"a": later, "b": later, "c": None}
    assert inserted == 2
    assert {o.channel_id for o in ledger.list_occurrences().data} == {"a", "c"}
    assert ledger.materialise([], []) == (0, set())


def test_a_plan_made_before_an_edit_reset_the_cursor_materialises_nothing(
    ledger: Ledger,
) -> None:
    # Given a pass that planned the next minute's rows from the cursor at t0 (lookahead)
    t0 = ledger.db_now()
    ledger.upsert_cursor("ch", 1, "old-hash", t0)
    planned = [row(t0 + timedelta(seconds=s), "ch") for s in (0, 30)]

    # When the schedule is edited (the cursor reset elsewhere) before the pass writes
    reset_to = t0 + timedelta(hours=1)
    ledger.upsert_cursor("ch", 2, "new-hash", reset_to)
    stale = CursorMove("ch", t0, t0 + timedelta(minutes=1), "old-hash")
    inserted, moved = ledger.materialise(planned, [stale])

    # Then none of the stale plan's rows land, and the edit's cursor stands
    assert (inserted, moved) == (0, set())
    assert ledger.list_occurrences().total == 0
    assert [s.next_fire_at for s in ledger.schedule_states()] == [reset_to]


def test_a_plan_made_under_another_schedule_loses_even_when_the_reset_lands_on_its_instant(
    ledger: Ledger,
) -> None:
    # Given passes that planned from the cursor at t0 under the old schedule, one channel
    # written alone and two in a batch (SQLite's and PostgreSQL's batch paths differ)
    t0 = ledger.db_now()
    t1 = t0 + timedelta(minutes=1)
    for channel_id in ("alone", "batched", "unchanged"):
        ledger.upsert_cursor(channel_id, 1, "old-hash", t0)

    # When an edit resets two of them onto that same instant under a new schedule
    ledger.upsert_cursor("alone", 2, "new-hash", t0)
    ledger.upsert_cursor("batched", 2, "new-hash", t0)

    # Then the stale moves lose, and only the unchanged channel moves and gets its row
    assert not advance_cursor(ledger, CursorMove("alone", t0, t1, "old-hash"))
    moves = [CursorMove(cid, t0, t1, "old-hash") for cid in ("batched", "unchanged")]
    inserted, moved = ledger.materialise([row(t0, m.channel_id) for m in moves], moves)
    assert (inserted, moved) == (1, {"unchanged"})
    cursors = {s.channel_id: (s.next_fire_at, s.config_hash) for s in ledger.schedule_states()}
    assert cursors == {
        "alone": (t0, "new-hash"),
        "batched": (t0, "new-hash"),
        "unchanged": (t1, "old-hash"),
    }
    # And a plan made under the new schedule still wins from there
    assert advance_cursor(ledger, CursorMove("alone", t0, t1, "new-hash"))


def test_upserting_a_cursor_resets_it_and_clears_a_pause(ledger: Ledger) -> None:
    t0 = ledger.db_now()
    ledger.upsert_cursor("ch", 1, "hash", t0)
    ledger.pause_cursor("ch")
    assert ledger.schedule_states()[0].paused_at is not None

    ledger.upsert_cursor("ch", 2, "other", t0 + timedelta(hours=3))

    [state] = ledger.schedule_states()
    assert state.paused_at is None, "reactivation must clear the pause"
    assert (state.channel_version, state.config_hash) == (2, "other")
    assert state.next_fire_at == t0 + timedelta(hours=3)


def test_pausing_keeps_the_first_pause_instant(ledger: Ledger) -> None:
    ledger.upsert_cursor("ch", 1, "hash", ledger.db_now())
    ledger.pause_cursor("ch")
    first = ledger.schedule_states()[0].paused_at

    ledger.pause_cursor("ch")

    assert ledger.schedule_states()[0].paused_at == first


def test_pausing_or_resetting_drops_only_the_not_yet_due_pending_cron_rows(
    ledger: Ledger,
) -> None:
    for change in ("pause", "reset"):
        # Given a lookahead pass left future cron rows, beside a due one, a future manual
        # run and a future row that already ended
        now = ledger.db_now()
        channel = f"ch-{change}"
        ledger.upsert_cursor(channel, 1, "hash", now)
        due = row(now - timedelta(minutes=1), channel)
        future = [row(now + timedelta(minutes=m), channel) for m in (1, 2)]
        manual = row(now + timedelta(minutes=3), channel, trigger=TRIGGER_MANUAL)
        ended = row(now + timedelta(minutes=4), channel, status=COMPLETED)
        other = row(now + timedelta(minutes=1), "another-channel")
        assert ledger.insert_occurrences([due, *future, manual, ended, other]) == 6

        # When the channel is paused, or its schedule changes
        if change == "pause":
            ledger.pause_cursor(channel)
        else:
            ledger.upsert_cursor(channel, 2, "new-hash", now + timedelta(hours=1))

        # Then only its future pending cron rows are gone
        kept = {o.id for o in ledger.list_occurrences(OccurrenceFilter(channel_id=channel)).data}
        assert kept == {due.id, manual.id, ended.id}, change
        assert ledger.get_occurrence(other.id).status == "pending"


def test_a_reconcile_pass_reads_only_the_schedules_needing_work(ledger: Ledger) -> None:
    # Given channels in every situation a pass can meet
    now = ledger.db_now()
    horizon = now + timedelta(minutes=1)

    def channel(name: str, status: str = CHANNEL_ACTIVE) -> str:
        return ledger.create_channel(name, {"schedule": "0 * * * * *"}, {}, 1000, status).channel_id

    new = channel("new")
    due = channel("due")
    ledger.upsert_cursor(due, 1, "hash", now + timedelta(seconds=30))
    idle = channel("idle")
    ledger.upsert_cursor(idle, 1, "hash", now + timedelta(hours=1))
    parked = channel("parked")
    ledger.upsert_cursor(parked, 1, "hash", None)
    resumed = channel("resumed")
    ledger.upsert_cursor(resumed, 1, "hash", now + timedelta(hours=1))
    ledger.pause_cursor(resumed)
    edited = channel("edited")
    ledger.upsert_cursor(edited, 1, "hash", now + timedelta(hours=1))
    ledger.new_channel_version(edited, {"schedule": "0 * * * * *", "payload": {}}, {}, 1000)
    stopped = channel("stopped")
    ledger.set_channel_status(stopped, CHANNEL_ARCHIVED)
    ledger.upsert_cursor(stopped, 1, "hash", now)  # a live cursor, its channel not active
    ledger.upsert_cursor("deleted-channel", 1, "hash", now)
    channel("draft", CHANNEL_DRAFT)

    # When a pass asks what needs work
    work = {w.channel_id: w for w in ledger.schedules_needing_work(horizon)}

    # Then exactly the ones it has to touch come back, each with what it needs
    assert set(work) == {new, due, resumed, edited, stopped, "deleted-channel"}
    assert work[new].state is None and work[new].channel is not None
    assert work[due].state is not None and work[due].channel is not None
    assert work[due].channel.name == "due"
    assert work[resumed].state is not None and work[resumed].state.paused_at is not None
    assert work[edited].channel is not None and work[edited].channel.version == 2
    assert work[stopped].channel is None and work[stopped].state is not None
    assert work["deleted-channel"].channel is None
    assert idle not in work and parked not in work


def test_adopting_a_version_keeps_the_cursor_in_place_and_never_goes_back(
    ledger: Ledger,
) -> None:
    at = ledger.db_now() + timedelta(hours=1)
    ledger.upsert_cursor("ch", 1, "hash", at)

    assert ledger.adopt_channel_version("ch", 3)
    assert not ledger.adopt_channel_version("ch", 2), "a stale pass cannot move it back"
    assert not ledger.adopt_channel_version("absent", 3)

    [state] = ledger.schedule_states()
    assert (state.channel_version, state.next_fire_at, state.config_hash) == (3, at, "hash")
