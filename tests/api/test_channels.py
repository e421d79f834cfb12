"""Channel routes through the resolver, on PostgreSQL and SQLite.

Invariant: a channel document is validated as a whole (every problem in one 400, each at its
path) before anything is written, and every edit that is stored is a new version the ledger
reads back unchanged.
"""

from __future__ import annotations

import json
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver

from cronledger.api import create_app, handle_event
from cronledger.ledger import Ledger
from tests.api.helpers import (
    CHANNELS,
    FAIL_TARGET,
    SETTINGS,
    Api,
    Scheduler,
    channel_document,
    create_channel,
)
from tests.api.http import Answer, call, v2_event


def test_a_created_channel_is_a_draft_at_version_1_with_its_compiled_schedule(
    api: Api, ledger: Ledger
) -> None:
    answer = api("POST", CHANNELS, body=channel_document(timeout_ms=30_000))

    assert answer.status == 201
    channel = answer.data
    assert (channel["name"], channel["status"], channel["version"]) == ("nightly", "draft", 1)
    assert channel["compiled"]["schedule"] == "0 15 2 * * *"
    assert channel["compiled"]["timezone"] == "Europe/London"
    assert channel["compiled"]["next_fire_at"] is None  # no cursor before a reconcile
    assert channel["created_at"].endswith("Z")
    stored = ledger.channels.get_channel(channel["channel_id"])
    assert (stored.status, stored.timeout_ms) == ("draft", 30_000)
    assert stored.target == {"type": "python", "callable": "tests.api.jobs:ok"}


def test_a_channel_created_without_timeout_stores_the_instance_default(
    api: Api, ledger: Ledger
) -> None:
    channel = create_channel(api, status="active")

    stored = ledger.channels.get_channel(channel["channel_id"])
    assert (stored.status, stored.timeout_ms) == ("active", 60_000)


def test_a_five_error_channel_document_returns_five_details_in_one_400(
    api: Api, ledger: Ledger
) -> None:
    document = {
        "name": "nightly",
        "transport_config": {
            "schedule": "15 2 * * *",  # five fields
            "timezone": "EST",  # an abbreviation
            "misfire_polcy": "skip",  # a typo
        },
        "target": {"type": "http", "url": "ftp://example.com/hook"},  # not http(s)
        "timeout_ms": 0,  # out of range
    }

    answer = api("POST", CHANNELS, body=document)

    assert answer.status == 400
    assert answer.error["code"] == "validation_failed"
    paths = sorted(d["path"] for d in answer.error["details"])
    assert paths == [
        "target.url",
        "timeout_ms",
        "transport_config.misfire_polcy",
        "transport_config.schedule",
        "transport_config.timezone",
    ]
    assert "0 15 2 * * *" in answer.body["error"]["message"]  # the six-field spelling is shown
    assert ledger.channels.list_channels().total == 0


def test_wrong_types_and_missing_fields_are_reported_together_as_400_not_422(
    api: Api, ledger: Ledger
) -> None:
    answer = api("POST", CHANNELS, body={"name": 7, "transport_config": "daily", "colour": "red"})

    assert answer.status == 400
    details = {d["path"]: d["code"] for d in answer.error["details"]}
    assert details == {
        "name": "type_mismatch",
        "transport_config": "type_mismatch",
        "target": "required",
        "colour": "invalid",
    }
    assert ledger.channels.list_channels().total == 0


def test_text_the_database_cannot_store_is_a_400_at_its_path(api: Api, ledger: Ledger) -> None:
    document = channel_document()
    document["transport_config"]["payload"] = {"note": "nul\x00byte"}

    answer = api("POST", CHANNELS, body=document)

    assert answer.status == 400
    assert [d["path"] for d in answer.error["details"]] == ["transport_config.payload.note"]
    assert ledger.channels.list_channels().total == 0


def test_a_taken_name_is_a_409(api: Api, ledger: Ledger) -> None:
    create_channel(api)

    answer = api("POST", CHANNELS, body=channel_document())

    assert answer.status == 409
    assert answer.error["code"] == "conflict"
    assert ledger.channels.list_channels().total == 1


