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
        "reconcile": 2 * 4,  # two ticks at once, each with up to four shards
        "claim": 2,
        "api": 10,
        "execute": DEFAULT_MAX_IN_FLIGHT,  # the executor's cap is max_in_flight
        "migrate": None,
    }


def test_the_executor_cap_follows_max_in_flight_and_can_be_switched_off():
    assert CronledgerProps(max_in_flight=40).reserved_concurrency()["execute"] == 40
    assert CronledgerProps(reserve_concurrency=False).reserved_concurrency() == {}


def test_the_connections_every_function_may_open_must_fit_the_database():
    # 1 ACU: Aurora allows 189 connections; 3 * (8 + 2 + 10 + 200 + 1) = 663 do not fit
    with pytest.raises(ValueError, match=r"3 \* \(.*max_in_flight 200.*\) = 663 database"):
        CronledgerProps(max_capacity_acu=1)

    # fewer executors fit: 3 * (8 + 2 + 10 + 38 + 1) = 177 <= 189 - 10
    fitted = CronledgerProps(max_capacity_acu=1, max_in_flight=38)
    assert fitted.connection_budget().connections == 177
    # and so do fewer reconcile shards: 3 * (2 * 1 + 2 + 10 + 40 + 1) = 165
    assert CronledgerProps(max_capacity_acu=1, max_in_flight=40, reconcile_shards=1)
    # and an operator who knows the database's real limit may say so
    assert CronledgerProps(max_capacity_acu=1, database_max_connections=700)


def test_aurora_max_connections_follow_the_maximum_capacity():
    assert aurora_max_connections(0.5, 1) == 189
    assert aurora_max_connections(0.5, 4) == 756
    assert aurora_max_connections(0.5, 64) == 2000  # capped with a 0.5 ACU minimum
    assert aurora_max_connections(1, 64) == 5000


def test_the_sum_counts_what_the_functions_really_hold():
    assert PROXY_POOL["pool_size"] + PROXY_POOL["max_overflow"] == CONNECTIONS_PER_CONTAINER
    assert Settings().max_in_flight == DEFAULT_MAX_IN_FLIGHT


def test_reconcile_reserves_a_container_for_every_shard_a_tick_may_start():
    props = CronledgerProps(reconcile_shards=6, max_capacity_acu=8)

    assert props.reserved_concurrency()["reconcile"] == 2 * 6
    assert props.scheduler_environment()["CRONLEDGER_RECONCILE_MAX_SHARDS"] == "6"
    with pytest.raises(ValueError, match=r"reconcile_shards must be 1\.\.64"):
        CronledgerProps(reconcile_shards=0)


def test_the_reconcile_function_may_invoke_itself_and_nothing_else(synthesized: Synthesized):
    functions = synthesized.functions()
    reconcile_id = next(i for h, i in functions.items() if h.split(".")[2] == "reconcile")
    role = synthesized.resources("AWS::Lambda::Function")[reconcile_id]["Role"]
    role_ref = {"Ref": role["Fn::GetAtt"][0]}
    invokes = [
        statement["Resource"]
        for policy in synthesized.resources("AWS::IAM::Policy").values()
        if role_ref in policy.get("Roles", [])
        for statement in policy["PolicyDocument"]["Statement"]
        if "lambda:InvokeFunction" in statement["Action"]
    ]

    assert invokes == [{"Fn::GetAtt": [reconcile_id, "Arn"]}]
