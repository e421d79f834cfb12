"""How deep and how large a body may be, and what is served of a channel stored deeper.

Invariant: a body nested deeper than `MAX_DEPTH` or larger than `MAX_BODY_BYTES` is a 4xx in
the error shape, naming where it goes too deep, before anything is stored; whatever is
accepted is served back whole; and a channel stored with a deeper definition before the limit
existed is still listed and read (its too-deep part as JSON text), never a 500.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from cronledger.api.documents import read_new_channel
from cronledger.api.request_rules import MAX_BODY_BYTES, MAX_DEPTH, TOO_DEEP
from cronledger.errors import ValidationFailed
from cronledger.ledger import Ledger
from cronledger.targets.policy import TargetPolicy
from tests.api.helpers import CHANNELS, OK_TARGET, SETTINGS, Api, channel_document, create_channel

SCHEDULE = "0 15 2 * * *"


def nested(levels: int, leaf: Any = 1) -> dict[str, Any]:
    """`{"a": {"a": … {"a": leaf}}}`, `levels` objects deep."""
    value: Any = leaf
    for _ in range(levels):
        value = {"a": value}
    result: dict[str, Any] = value
    return result


def payload_path(levels_below: int) -> str:
    """The path of the object `levels_below` levels inside a channel document's payload."""
    return "transport_config.payload" + ".a" * levels_below


#: In a channel document the payload is the third level (document, transport_config,
#: payload): the first object too deep is this many levels below it.
FIRST_TOO_DEEP_BELOW_PAYLOAD = MAX_DEPTH + 1 - 3


def test_a_payload_nested_300_deep_is_refused_naming_its_path_on_create_and_on_update(
    api: Api, ledger: Ledger
) -> None:
    # Given a channel, and a payload of 300 nested objects (about 2 KB)
    channel = create_channel(api)
    config = {"schedule": SCHEDULE, "payload": nested(300)}
    assert len(json.dumps(config)) < 2500

    created = api("POST", CHANNELS, body=channel_document(name="deep", transport_config=config))
    updated = api(
        "PUT",
        f"{CHANNELS}/{channel['channel_id']}",
        body={"transport_config": config, "target": OK_TARGET},
    )

    # Then both are refused in the error shape, naming the first object too deep
    for answer in (created, updated):
        assert answer.status == 422, answer.body
        assert answer.error == {
            "code": "malformed_request",
            "message": f"malformed request: {TOO_DEEP}",
            "details": [
                {
                    "path": payload_path(FIRST_TOO_DEEP_BELOW_PAYLOAD),
                    "code": "invalid",
                    "message": TOO_DEEP,
                }
            ],
        }
    # …and nothing was stored: one channel, still at its first version, and it is readable
    listed = api("GET", CHANNELS)
    read = api("GET", f"{CHANNELS}/{channel['channel_id']}")
    assert (listed.status, read.status) == (200, 200)
    assert [c["name"] for c in listed.data] == ["nightly"]
    assert read.data["version"] == 1
    assert ledger.channels.get_channel(channel["channel_id"]).version == 1


def test_a_payload_at_the_depth_limit_is_stored_and_served_back_whole(
    api: Api, ledger: Ledger
) -> None:
    # Given a document whose deepest object is exactly at the limit
    payload = nested(FIRST_TOO_DEEP_BELOW_PAYLOAD - 1, leaf={})
    config = {"schedule": SCHEDULE, "payload": payload}

    created = api("POST", CHANNELS, body=channel_document(name="at-limit", transport_config=config))

    assert created.status == 201, created.body
    assert created.data["transport_config"]["payload"] == payload
    assert api("GET", CHANNELS).data[0]["transport_config"]["payload"] == payload
    assert (
        ledger.channels.get_channel(created.data["channel_id"]).transport_config["payload"]
        == payload
    )


def test_an_array_nested_too_deep_anywhere_in_a_body_is_refused_naming_it(api: Api) -> None:
    # Given arrays in arrays under `target.x`, the third level, down to one level too deep
    arrays: Any = []
    for _ in range(MAX_DEPTH - 2):
        arrays = [arrays]

    answer = api("POST", CHANNELS, body={"name": "x", "target": {"type": "python", "x": arrays}})

    assert answer.status == 422, answer.body
    assert answer.error["details"][0]["path"] == "target.x" + "[0]" * (MAX_DEPTH - 2)