def test_a_malformed_body_is_a_422_in_the_error_envelope(api: Api) -> None:
    not_json = api("POST", CHANNELS, raw_body=b"{not json")
    not_an_object = api("POST", CHANNELS, body=[1, 2])

    assert not_json.status == 422
    assert not_json.error["code"] == "malformed_request"
    assert "not valid JSON" in not_json.error["message"]
    assert not_an_object.status == 422
    assert not_an_object.error["details"][0]["path"] == "body"


def test_put_writes_a_new_version_and_keeps_the_old_one(api: Api, ledger: Ledger) -> None:
    channel = create_channel(api)
    update = channel_document(transport_config={"schedule": "0 30 3 * * *"})

    answer = api("PUT", f"{CHANNELS}/{channel['channel_id']}", body=update)

    assert answer.status == 200
    assert answer.data["version"] == 2
    assert answer.data["compiled"]["schedule"] == "0 30 3 * * *"
    assert ledger.channels.get_channel(channel["channel_id"]).version == 2
    first = ledger.channels.get_channel(channel["channel_id"], version=1)
    assert first.transport_config["schedule"] == "0 15 2 * * *"


def test_put_of_an_unchanged_definition_writes_no_version(api: Api, ledger: Ledger) -> None:
    channel = create_channel(api, timeout_ms=60_000)

    answer = api("PUT", f"{CHANNELS}/{channel['channel_id']}", body=channel_document())

    assert answer.status == 200
    assert answer.data["version"] == 1
    assert ledger.channels.get_channel(channel["channel_id"]).version == 1


def test_put_refuses_a_rename_and_a_bad_target_in_one_400(api: Api, ledger: Ledger) -> None:
    channel = create_channel(api)
    update = channel_document(name="renamed", target={"type": "carrier-pigeon"})

    answer = api("PUT", f"{CHANNELS}/{channel['channel_id']}", body=update)

    assert answer.status == 400
    assert sorted(d["path"] for d in answer.error["details"]) == ["name", "target.type"]
    assert ledger.channels.get_channel(channel["channel_id"]).version == 1


def test_an_archived_channel_cannot_be_edited_or_reactivated(api: Api, ledger: Ledger) -> None:
    channel = create_channel(api, status="active")
    path = f"{CHANNELS}/{channel['channel_id']}"
    assert api("PATCH", f"{path}/status", body={"status": "archived"}).status == 200

    edit = api("PUT", path, body=channel_document(target=FAIL_TARGET))
    reactivate = api("PATCH", f"{path}/status", body={"status": "active"})

    assert (edit.status, reactivate.status) == (409, 409)
    stored = ledger.channels.get_channel(channel["channel_id"])
    assert (stored.status, stored.version) == ("archived", 1)


def test_a_status_outside_the_lifecycle_words_is_a_422(api: Api, ledger: Ledger) -> None:
    channel = create_channel(api)

    answer = api("PATCH", f"{CHANNELS}/{channel['channel_id']}/status", body={"status": "on"})

    assert answer.status == 422
    assert answer.error["details"][0]["path"] == "body.status"
    assert ledger.channels.get_channel(channel["channel_id"]).status == "draft"


def test_list_filters_by_status_and_exact_name(api: Api) -> None:
    create_channel(api, name="alpha", status="active")
    create_channel(api, name="beta")

    active = api("GET", CHANNELS, {"status": "active"})
    beta = api("GET", CHANNELS, {"name": "beta"})
    nobody = api("GET", CHANNELS, {"name": "gamma"})

    assert [c["name"] for c in active.data] == ["alpha"]
    assert (beta.body["total"], beta.data[0]["name"]) == (1, "beta")
    assert (nobody.body["total"], nobody.data) == (0, [])


def test_delete_purges_the_channel_and_a_second_delete_is_a_404(api: Api, ledger: Ledger) -> None:
    channel = create_channel(api, status="active")
    assert api("POST", f"{CHANNELS}/{channel['channel_id']}/trigger").status == 202

    first = api("DELETE", f"{CHANNELS}/{channel['channel_id']}")
    second = api("DELETE", f"{CHANNELS}/{channel['channel_id']}")

    assert (first.status, first.body) == (204, None)
    assert second.status == 404
    assert ledger.channels.list_channels().total == 0
    assert ledger.occurrences.list_occurrences().total == 0


