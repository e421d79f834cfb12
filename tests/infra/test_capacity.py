"""Reserved concurrency keeps the ticks and the API from being starved and the executors within
what the database accepts; the connections all functions may open are one sum, checked at
synth against the database's limit (infra/cronledger_infra/capacity.py)."""

from __future__ import annotations

import pytest

from cronledger.aws.database import PROXY_POOL
from cronledger.settings import Settings
from cronledger_infra.capacity import (
    CONNECTIONS_PER_CONTAINER,
    DEFAULT_MAX_IN_FLIGHT,
    aurora_max_connections,
)
from cronledger_infra.props import CronledgerProps
from tests.infra.synthesis import Synthesized

pytestmark = pytest.mark.xdist_group(name="infra")


def test_the_ticks_the_api_and_the_executor_reserve_their_concurrency(synthesized: Synthesized):
    functions = synthesized.resources("AWS::Lambda::Function")
    reserved = {
        handler.split(".")[2]: functions[logical_id].get("ReservedConcurrentExecutions")
        for handler, logical_id in synthesized.functions().items()
    }

    assert reserved == {
        "reconcile": 2,
        "claim": 2,
        "api": 10,
        "execute": DEFAULT_MAX_IN_FLIGHT,  # the executor's cap is max_in_flight
        "migrate": None,
    }


def test_the_executor_cap_follows_max_in_flight_and_can_be_switched_off():
    assert CronledgerProps(max_in_flight=40).reserved_concurrency()["execute"] == 40
    assert CronledgerProps(reserve_concurrency=False).reserved_concurrency() == {}


def test_the_connections_every_function_may_open_must_fit_the_database():
    # 1 ACU: Aurora allows 189 connections; 3 * (2 + 2 + 10 + 100 + 1) = 345 do not fit
    with pytest.raises(ValueError, match=r"3 \* \(.*max_in_flight 100.*\) = 345 database"):
        CronledgerProps(max_capacity_acu=1)

    # fewer executors fit: 3 * (2 + 2 + 10 + 40 + 1) = 165 <= 189 - 10
    fitted = CronledgerProps(max_capacity_acu=1, max_in_flight=40)
    assert fitted.connection_budget().connections == 165
    # and an operator who knows the database's real limit may say so
    assert CronledgerProps(max_capacity_acu=1, database_max_connections=400)


def test_aurora_max_connections_follow_the_maximum_capacity():
    assert aurora_max_connections(0.5, 1) == 189
    assert aurora_max_connections(0.5, 4) == 756
    assert aurora_max_connections(0.5, 64) == 2000  # capped with a 0.5 ACU minimum
    assert aurora_max_connections(1, 64) == 5000


def test_the_sum_counts_what_the_functions_really_hold():
    assert PROXY_POOL["pool_size"] + PROXY_POOL["max_overflow"] == CONNECTIONS_PER_CONTAINER
    assert Settings().max_in_flight == DEFAULT_MAX_IN_FLIGHT
