"""The OpenAPI document's `transport_config` is generated from the models the compiler reads
with, so its limits are the compiler's: a limit changed in one place shows in both."""

from __future__ import annotations

from typing import Any

from cronledger.alerts import MAX_CONSECUTIVE, MAX_OVERDUE_SECS
from cronledger.api import create_app
from cronledger.cron import config
from cronledger.labels import MAX_LABELS
from cronledger.ledger import Ledger
from tests.api.helpers import SETTINGS
from tests.api.http import call


def resolved(document: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """`schema`, or the component its `$ref` names."""
    ref = schema.get("$ref")
    if ref is None:
        return schema
    found: dict[str, Any] = document["components"]["schemas"][ref.rsplit("/", 1)[1]]
    return found


def test_the_served_limits_of_transport_config_are_the_compilers(sqlite_ledger: Ledger) -> None:
    # Given the document the API serves
    document = call(create_app(sqlite_ledger, SETTINGS), "GET", "/openapi.json").body
    body = resolved(
        document,
        document["paths"]["/api/v1/admin/channels"]["post"]["requestBody"]["content"][
            "application/json"
        ]["schema"],
    )
    keys = body["properties"]["transport_config"]["properties"]

    def bounds(schema: dict[str, Any]) -> tuple[Any, Any]:
        return schema.get("minimum"), schema.get("maximum")

    retry = resolved(document, keys["retry"])["properties"]
    concurrency = resolved(document, keys["concurrency"])["properties"]
    alerts = keys["alerts"]["properties"]

    # Then every bound is the constant the compiler checks against
    assert bounds(retry["max_attempts"]) == (1, config.MAX_ATTEMPTS)
    assert bounds(retry["backoff_secs"]) == (0, config.MAX_BACKOFF_SECS)
    assert bounds(retry["max_backoff_secs"]) == (0, config.MAX_BACKOFF_SECS)
    assert (retry["max_attempts"]["default"], retry["backoff_secs"]["default"]) == (
        config.DEFAULT_RETRY.max_attempts,
        config.DEFAULT_RETRY.backoff_secs,
    )
    assert retry["max_backoff_secs"]["default"] == config.DEFAULT_RETRY.max_backoff_secs
    assert bounds(keys["jitter_secs"]) == (0, config.MAX_JITTER_SECS)
    assert bounds(keys["max_catch_up"]) == (1, config.MAX_CATCH_UP_LIMIT)
    assert bounds(concurrency["slots"]) == (1, config.MAX_SLOTS)
    assert bounds(alerts["overdue_after_secs"]) == (1, MAX_OVERDUE_SECS)
    assert bounds(alerts["after_consecutive_failures"]) == (1, MAX_CONSECUTIVE)
    assert body["properties"]["labels"]["maxProperties"] == MAX_LABELS
    assert "labels" not in keys
    assert keys["misfire_policy"]["enum"] == ["skip", "latest", "catch_up"]
    assert concurrency["policy"]["enum"] == ["allow", "forbid", "queue_one", "replace"]
