"""A bounded schemathesis run of `/openapi.json` against the API as `cronledger dev` serves it,
over HTTP on 127.0.0.1, on SQLite.

Invariant: no input, whether the document allows it or not, makes the API answer 5xx, and
every answer matches the document: a documented status, JSON, and the documented schema.

Each operation gets a few cases in three flavours: valid per the document, invalid per the
document, and valid with its path pointing at a channel and an occurrence that exist (so the
success paths are fuzzed too, not only the 404s). About 15 x 3 x 8 requests in all. Then every
operation that takes a body gets bodies no document describes (nested hundreds deep, larger
than the cap, odd JSON of any shape, whole or inside a channel document), beside a channel
stored deeper than a body may be, which every listing and read must still serve.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings, strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.generation import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from cronledger.api import PREFIX, create_app, handle_event
from cronledger.api.request_rules import MAX_BODY_BYTES, MAX_DEPTH
from cronledger.ledger import Ledger, NewOccurrence
from tests.api.helpers import OK_TARGET
from tests.api.http import call, serving, v2_event

EXAMPLES_PER_FLAVOUR = 8
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


@pytest.fixture
def api_url(sqlite_ledger: Ledger) -> Iterator[str]:
    with serving(create_app(sqlite_ledger)) as url:
        yield url


def test_no_request_gets_a_5xx_or_an_answer_the_document_does_not_describe(
    sqlite_ledger: Ledger, api_url: str
) -> None:
    schema = schemathesis.openapi.from_url(f"{api_url}/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    # every route of SPEC §6 (with versions and the bulk status change) but /openapi.json
    assert len(operations) == 19
    failures: dict[str, str] = {}

    for operation in operations:
        for flavour, mode, seeded in (
            ("valid", GenerationMode.POSITIVE, False),
            ("invalid", GenerationMode.NEGATIVE, False),
            ("valid, existing ids", GenerationMode.POSITIVE, True),
        ):
            if mode is GenerationMode.NEGATIVE and not _takes_input(operation):
                continue  # nothing to get wrong (GET /health)
            path_parameters = _existing_ids(sqlite_ledger, operation.path) if seeded else None
            strategy = operation.as_strategy(mode, path_parameters=path_parameters)

            @given(case=strategy)
            @settings(
                max_examples=EXAMPLES_PER_FLAVOUR,
                deadline=None,
                database=None,
                suppress_health_check=list(HealthCheck),
            )
            def run(case: schemathesis.Case) -> None:
                case.call_and_validate(checks=CHECKS)

            try:
                run()
            except Exception as exc:  # collect every operation's failure, then report them all
                failures[f"{operation.label} ({flavour})"] = str(exc)[:2000]

    assert not failures, "\n\n".join(f"{label}:\n{text}" for label, text in failures.items())


def _nested(depth: int, leaf: Any, arrays: bool) -> Any:
    value = leaf
    for _ in range(depth):
        value = [value] if arrays else {"k": value}
    return value


_LEAF = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)
_ODD = st.recursive(
    _LEAF,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=30,
)
_DEEP = st.builds(
    _nested, st.integers(MAX_DEPTH - 4, 400), _LEAF, st.booleans()
)  # around the limit, and far past it
_HUGE = st.sampled_from([MAX_BODY_BYTES // 2, MAX_BODY_BYTES + 1]).map(lambda size: "x" * size)
_VALUES = _DEEP | _HUGE | _ODD
ODD_BODIES = st.one_of(
    _VALUES,
    _VALUES.map(lambda value: {"payload": value}),
    _VALUES.map(
        lambda value: {
            "name": "odd",
            "transport_config": {"schedule": "* * * * * *", "payload": value},
            "target": OK_TARGET,
        }
    ),
    _VALUES.map(lambda value: {"name": "odd", "transport_config": value, "target": value}),
)


def test_no_deep_huge_or_odd_body_gets_a_5xx_and_a_deep_stored_channel_is_still_served(
    sqlite_ledger: Ledger, api_url: str
) -> None:
    # Given a channel stored 300 levels deep, as the API took it before bodies were limited
    deep = sqlite_ledger.channels.create_channel(
        "stored-deep",
        {"schedule": "* * * * * *", "payload": _nested(300, 1, arrays=False)},
        OK_TARGET,
        1000,
        "active",
    )
    schema = schemathesis.openapi.from_url(f"{api_url}/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    with_bodies = [operation for operation in operations if operation.body]
    assert len(with_bodies) >= 4  # create, new version, status, backfill
    failures: dict[str, str] = {}

    # When every operation with a body is sent odd bodies, and every one without is asked
    # as the document allows (the reads about the deep channel, the listings with it)
    for operation in operations:
        path_parameters = _existing_ids(sqlite_ledger, operation.path)
        if operation.method.upper() == "GET" and path_parameters is not None:
            path_parameters["channel_id"] = deep.channel_id
        strategy = operation.as_strategy(GenerationMode.POSITIVE, path_parameters=path_parameters)
        bodies = ODD_BODIES if operation.body else st.none()

        @given(case=strategy, body=bodies)
        @settings(
            max_examples=EXAMPLES_PER_FLAVOUR * 2,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def run(case: schemathesis.Case, body: Any) -> None:
            if case.operation.body:
                case.body = body
            case.call_and_validate(checks=CHECKS)

        try:
            run()
        except Exception as exc:  # collect every operation's failure, then report them all
            failures[operation.label] = str(exc)[:2000]

    # Then none answered 5xx or anything the document does not describe
    assert not failures, "\n\n".join(f"{label}:\n{text}" for label, text in failures.items())


def _takes_input(operation: Any) -> bool:
    return bool(operation.path_parameters or operation.query or operation.body)


def _existing_ids(ledger: Ledger, path: str) -> dict[str, Any] | None:
    """A fresh active channel with one occurrence, as the operation's path parameters."""
    if "{" not in path:
        return None
    name = f"fuzz-{len(ledger.channels.list_channels(limit=1000).data)}"
    channel = ledger.channels.create_channel(
        name, {"schedule": "* * * * * *"}, OK_TARGET, 1000, "active"
    )
    occurrence = NewOccurrence(channel.channel_id, name, 1, ledger.db_now())
    assert ledger.occurrences.insert_occurrence(occurrence)
    return {"channel_id": channel.channel_id, "occurrence_id": occurrence.id}