def test_requests_answered_from_many_threads_each_get_their_own_answer(
    api: Api, app: APIGatewayHttpResolver
) -> None:
    ids = [create_channel(api, name=f"c{i}")["channel_id"] for i in range(8)]

    def read(channel_id: str) -> str:
        answer = call(app, "GET", f"{CHANNELS}/{channel_id}")
        assert answer.status == 200, answer.body
        name: str = answer.data["name"]
        return name

    def lost(n: int) -> str:
        answer = call(app, "GET", f"/no/such/route/{n}")
        message: str = answer.error["message"]
        return message

    # Switch threads as often as the interpreter can, so a request that leaned on state shared
    # between requests would see another request's.
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        with ThreadPoolExecutor(max_workers=8) as pool:
            names = list(pool.map(read, ids * 10))
            messages = list(pool.map(lost, range(200)))
    finally:
        sys.setswitchinterval(interval)

    assert names == [f"c{i}" for i in range(8)] * 10
    assert messages == [
        f"no route for GET /no/such/route/{n}; see /openapi.json" for n in range(200)
    ]


def test_a_body_that_is_not_json_text_is_refused_with_a_4xx(
    app: APIGatewayHttpResolver, ledger: Ledger
) -> None:
    def post(body: bytes, content_type: str = "application/json") -> Answer:
        event = v2_event("POST", CHANNELS, headers={"content-type": content_type}, body=body)
        result = handle_event(app, event)
        return Answer(result["statusCode"], json.loads(result["body"]), result["headers"])

    plain_text = post(b"name=nightly", "text/plain")
    not_utf8 = post(b'{"name": "\xff"}')
    too_deep = post(b"[" * 100_000 + b"]" * 100_000)

    assert (plain_text.status, plain_text.error["code"]) == (415, "unsupported_media_type")
    assert (not_utf8.status, not_utf8.error["code"]) == (422, "malformed_request")
    assert (too_deep.status, too_deep.error["code"]) == (422, "malformed_request")
    assert ledger.channels.list_channels().total == 0


def test_versions_list_newest_first_and_each_reads_as_it_was_written(
    api: Api, ledger: Ledger
) -> None:
    channel = create_channel(api)
    path = f"{CHANNELS}/{channel['channel_id']}"
    edited = channel_document(transport_config={"schedule": "0 30 3 * * *"})
    assert api("PUT", path, body=edited).data["version"] == 2

    versions = api("GET", f"{path}/versions")
    first = api("GET", f"{path}/versions/1")
    missing = api("GET", f"{path}/versions/7")
    unknown = api("GET", f"{CHANNELS}/no-such-channel/versions")

    assert versions.status == 200
    assert [(v["version"], v["current"]) for v in versions.data] == [(2, True), (1, False)]
    assert versions.data[0]["transport_config"] == {"schedule": "0 30 3 * * *"}
    assert first.data["transport_config"] == channel["transport_config"]
    assert (missing.status, unknown.status) == (404, 404)
    assert ledger.channels.get_channel(channel["channel_id"]).version == 2


def test_a_channel_may_be_created_paused_and_resumed_later(api: Api, ledger: Ledger) -> None:
    created = create_channel(api, status="paused")
    archived = api("POST", CHANNELS, body=channel_document("gone", status="archived"))

    assert created["status"] == "paused"
    assert archived.status == 400
    resumed = api("PATCH", f"{CHANNELS}/{created['channel_id']}/status", body={"status": "active"})
    assert resumed.data["status"] == "active"
    assert ledger.channels.get_channel(created["channel_id"]).status == "active"


