"""The reconcile function: an EventBridge tick runs passes until close to the deadline, and
what the alarms watch arrives as EMF under the one dimension they select; after its pass it
reports overdue instants and sweeps the outbox to the installation's bus."""

from __future__ import annotations

from datetime import timedelta

import pytest
import sqlalchemy as sa

from cronledger.aws import reconcile
from cronledger.cron import compile_schedule
from cronledger.errors import CronledgerError
from cronledger.ledger import (
    CHANNEL_ACTIVE,
    PENDING,
    Channel,
    Ledger,
    NewOccurrence,
    OccurrenceFilter,
    Shard,
)
from cronledger.ledger.tables import channel_changes
from cronledger.settings import SettingsError
from tests.aws.bus import (
    BUS,
    INSTALLATION,
    bus_to_queue,
    failed_on_its_last_attempt,
    lapse_send_leases,
    received,
)
from tests.aws.conftest import NAMESPACE, SERVICE
from tests.aws.invocations import FakeContext, emf_documents, metric_values, scheduled_event
from tests.ledger.helpers import active_channel, holds, seed_due, upsert_cursor

# Pytest resets the warning filters runtime.py sets; an invocation that records only
# dimensioned metrics (or none) is expected, and Powertools would warn about it.
pytestmark = pytest.mark.filterwarnings("ignore:No application metrics to publish")

EVERY_SECOND = {"schedule": "* * * * * *", "timezone": "UTC"}
#: Three seconds are kept back for the last round: this leaves a loop of about half a second.
SHORT_INVOCATION_MS = 3_500
#: Long enough that the sweep after the pass is never cut short by the test's own deadline.
LONG_INVOCATION_MS = 15_000


def due_channel(ledger: Ledger, behind: timedelta) -> tuple[Channel, str]:
    """An active per-second channel whose cursor the scheduler left `behind` ago."""
    channel = ledger.channels.create_channel(
        "invoices",
        EVERY_SECOND,
        {"type": "python", "callable": "tests.aws.targets:record"},
        timeout_ms=10_000,
        status=CHANNEL_ACTIVE,
    )
    schedule = compile_schedule(EVERY_SECOND, channel_id=channel.channel_id)
    cursor = (ledger.db_now() - behind).replace(microsecond=0)
    upsert_cursor(ledger, channel.channel_id, channel.version, schedule.config_hash, cursor)
    return channel, cursor.isoformat()


def invoke(context_ms: int = SHORT_INVOCATION_MS) -> dict[str, int]:
    answer: dict[str, int] = reconcile.handler(
        scheduled_event("Cronledger-Reconcile"), FakeContext("cronledger-reconcile", context_ms)
    )
    return answer


def test_a_tick_materialises_the_instants_a_due_channel_owes_and_moves_its_cursor(
    container: Ledger,
) -> None:
    # Given a per-second channel whose cursor is three seconds behind
    channel, cursor = due_channel(container, behind=timedelta(seconds=3))

    # When the scheduled event arrives
    answer = invoke()

    # Then every second from the cursor on has a pending row, and the cursor is past them all
    rows = container.occurrences.list_occurrences(
        OccurrenceFilter(channel_id=channel.channel_id, limit=100)
    ).data
    instants = sorted(row.scheduled_for for row in rows)
    assert answer["passes"] >= 1
    assert instants[0].isoformat() == cursor
    assert instants[:4] == [instants[0] + timedelta(seconds=n) for n in range(4)]
    assert {row.status for row in rows} == {PENDING}
    (state,) = container.cursors.schedule_states()
    assert state.next_fire_at is not None and state.next_fire_at > instants[-1]