def test_the_document_and_swagger_ui_are_served_and_every_error_is_the_envelope(
    sqlite_ledger: Ledger,
) -> None:
    app = create_app(sqlite_ledger)

    document = call(app, "GET", "/openapi.json")
    swagger = handle_event(app, v2_event("GET", "/swagger"))

    assert document.status == 200
    paths = document.body["paths"]
    assert set(paths) == {
        f"{PREFIX}/channels",
        f"{PREFIX}/channels/status",
        f"{PREFIX}/channels/{{channel_id}}",
        f"{PREFIX}/channels/{{channel_id}}/status",
        f"{PREFIX}/channels/{{channel_id}}/trigger",
        f"{PREFIX}/channels/{{channel_id}}/preview",
        f"{PREFIX}/channels/{{channel_id}}/backfill",
        f"{PREFIX}/channels/{{channel_id}}/versions",
        f"{PREFIX}/channels/{{channel_id}}/versions/{{version}}",
        f"{PREFIX}/cron/occurrences",
        f"{PREFIX}/cron/occurrences/{{occurrence_id}}",
        f"{PREFIX}/cron/occurrences/{{occurrence_id}}/retry",
        f"{PREFIX}/cron/occurrences/{{occurrence_id}}/cancel",
        f"{PREFIX}/cron/status",
        f"{PREFIX}/cron/events",
        "/health",
    }
    for operations in paths.values():
        for operation in operations.values():
            for status, response in operation["responses"].items():
                if int(status) >= 400:
                    schema = response["content"]["application/json"]["schema"]
                    assert schema == {"$ref": "#/components/schemas/ErrorEnvelope"}
    assert swagger["statusCode"] == 200
    assert swagger["headers"]["Content-Type"].startswith("text/html")


SWAGGER_ON_DEMAND = """
import sys
from cronledger.api import create_app, handle_event
from cronledger.ledger import Ledger
from tests.api.http import v2_event

def answered(path):
    answer = handle_event(app, v2_event("GET", path))
    models = "aws_lambda_powertools.event_handler.openapi.models" in sys.modules
    return [answer["statusCode"], answer["headers"]["Content-Type"].split(";")[0], models]

app = create_app(Ledger.connect(sys.argv[1]))
print([answered("/health"), answered("/swagger"), answered("/swagger")])
"""


def test_only_the_swagger_ui_builds_the_openapi_documents_models(sqlite_ledger: Ledger) -> None:
    # Given a fresh process (the models are a module, loaded once) serving the API
    done = subprocess.run(
        [sys.executable, "-c", SWAGGER_ON_DEMAND, str(sqlite_ledger.engine.url)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]

    # Then a request answers without them, and the Swagger UI's first request loads them
    assert ast.literal_eval(done.stdout) == [
        [200, "application/json", False],
        [200, "text/html", True],
        [200, "text/html", True],
    ]
