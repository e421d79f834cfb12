"""The rules every request meets before a route sees it (SPEC §6, end): JSON objects only,
valid Unicode everywhere, 405 with `Allow` for a wrong method, `HEAD` wherever `GET` is."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from cronledger.api import PREFIX, create_app
from cronledger.ledger import Ledger
from tests.api.helpers import CHANNELS, SETTINGS, Api, channel_document, create_channel
from tests.api.http import call
from tests.profiles import examples

# --- 415: a body must be declared JSON ----------------------------------------------------

UNSUPPORTED = {
    "code": "unsupported_media_type",
    "message": "send the body as JSON with Content-Type: application/json",
    "details": [],
}


@pytest.mark.parametrize(
    "content_type",
    [
        None,
        "application/x-www-form-urlencoded",
        "text/plain",
        "text/plain; charset=utf-8",
        "multipart/form-data; boundary=x",
        "application/jsonp",
        "application/json-seq",
        "",
    ],
)
def test_a_body_not_declared_as_json_is_a_415_and_nothing_is_created(
    api: Api, ledger: Ledger, content_type: str | None
) -> None:
    # Given the body a web page could send across sites without asking (no JSON type; None
    # stands for no header, which API Gateway passes on as no key at all)
    raw = b'{"name": "evil", "transport_config": {"schedule": "* * * * * *"}}'
    headers = {"content-type": content_type} if content_type is not None else {}

    answer = api("POST", CHANNELS, raw_body=raw, headers=headers, json_default=False)

    assert (answer.status, answer.body["error"]) == (415, UNSUPPORTED)
    assert ledger.channels.list_channels().total == 0


def test_a_form_body_is_a_415_not_an_unknown_key(api: Api, ledger: Ledger) -> None:
    answer = api(
        "POST",
        CHANNELS,
        raw_body=b"name=evil&target=x",
        headers={"content-type": "application/x-www-form-urlencoded"},
    )

    assert (answer.status, answer.body["error"]) == (415, UNSUPPORTED)


@pytest.mark.parametrize(
    "content_type", ["application/json", "Application/JSON", "APPLICATION/JSON; charset=UTF-8"]
)
def test_the_json_media_type_is_accepted_in_any_case(
    api: Api, ledger: Ledger, content_type: str
) -> None:
    answer = api("POST", CHANNELS, body=channel_document(), headers={"content-type": content_type})

    assert answer.status == 201, answer.body
    assert ledger.channels.list_channels().total == 1


# --- 422: the body is a JSON object -------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "kind"),
    [
        (b'[{"name": "a"}]', "an array"),
        (b"[]", "an array"),
        (b'"nightly"', "a string"),
        (b"42", "a number"),
        (b"true", "a boolean"),
        (b"null", "null"),
    ],
)
def test_a_json_body_that_is_not_an_object_is_a_422(
    api: Api, ledger: Ledger, raw: bytes, kind: str
) -> None:
    answer = api("POST", CHANNELS, raw_body=raw)

    assert answer.status == 422
    assert answer.body["error"] == {
        "code": "malformed_request",
        "message": f"malformed request: the body must be a JSON object, not {kind}",
        "details": [
            {
                "path": "body",
                "code": "type_mismatch",
                "message": f"the body must be a JSON object, not {kind}",
            }
        ],
    }
    assert ledger.channels.list_channels().total == 0


# --- 400: text that is not valid Unicode --------------------------------------------------

LONE = "\ud800"
ESCAPED = "\\ud800"  # how the path shows it


@pytest.mark.parametrize(
    ("overrides", "path", "where"),
    [
        (
            {"transport_config": {"schedule": "0 0 * * * *", "payload": {LONE: 1}}},
            f"transport_config.payload.{ESCAPED}",
            "a key",
        ),
        ({"transport_config": {"schedule": LONE}}, "transport_config.schedule", "the text"),
        (
            {"transport_config": {"schedule": "0 0 * * * *", "timezone": f"Europe/{LONE}"}},
            "transport_config.timezone",
            "the text",
        ),
        (
            {
                "transport_config": {
                    "schedule": "0 0 * * * *",
                    "concurrency": {"policy": "forbid", "key": f"k{LONE}"},
                }
            },
            "transport_config.concurrency.key",
            "the text",
        ),
        (
            {
                "target": {
                    "type": "http",
                    "url": "https://example.com/hook",
                    "headers": {f"X-{LONE}": "1"},
                }
            },
            f"target.headers.X-{ESCAPED}",
            "a key",
        ),
        (
            {"transport_config": {"schedule": "0 0 * * * *", "payload": {"list": ["ok", LONE]}}},
            "transport_config.payload.list[1]",
            "the text",
        ),
        ({"name": f"n{LONE}"}, "name", "the text"),
        ({LONE: "x"}, ESCAPED, "a key"),
    ],
)
def test_invalid_unicode_anywhere_in_a_body_is_a_400_naming_the_place(
    api: Api, ledger: Ledger, overrides: dict[str, Any], path: str, where: str
) -> None:
    answer = api("POST", CHANNELS, body=channel_document(**overrides))

    assert answer.status == 400
    assert answer.body["error"] == {
        "code": "validation_failed",
        "message": f"invalid text: {path}: {where} is not valid Unicode (it holds a lone "
        "surrogate); send UTF-8 text",
        "details": [
            {
                "path": path,
                "code": "invalid",
                "message": f"{where} is not valid Unicode (it holds a lone surrogate); send "
                "UTF-8 text",
            }
        ],
    }
    assert ledger.channels.list_channels().total == 0


def test_invalid_unicode_in_an_update_a_status_change_or_a_backfill_is_a_400(api: Api) -> None:
    channel_id = create_channel(api)["channel_id"]

    answers = [
        api("PUT", f"{CHANNELS}/{channel_id}", body={"transport_config": {"schedule": LONE}}),
        api("PATCH", f"{CHANNELS}/{channel_id}/status", body={"status": LONE}),
        api("POST", f"{CHANNELS}/{channel_id}/backfill", body={"from": LONE, "to": LONE}),
    ]

    assert [a.status for a in answers] == [400, 400, 400]
    assert [a.body["error"]["details"][0]["path"] for a in answers] == [
        "transport_config.schedule",
        "status",
        "from",
    ]


def test_bytes_that_are_not_utf8_are_a_422(api: Api) -> None:
    answer = api("POST", CHANNELS, raw_body=b'{"name": "\xed\xa0\x80"}')

    assert answer.status == 422
    assert answer.body["error"]["message"] == "malformed request: the body is not UTF-8 text"


# --- 405 and HEAD -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("PATCH", CHANNELS, "GET, HEAD, POST"),
        ("DELETE", CHANNELS, "GET, HEAD, POST"),
        ("POST", f"{CHANNELS}/abc", "DELETE, GET, HEAD, PUT"),
        ("GET", f"{CHANNELS}/abc/trigger", "POST"),
        ("GET", f"{CHANNELS}/abc/status", "PATCH"),
        ("PUT", f"{PREFIX}/cron/occurrences/abc/retry", "POST"),
        ("POST", "/health", "GET, HEAD"),
        ("OPTIONS", "/health", "GET, HEAD"),
        ("POST", "/openapi.json", "GET, HEAD"),
    ],
)
def test_a_wrong_method_on_a_known_path_is_a_405_with_allow(
    api: Api, method: str, path: str, allow: str
) -> None:
    answer = api(method, path)

    assert answer.status == 405
    assert answer.headers["Allow"] == allow
    assert answer.body["error"] == {
        "code": "method_not_allowed",
        "message": f"{path} answers {allow}, not {method}",
        "details": [],
    }


def test_an_unknown_path_is_still_a_404(api: Api) -> None:
    answer = api("POST", f"{PREFIX}/nothing/here")

    assert answer.status == 404
    assert answer.body["error"]["code"] == "not_found"


@pytest.mark.parametrize("path", ["/health", CHANNELS, "/openapi.json"])
def test_head_is_answered_wherever_get_is_without_a_body(api: Api, path: str) -> None:
    get = api("GET", path)
    head = api("HEAD", path)

    assert (head.status, head.body) == (get.status, None)
    assert head.headers["Content-Type"] == get.headers["Content-Type"]


def test_head_on_a_missing_channel_is_a_404_without_a_body(api: Api) -> None:
    answer = api("HEAD", f"{CHANNELS}/no-such-channel")

    assert (answer.status, answer.body) == (404, None)


# --- fuzzed: any JSON, any text ---------------------------------------------------------

#: Text of any code point, a lone surrogate often among them.
TEXT = st.lists(
    st.one_of(st.characters(), st.sampled_from(["\ud800", "\udbff", "\udc00", "\udfff"])),
    max_size=8,
).map("".join)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=12,
)


def _holds_surrogate(value: Any) -> bool:
    if isinstance(value, str):
        return any("\ud800" <= c <= "\udfff" for c in value)
    if isinstance(value, list):
        return any(map(_holds_surrogate, value))
    if isinstance(value, dict):
        return any(_holds_surrogate(k) or _holds_surrogate(v) for k, v in value.items())
    return False


@given(
    document=st.dictionaries(TEXT, JSON, max_size=5),
    where=st.sampled_from(["top", "config", "target"]),
)
@settings(max_examples=examples(200), deadline=None, suppress_health_check=list(HealthCheck))
def test_no_json_object_gets_a_5xx_and_any_lone_surrogate_is_a_400(
    sqlite_ledger: Ledger, document: dict[str, Any], where: str
) -> None:
    app = create_app(sqlite_ledger, SETTINGS)
    body = {
        "top": document,
        "config": channel_document(transport_config={"schedule": "0 0 * * * *", **document}),
        "target": channel_document(target={"type": "http", "url": "https://e.com", **document}),
    }[where]

    answer = call(app, "POST", CHANNELS, body=body)

    assert answer.status < 500, answer.body
    # (A high and a low surrogate side by side travel as a pair: one valid character.)
    if _holds_surrogate(json.loads(json.dumps(body))):
        assert answer.status == 400
        assert answer.body["error"]["message"].startswith("invalid text: ")


# --- values at the edge of what Python can hold: a 4xx, never a 500 -------------------------


@pytest.mark.parametrize(
    ("method", "path"),
    [("POST", CHANNELS), ("PATCH", f"{CHANNELS}/any/status"), ("POST", f"{CHANNELS}/any/backfill")],
)
def test_a_number_longer_than_python_reads_is_a_422_not_a_500(
    sqlite_ledger: Ledger, method: str, path: str
) -> None:
    # Python refuses to read an integer of more than 4300 digits (a ValueError that is not a
    # JSONDecodeError), so the body is JSON no reader here will take.
    app = create_app(sqlite_ledger, SETTINGS)

    answer = call(app, method, path, raw_body=b'{"timeout_ms": ' + b"9" * 5000 + b"}")

    assert answer.status == 422, answer.body
    assert answer.body["error"]["code"] == "malformed_request"
    assert answer.body["error"]["details"][0]["path"] == "body"


_OUT_OF_RANGE = ["9999-12-31T23:59:59-23:59", "0001-01-01T00:00:00+23:59"]


@pytest.mark.parametrize("instant", _OUT_OF_RANGE)
@pytest.mark.parametrize("key", ["since", "until"])
def test_a_query_instant_that_is_out_of_range_in_utc_is_a_422(
    api: Api, key: str, instant: str
) -> None:
    answer = api("GET", f"{PREFIX}/cron/occurrences", {key: instant})

    assert answer.status == 422, answer.body
    assert answer.error["details"][0]["path"] == f"query.{key}"


@pytest.mark.parametrize("instant", _OUT_OF_RANGE)
@pytest.mark.parametrize("key", ["from", "to"])
def test_a_backfill_bound_that_is_out_of_range_in_utc_is_a_422(
    api: Api, key: str, instant: str
) -> None:
    channel = create_channel(api, status="active")
    window = {"from": "2026-01-01T00:00:00Z", "to": "2026-01-02T00:00:00Z", key: instant}

    answer = api("POST", f"{CHANNELS}/{channel['channel_id']}/backfill", body=window)

    assert answer.status == 422, answer.body
    assert answer.error["details"][0]["path"] == f"body.{key}"


@pytest.mark.parametrize(
    ("config", "path"),
    [
        ({"schedule": "0 15 2 * * *", "starts_at": _OUT_OF_RANGE[0]}, "starts_at"),
        ({"schedule": "0 15 2 * * *", "ends_at": _OUT_OF_RANGE[1]}, "ends_at"),
        ({"at": "9999-12-31T23:59:59", "timezone": "America/New_York"}, "at"),
    ],
)
def test_a_schedule_instant_that_is_out_of_range_in_utc_is_a_400_naming_it(
    api: Api, config: dict[str, Any], path: str
) -> None:
    channel = create_channel(api)

    created = api("POST", CHANNELS, body=channel_document(name="edge", transport_config=config))
    updated = api(
        "PUT",
        f"{CHANNELS}/{channel['channel_id']}",
        body={"transport_config": config, "target": channel["target"]},
    )

    for answer in (created, updated):
        assert answer.status == 400, answer.body
        assert [d["path"] for d in answer.error["details"]] == [f"transport_config.{path}"]


#: Path segments of any code point but `/`, `?` and `#`, often one no route's id matches.
_SEGMENTS = st.text(st.characters(exclude_characters="/?#", exclude_categories=("Cs",)), min_size=1)


@given(channel_id=_SEGMENTS)
@settings(max_examples=examples(200), deadline=None, suppress_health_check=list(HealthCheck))
def test_a_get_or_delete_on_any_channel_id_is_answered_never_a_405(
    api: Api, channel_id: str
) -> None:
    # Given no channel at all, when a channel is read and deleted by any id, then each is a
    # 404, never a 405: GET and DELETE are both answered on a channel's path
    for method in ("GET", "DELETE"):
        answer = api(method, f"{CHANNELS}/{channel_id}")

        assert answer.status == 404, (method, channel_id, answer.body)
        assert answer.body["error"]["code"] == "not_found"