def test_a_dry_run_answers_as_the_request_would_and_writes_nothing(
    api: Api, ledger: Ledger
) -> None:
    dry = {"dry_run": "true"}
    # A create: the channel it would make, every refusal it would give, nothing written
    created = api("POST", CHANNELS, dry, channel_document(status="active"))
    refused = api("POST", CHANNELS, dry, channel_document(transport_config={"schedule": "15 2"}))
    assert created.status == 201
    assert (created.data["name"], created.data["status"], created.data["version"]) == (
        "nightly",
        "active",
        1,
    )
    assert (refused.status, refused.error["details"][0]["path"]) == (
        400,
        "transport_config.schedule",
    )
    assert ledger.channels.list_channels().total == 0

    # A new version and a status change: the answers they would give, the channel as it was
    channel = create_channel(api)
    path = f"{CHANNELS}/{channel['channel_id']}"
    edit = {k: v for k, v in channel_document().items() if k != "name"}
    edit["transport_config"] = {"schedule": "0 30 3 * * *"}
    edited = api("PUT", path, dry, edit)
    activated = api("PATCH", f"{path}/status", dry, {"status": "active"})
    assert (edited.status, edited.data["version"]) == (200, 2)
    assert edited.data["transport_config"] == {"schedule": "0 30 3 * * *"}
    assert (activated.status, activated.data["status"]) == (200, "active")
    stored = ledger.channels.get_channel(channel["channel_id"])
    assert (stored.version, stored.status) == (1, "draft")
    assert stored.transport_config == channel["transport_config"]
    assert ledger.channels.list_channel_versions(channel["channel_id"]).total == 1
    assert ledger.cursors.schedule_states() == []

    # The refusals a state gives: a taken name, an archived channel edited or revived
    assert api("POST", CHANNELS, dry, channel_document()).status == 409
    assert api("PATCH", f"{path}/status", body={"status": "archived"}).status == 200
    assert api("PUT", path, dry, edit).status == 409
    assert api("PATCH", f"{path}/status", dry, {"status": "active"}).status == 409


def test_labels_are_stored_and_served_with_the_definition(api: Api, ledger: Ledger) -> None:
    channel = create_channel(api, labels={"team": "billing", "example.com/tier": ""})
    refused = api(
        "POST", CHANNELS, body=channel_document("bad-labels", labels={"-team": "x", "tier": 3})
    )

    stored = ledger.channels.get_channel(channel["channel_id"])
    assert stored.labels == {"team": "billing", "example.com/tier": ""}
    assert channel["labels"] == stored.labels
    assert "labels" not in stored.transport_config
    assert (refused.status, refused.error["code"]) == (400, "validation_failed")
    assert {(d["path"], d["code"]) for d in refused.error["details"]} == {
        ("labels.-team", "invalid"),
        ("labels.tier", "type_mismatch"),
    }


def test_a_labels_only_change_is_a_new_version_that_keeps_the_cursor(
    api: Api, ledger: Ledger, scheduler: Scheduler
) -> None:
    # Given an active channel labelled team=billing, reconciled once
    channel = create_channel(api, status="active", labels={"team": "billing"})
    path = f"{CHANNELS}/{channel['channel_id']}"
    scheduler.reconcile()
    [before] = ledger.cursors.schedule_states([channel["channel_id"]])

    # When only its labels change, then the same document is sent again
    relabelled = api("PUT", path, body=channel_document(labels={"team": "ops"}))
    again = api("PUT", path, body=channel_document(labels={"team": "ops"}))

    # Then the change is version 2 with the new labels, version 1 keeps the old ones, the
    # repeat writes nothing, and the scheduling hash did not move
    assert (relabelled.status, relabelled.data["version"], again.data["version"]) == (200, 2, 2)
    assert ledger.channels.get_channel(channel["channel_id"]).labels == {"team": "ops"}
    assert ledger.channels.get_channel(channel["channel_id"], version=1).labels == {
        "team": "billing"
    }
    versions = api("GET", f"{path}/versions").data
    assert [v["labels"] for v in versions] == [{"team": "ops"}, {"team": "billing"}]
    scheduler.reconcile()
    [after] = ledger.cursors.schedule_states([channel["channel_id"]])
    assert (after.config_hash, after.next_fire_at) == (before.config_hash, before.next_fire_at)


def test_two_apps_in_one_process_each_answer_from_their_own_ledger(
    app: APIGatewayHttpResolver, tmp_path: Path
) -> None:
    # Given a second app over another ledger, built after the first (the routes are shared)
    other_ledger = Ledger.connect(f"sqlite:///{tmp_path / 'other.db'}")
    other_ledger.migrate()
    other = create_app(other_ledger, SETTINGS)
    created = call(app, "POST", CHANNELS, body=channel_document(name="first-app-only"))

    # When each lists its channels, the first app after the second was built and used
    in_other = call(other, "GET", CHANNELS, query={"name": "first-app-only"})
    in_first = call(app, "GET", CHANNELS, query={"name": "first-app-only"})

    # Then each answers from its own ledger
    assert created.status == 201
    assert [c["name"] for c in in_first.data] == ["first-app-only"]
    assert in_other.data == []
    assert other_ledger.channels.list_channels().total == 0
    other_ledger.dispose()