def test_each_pass_emits_the_backlog_age_and_a_reconcile_success_under_the_service_dimension(
    container: Ledger, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given an occurrence that has waited two minutes unclaimed
    seed_due(container, ago=timedelta(minutes=2))

    # When the scheduled event arrives
    answer = invoke()

    # Then the EMF the alarms read has the backlog age and one success per pass
    documents = emf_documents(capsys.readouterr().out)
    alarmed = {"service": SERVICE}
    ages = metric_values(documents, "OldestPendingAgeSeconds", alarmed)
    assert ages and min(ages) >= 120
    assert metric_values(documents, "ReconcileSucceeded", alarmed) == [1.0] * answer["passes"]
    assert metric_values(documents, "PendingCount", alarmed)[-1] == 1
    assert {d["_aws"]["CloudWatchMetrics"][0]["Namespace"] for d in documents} == {NAMESPACE}


def test_occurrences_by_status_go_to_a_document_of_their_own_and_leave_the_alarmed_ones_alone(
    container: Ledger, capsys: pytest.CaptureFixture[str]
) -> None:
    due_channel(container, behind=timedelta(seconds=3))

    invoke()

    documents = emf_documents(capsys.readouterr().out)
    pending = metric_values(documents, "Occurrences", {"service": SERVICE, "Status": PENDING})
    assert sum(pending) >= 4
    assert metric_values(documents, "Occurrences", {"service": SERVICE}) == []
    main = [d for d in documents if "ReconcileSucceeded" in d]
    assert main and all(
        d["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [["service"]] for d in main
    )
    assert all("Status" not in d for d in main)


def test_an_unreachable_database_is_reported_as_unavailable_and_never_as_a_success(
    container: Ledger, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a function whose database refuses connections
    monkeypatch.setenv("CRONLEDGER_DATABASE_URL", "postgresql+pg8000://cronledger@127.0.0.1:9/x")

    # When the scheduled event arrives
    answer = invoke()

    # Then no pass succeeded, and the EMF says why instead of claiming success
    documents = emf_documents(capsys.readouterr().out)
    assert answer["passes"] == 0
    assert metric_values(documents, "ReconcileSucceeded", {"service": SERVICE}) == []
    failures = metric_values(
        documents, "DbUnavailable", {"service": SERVICE, "Operation": "reconcile"}
    )
    assert len(failures) >= 1 and set(failures) == {1.0}


def test_a_bad_setting_fails_the_first_invocation_naming_the_variable(
    container: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CRONLEDGER_HEARTBEAT_INTERVAL_SECS", "90")

    with pytest.raises(SettingsError, match="CRONLEDGER_HEARTBEAT_INTERVAL_SECS=90"):
        invoke()


def overdue_occurrence(ledger: Ledger) -> str:
    """An occurrence half a minute past due, never claimed, of a channel that calls an
    instant overdue a second after it is due; answers its id."""
    channel = active_channel(ledger, "payroll")
    new = NewOccurrence(
        channel.channel_id,
        channel.name,
        channel.version,
        ledger.db_now() - timedelta(seconds=30),
        overdue_after_secs=1,
    )
    assert ledger.occurrences.insert_occurrence(new)
    return new.id


def test_a_tick_tells_the_bus_of_an_overdue_instant_and_sweeps_an_event_never_sent(
    container: Ledger, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given the installation's bus forwarding to a queue
    monkeypatch.setenv("CRONLEDGER_EVENT_BUS_NAME", BUS)
    monkeypatch.setenv("CRONLEDGER_INSTALLATION", INSTALLATION)
    queue = bus_to_queue()
    # And a failure whose event the function that made it never sent
    failed = failed_on_its_last_attempt(container, "invoices")
    lapse_send_leases(container)
    # And an instant past its overdue limit that nobody has reported
    overdue_id = overdue_occurrence(container)

    # When the scheduled event arrives
    answer = invoke(LONG_INVOCATION_MS)

    # Then the bus carried both: the failure from the outbox, the overdue instant as found
    details = {m["detail-type"]: m["detail"] for m in received(queue)}
    assert answer["passes"] == 1
    assert set(details) == {"Occurrence Failed", "Occurrence Overdue"}
    assert details["Occurrence Failed"]["occurrence_id"] == failed.id
    assert details["Occurrence Overdue"]["occurrence_id"] == overdue_id
    assert details["Occurrence Overdue"]["channel_name"] == "payroll"

    # And nothing waits, which is what the outbox gauges say
    assert container.events.outbox().undelivered == 0
    documents = emf_documents(capsys.readouterr().out)
    alarmed = {"service": SERVICE}
    assert metric_values(documents, "UndeliveredEvents", alarmed) == [0.0]
    assert metric_values(documents, "OldestUndeliveredEventAgeSeconds", alarmed) == [0.0]


def test_events_the_bus_cannot_take_wait_in_the_outbox_and_the_gauges_count_them(
    container: Ledger, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a bus that was never created, a failure never sent and an overdue instant
    monkeypatch.setenv("CRONLEDGER_EVENT_BUS_NAME", "no-such-bus")
    failed_on_its_last_attempt(container, "invoices")
    lapse_send_leases(container)
    overdue_occurrence(container)

    # When the scheduled event arrives
    answer = invoke(LONG_INVOCATION_MS)

    # Then the pass still succeeded, both events wait with the bus's refusal, and the
    # gauges count them, the oldest by its age
    assert answer["passes"] == 1
    waiting = container.events.list_events().data
    assert len(waiting) == 2
    assert all(e.delivered_at is None and e.last_error for e in waiting)
    documents = emf_documents(capsys.readouterr().out)
    alarmed = {"service": SERVICE}
    assert metric_values(documents, "UndeliveredEvents", alarmed) == [2.0]
    (oldest,) = metric_values(documents, "OldestUndeliveredEventAgeSeconds", alarmed)
    assert oldest > 0


def minute_channels(ledger: Ledger, count: int) -> list[str]:
    """`count` per-minute channels, each due at this minute's instant."""
    every_minute = {"schedule": "0 * * * * *", "timezone": "UTC"}
    config_hash = compile_schedule(every_minute, channel_id="any").config_hash
    minute = ledger.db_now().replace(second=0, microsecond=0)
    ids = []
    for n in range(count):
        channel = ledger.channels.create_channel(
            f"digest-{n:03d}",
            every_minute,
            {"type": "python", "callable": "tests.aws.targets:record"},
            timeout_ms=10_000,
            status=CHANNEL_ACTIVE,
        )
        upsert_cursor(ledger, channel.channel_id, 1, config_hash, minute)
        ids.append(channel.channel_id)
    with ledger.engine.begin() as conn:
        conn.execute(sa.delete(channel_changes))
    return ids


def test_a_tick_with_more_due_than_a_shard_takes_starts_the_other_shards_and_runs_the_first(
    container: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given 250 due channels, shards of 100 at most
    ids = minute_channels(container, 250)
    monkeypatch.setenv("CRONLEDGER_RECONCILE_SHARD_SIZE", "100")
    monkeypatch.setenv("CRONLEDGER_MISFIRE_GRACE_SECS", "60")
    launched: list[Shard] = []
    monkeypatch.setattr(reconcile, "launch", launched.append)

    # When the tick runs
    invoke(LONG_INVOCATION_MS)

    # Then it started shards 1 and 2 of 3 and wrote the rows of shard 0 only
    assert launched == [Shard(1, 3), Shard(2, 3)]
    written = {
        o.channel_id
        for o in container.occurrences.list_occurrences(OccurrenceFilter(limit=1000)).data
    }
    assert written == {i for i in ids if holds(Shard(0, 3), i)}

    # And when the shards' invocations run, every channel has its row
    for shard in launched:
        event = {"shard": shard.index, "shards": shard.count}
        reconcile.handler(event, FakeContext("cronledger-reconcile", LONG_INVOCATION_MS))
    written = {
        o.channel_id
        for o in container.occurrences.list_occurrences(OccurrenceFilter(limit=1000)).data
    }
    assert written == set(ids)


def test_a_shard_invocation_with_a_malformed_shard_is_refused_clearly(container: Ledger) -> None:
    with pytest.raises(CronledgerError, match=r"0 <= shard < shards, got 3 of 2"):
        reconcile.handler({"shard": 3, "shards": 2}, FakeContext("cronledger-reconcile", 3_500))
