"""The reconcile function: an EventBridge tick runs passes until close to the deadline, and
what the alarms watch arrives as EMF under the one dimension they select."""

from __future__ import annotations

from datetime import timedelta

import pytest

from cronledger.aws import reconcile
from cronledger.ledger import CHANNEL_ACTIVE, PENDING, Channel, Ledger, OccurrenceFilter
from cronledger.schedule import compile_schedule
from cronledger.settings import SettingsError
from tests.aws.conftest import NAMESPACE, SERVICE
from tests.aws.invocations import FakeContext, emf_documents, metric_values, scheduled_event
from tests.ledger.helpers import seed_due

# Pytest resets the warning filters runtime.py sets; an invocation that records only
# dimensioned metrics (or none) is expected, and Powertools would warn about it.
pytestmark = pytest.mark.filterwarnings("ignore:No application metrics to publish")

EVERY_SECOND = {"schedule": "* * * * * *", "timezone": "UTC"}
#: Three seconds are kept back for the last round: this leaves a loop of about half a second.
SHORT_INVOCATION_MS = 3_500


def due_channel(ledger: Ledger, behind: timedelta) -> tuple[Channel, str]:
    """An active per-second channel whose cursor the scheduler left `behind` ago."""
    channel = ledger.create_channel(
        "invoices",
        EVERY_SECOND,
        {"type": "python", "callable": "tests.aws.targets:record"},
        timeout_ms=10_000,
        status=CHANNEL_ACTIVE,
    )
    schedule = compile_schedule(EVERY_SECOND, channel_id=channel.channel_id)
    cursor = (ledger.db_now() - behind).replace(microsecond=0)
    ledger.upsert_cursor(channel.channel_id, channel.version, schedule.config_hash, cursor)
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
    rows = container.list_occurrences(
        OccurrenceFilter(channel_id=channel.channel_id, limit=100)
    ).data
    instants = sorted(row.scheduled_for for row in rows)
    assert answer["passes"] >= 1
    assert instants[0].isoformat() == cursor
    assert instants[:4] == [instants[0] + timedelta(seconds=n) for n in range(4)]
    assert {row.status for row in rows} == {PENDING}
    (state,) = container.schedule_states()
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
