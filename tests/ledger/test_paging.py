"""Lists read by key, on PostgreSQL and SQLite.

Invariant: following `next` from the first page visits every row that was there once, in
newest-first order, whatever is written between two reads (a row written above the pages
already read is simply not among them; one written below is met in its place); the total is
exact up to the bound and a lower bound past it; an offset past the bound is refused.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from cronledger.errors import ValidationFailed
from cronledger.ledger import CHANNEL_ACTIVE, Ledger, OccurrenceFilter, paging
from tests.ledger.helpers import empty_tables, row

START = datetime(2026, 3, 1, tzinfo=UTC)
TARGET = {"type": "python", "callable": "cronledger.demo:hello"}


def instant(minutes: int) -> datetime:
    return START + timedelta(minutes=minutes)


def keys(ledger: Ledger, f: OccurrenceFilter) -> list[tuple[datetime, str]]:
    return [(o.scheduled_for, o.id) for o in ledger.occurrences.list_occurrences(f).data]


def test_keyset_pages_neither_skip_nor_repeat_rows_while_rows_are_written(
    ledger: Ledger,
) -> None:
    # Given sixty rows over three channels, many sharing an instant (the id breaks the tie)
    seeded = [row(instant(m), f"ch{c}") for m in range(0, 40, 2) for c in range(3)]
    assert ledger.occurrences.insert_occurrences(seeded) == 60
    seen: list[tuple[datetime, str]] = []
    written_below: set[str] = set()
    chooser = random.Random(28)

    # When the list is read four rows at a time, and rows are written between every two
    # reads: some newer than anything read, some between, some older than the key
    after = None
    for page_number in range(100):
        page = ledger.occurrences.list_occurrences(OccurrenceFilter(limit=4, after=after))
        seen += [(o.scheduled_for, o.id) for o in page.data]
        if page.next is None:
            break
        after = page.next
        for offset in (50 + page_number, chooser.randrange(-1, 41), -3 - page_number):
            new = row(instant(offset), f"late{page_number}")
            if ledger.occurrences.insert_occurrence(new) and (instant(offset), new.id) < seen[-1]:
                written_below.add(new.id)

    # Then each row that was there is read once, in order, and so is each one written below
    # the key at the time; nothing is read twice
    ids = [row_id for _, row_id in seen]
    assert len(ids) == len(set(ids)), "no row repeats"
    assert {r.id for r in seeded} <= set(ids), "no row is skipped"
    assert written_below <= set(ids)
    assert seen == sorted(seen, reverse=True), "newest first by (scheduled_for, id)"


def test_a_filtered_list_pages_by_key_within_its_filter(ledger: Ledger) -> None:
    ledger.occurrences.insert_occurrences(
        row(instant(m), "ch", status="completed" if m % 3 else "failed") for m in range(30)
    )
    failed = OccurrenceFilter(status="failed", limit=4)

    first = ledger.occurrences.list_occurrences(failed)
    rest = ledger.occurrences.list_occurrences(OccurrenceFilter(status="failed", after=first.next))

    assert (first.total, first.total_is_exact) == (10, True)
    everything = [o.scheduled_for for o in first.data + rest.data]
    assert everything == [instant(m) for m in range(27, -1, -3)]
    assert rest.next is None, "the last page names no next"


def test_the_total_is_exact_up_to_the_bound_and_more_than_it_beyond(
    ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(paging, "TOTAL_BOUND", 10)
    ledger.occurrences.insert_occurrences(row(instant(m)) for m in range(12))

    bounded = ledger.occurrences.list_occurrences(OccurrenceFilter(limit=2))
    exact = ledger.occurrences.list_occurrences(OccurrenceFilter(limit=2, exact_total=True))
    few = ledger.occurrences.list_occurrences(OccurrenceFilter(since=instant(5)))

    assert (bounded.total, bounded.total_is_exact) == (10, False)
    assert (exact.total, exact.total_is_exact) == (12, True)
    assert (few.total, few.total_is_exact) == (7, True)


def test_an_offset_past_the_bound_is_refused_naming_after(
    ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(paging, "TOTAL_BOUND", 10)
    ledger.occurrences.insert_occurrences(row(instant(m)) for m in range(12))

    within = ledger.occurrences.list_occurrences(OccurrenceFilter(limit=1, offset=10))
    with pytest.raises(ValidationFailed, match=r"offset: .*`after`") as refused:
        ledger.occurrences.list_occurrences(OccurrenceFilter(offset=11))

    assert [o.scheduled_for for o in within.data] == [instant(1)]
    assert within.next is not None, "an offset page names its next too"
    assert [e.path for e in refused.value.errors] == ["offset"]


@pytest.mark.parametrize(
    ("given", "path"),
    [({"after": "not a key"}, "after"), ({"after": "YQ", "offset": 2}, "offset")],
)
def test_a_key_that_is_not_one_or_beside_an_offset_is_refused(
    ledger: Ledger, given: dict[str, object], path: str
) -> None:
    with pytest.raises(ValidationFailed) as refused:
        ledger.occurrences.list_occurrences(OccurrenceFilter(**given))  # type: ignore[arg-type]

    assert [e.path for e in refused.value.errors] == [path]


def test_channels_page_by_key_newest_first_and_filter_by_name_prefix(ledger: Ledger) -> None:
    # Given channels created one after another, some of them active
    names = [f"{team}-{n}" for n in range(4) for team in ("billing", "mail", "billing_x")]
    for name in names:
        status = CHANNEL_ACTIVE if name.endswith(("1", "3")) else "draft"
        ledger.channels.create_channel(
            name, {"schedule": "0 0 * * * *"}, TARGET, 1000, status=status
        )

    # When the billing ones are read two at a time, one more created between the reads
    first = ledger.channels.list_channels(name_prefix="billing-", limit=2)
    ledger.channels.create_channel("billing-new", {"schedule": "0 0 * * * *"}, TARGET, 1000)
    rest = ledger.channels.list_channels(name_prefix="billing-", after=first.next)

    # Then the pages hold each billing channel there before once, newest first; the prefix
    # is literal (no wildcard) and case-sensitive
    assert [c.name for c in first.data + rest.data] == [f"billing-{n}" for n in (3, 2, 1, 0)]
    assert first.total == 4 and rest.next is None
    assert ledger.channels.list_channels(name_prefix="BILLING").total == 0
    assert ledger.channels.list_channels(name_prefix="billing_").total == 4
    active = ledger.channels.list_channels(status=CHANNEL_ACTIVE, name_prefix="mail")
    assert [c.name for c in active.data] == ["mail-3", "mail-1"]


def test_postgresql_reads_a_filtered_page_and_a_retention_batch_through_indexes(
    pg_ledger: Ledger,
) -> None:
    # Given a ledger of history, analysed
    empty_tables(pg_ledger)
    pg_ledger.occurrences.insert_occurrences(
        row(instant(m), f"ch{m % 50}", status="completed" if m % 7 else "failed")
        for m in range(5000)
    )
    with pg_ledger.engine.begin() as conn:
        conn.execute(sa.text("ANALYZE cron_occurrences"))
    plans: dict[str, str] = {}

    def explain(conn, cursor, statement, parameters, context, executemany) -> None:  # type: ignore[no-untyped-def]
        for start in ("SELECT cron_occurrences.id", "WITH doomed"):
            if statement.startswith(start):
                cursor.execute("EXPLAIN " + statement, parameters)
                plans[start] = "\n".join(line for (line,) in cursor.fetchall())

    # When a page of failed rows past a key is read, and a retention batch runs
    after = pg_ledger.occurrences.list_occurrences(OccurrenceFilter(status="failed", limit=5)).next
    sa.event.listen(pg_ledger.engine, "before_cursor_execute", explain)
    try:
        page = pg_ledger.occurrences.list_occurrences(
            OccurrenceFilter(status="failed", after=after)
        )
        pg_ledger.occurrences.delete_terminal_older_than(1)
    finally:
        sa.event.remove(pg_ledger.engine, "before_cursor_execute", explain)

    # Then the page is a range of the status index (no sort of the matches), and the
    # batch reads the index of terminal rows and deletes by primary key, attempts first
    assert len(page.data) == 50
    listing, retention = plans["SELECT cron_occurrences.id"], plans["WITH doomed"]
    assert "ix_cron_occurrences_status" in listing and "Sort" not in listing, listing
    assert "ix_cron_occurrences_retention" in retention, retention
    assert "cron_occurrences_pkey" in retention, retention
    assert "Seq Scan on cron_occurrences" not in retention, retention
    assert "Delete on cron_attempts" in retention, retention
