"""A channel's alert rules, validated with every problem at its path, and what each event does
to its alert state, checked over random runs of events against a plain reading of the rules."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from cronledger.alerts import (
    ABANDONED,
    ATTEMPT_FAILED,
    CANCELLED,
    COMPLETED,
    DEFAULT_ON,
    FAILED,
    KINDS,
    OVERDUE,
    RECOVERED,
    SKIPPED,
    STALLED,
    AlertRules,
    AlertState,
    advance,
    rules_of,
)
from cronledger.cron import ScheduleInvalid, compile_schedule


def test_without_alerts_a_channel_is_told_of_failures_misses_and_recovery() -> None:
    assert rules_of({}) == AlertRules()
    assert {FAILED, ABANDONED, OVERDUE, STALLED, RECOVERED} == DEFAULT_ON
    assert compile_schedule({"schedule": "0 * * * * *"}, "c").alerts == AlertRules()


def test_every_problem_of_alerts_is_reported_with_its_path() -> None:
    with pytest.raises(ScheduleInvalid) as refused:
        compile_schedule(
            {
                "schedule": "0 * * * * *",
                "alerts": {
                    "on": ["failed", "nope", 3],
                    "overdue_after_secs": 0,
                    "after_consecutive_failures": True,
                    "overdue_afer_secs": 5,
                },
            },
            "c",
        )
    paths = {(e.path, e.code) for e in refused.value.errors}
    assert paths == {
        ("transport_config.alerts.on[1]", "invalid"),
        ("transport_config.alerts.on[2]", "invalid"),
        ("transport_config.alerts.overdue_after_secs", "invalid"),
        ("transport_config.alerts.after_consecutive_failures", "type_mismatch"),
        ("transport_config.alerts.overdue_afer_secs", "invalid"),
    }
    typo = next(e for e in refused.value.errors if e.path.endswith("overdue_afer_secs"))
    assert 'did you mean "overdue_after_secs"?' in typo.message


def test_alerts_are_not_in_the_scheduling_hash() -> None:
    plain = compile_schedule({"schedule": "0 * * * * *"}, "c")
    told = compile_schedule({"schedule": "0 * * * * *", "alerts": {"on": []}}, "c")
    assert plain.config_hash == told.config_hash
    assert told.alerts.on == frozenset()


def test_kinds_may_be_written_short_or_in_full() -> None:
    rules = rules_of({"alerts": {"on": ["failed", "channel.stalled"]}})
    assert rules.on == {FAILED, STALLED}


def test_a_stored_document_that_no_longer_reads_keeps_the_defaults() -> None:
    assert rules_of({"alerts": {"on": "failed"}}) == AlertRules()
    assert rules_of(None) == AlertRules()


ENDINGS = st.sampled_from(
    [COMPLETED, FAILED, ABANDONED, ATTEMPT_FAILED, SKIPPED, CANCELLED, OVERDUE, STALLED]
)


@given(
    kinds=st.lists(ENDINGS, max_size=40),
    on=st.frozensets(st.sampled_from(sorted(KINDS.values()))),
    after=st.integers(1, 4),
)
def test_delivered_events_are_numbered_without_gaps_and_follow_the_rules(
    kinds: list[str], on: frozenset[str], after: int
) -> None:
    rules = AlertRules(on=on, after_consecutive_failures=after)
    state = AlertState()
    numbers: list[int] = []
    run = 0
    open_alert = False
    for kind in kinds:
        before = state
        state, recorded = advance(state, rules, kind)
        delivered = [k for k, deliver in recorded if deliver]
        numbers.extend(range(before.sequence + 1, state.sequence + 1))
        assert state.sequence - before.sequence == len(delivered)
        # a plain reading of the rules
        if kind == COMPLETED:
            expected = ([RECOVERED] if open_alert and RECOVERED in on else []) + (
                [COMPLETED] if COMPLETED in on else []
            )
            assert delivered == expected
            assert [k for k, _ in recorded if k == RECOVERED] == ([RECOVERED] if open_alert else [])
            run, open_alert = 0, False
        else:
            run += kind in (FAILED, ABANDONED)
            told = kind in on and (kind != FAILED or run >= after)
            assert delivered == ([kind] if told else [])
            open_alert = open_alert or (told and kind in (FAILED, ABANDONED, OVERDUE, STALLED))
        assert state.consecutive_failures == run
        assert (state.open_alert is not None) == open_alert
    assert numbers == list(range(1, len(numbers) + 1))