def test_a_body_nested_deeper_than_python_reads_is_refused_in_the_error_shape(
    api: Api, ledger: Ledger
) -> None:
    raw = b'{"a":' * 50_000 + b"1" + b"}" * 50_000

    answer = api("POST", CHANNELS, raw_body=raw)

    assert answer.status == 422, answer.body
    assert answer.error["code"] == "malformed_request"
    assert answer.error["details"] == [{"path": "body", "code": "invalid", "message": TOO_DEEP}]
    assert ledger.channels.list_channels().total == 0


def test_a_body_over_the_size_cap_is_a_413_in_the_error_shape(api: Api, ledger: Ledger) -> None:
    document = channel_document(name="huge")
    document["transport_config"]["payload"] = {"blob": "x" * MAX_BODY_BYTES}

    answer = api("POST", CHANNELS, body=document)

    assert answer.status == 413, answer.body
    assert answer.error["code"] == "too_large"
    assert answer.error["details"][0]["path"] == "body"
    assert f"at most {MAX_BODY_BYTES} are accepted" in answer.error["message"]
    assert ledger.channels.list_channels().total == 0


def test_whoever_calls_the_document_check_a_definition_too_deep_is_refused_naming_it() -> None:
    document = channel_document(transport_config={"schedule": SCHEDULE, "payload": nested(80)})

    with pytest.raises(ValidationFailed) as refused:
        read_new_channel(document, 5000, TargetPolicy.from_settings(SETTINGS))

    assert [e.as_dict() for e in refused.value.errors] == [
        {
            "path": payload_path(FIRST_TOO_DEEP_BELOW_PAYLOAD),
            "code": "invalid",
            "message": TOO_DEEP,
        }
    ]


def test_a_channel_stored_deeper_before_the_limit_is_still_listed_and_read(
    api: Api, ledger: Ledger
) -> None:
    # Given a channel written straight to the ledger with a 300-deep payload, as the API
    # accepted before bodies were limited, beside an ordinary one
    deep = ledger.channels.create_channel(
        "deep", {"schedule": SCHEDULE, "payload": nested(300)}, OK_TARGET, 5000
    )
    plain = create_channel(api)

    # When it is listed and read, with its versions
    listed = api("GET", CHANNELS)
    read = api("GET", f"{CHANNELS}/{deep.channel_id}")
    versions = api("GET", f"{CHANNELS}/{deep.channel_id}/versions")
    version = api("GET", f"{CHANNELS}/{deep.channel_id}/versions/1")

    # Then every answer is a 200, and the payload is served to the limit, the rest of it
    # as its JSON text
    assert [a.status for a in (listed, read, versions, version)] == [200] * 4
    assert {c["name"] for c in listed.data} == {"deep", plain["name"]}
    for served in (read.data, versions.data[0], version.data):
        payload = served["transport_config"]["payload"]
        for _ in range(FIRST_TOO_DEEP_BELOW_PAYLOAD):
            payload = payload["a"]
        assert isinstance(payload, str)
        assert json.loads(payload) == nested(300 - FIRST_TOO_DEEP_BELOW_PAYLOAD)
    # …and it still compiles and runs as stored
    assert read.data["compiled"] is not None
    assert ledger.channels.get_channel(deep.channel_id).transport_config["payload"] == nested(300)


def test_a_channel_stored_deeper_takes_a_new_version_within_the_limit(
    api: Api, ledger: Ledger
) -> None:
    deep = ledger.channels.create_channel(
        "deep", {"schedule": SCHEDULE, "payload": nested(300)}, OK_TARGET, 5000
    )

    refused = api(
        "PUT",
        f"{CHANNELS}/{deep.channel_id}",
        body={"transport_config": {"schedule": SCHEDULE, "payload": nested(300)},
              "target": OK_TARGET},
    )  # fmt: skip
    fixed = api(
        "PUT",
        f"{CHANNELS}/{deep.channel_id}",
        body={"transport_config": {"schedule": SCHEDULE, "payload": {"a": 1}},
              "target": OK_TARGET},
    )  # fmt: skip

    assert refused.status == 422
    assert fixed.status == 200, fixed.body
    assert fixed.data["version"] == 2
    assert ledger.channels.get_channel(deep.channel_id).transport_config["payload"] == {"a": 1}
