"""A bounded schemathesis run of `/openapi.json` against the resolver over WSGI, on SQLite.

Invariant: no input, whether the document allows it or not, makes the API answer 5xx, and
every answer matches the document: a documented status, JSON, and the documented schema.

Each operation gets a few cases in three flavours: valid per the document, invalid per the
document, and valid with its path pointing at a channel and an occurrence that exist (so the
success paths are fuzzed too, not only the 404s). About 15 x 3 x 8 requests in all.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from typing import Any

import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.generation import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from cronledger.api import PREFIX, create_app, handle_event
from cronledger.ledger import Ledger, NewOccurrence
from tests.api.helpers import OK_TARGET
from tests.api.http import call, v2_event, wsgi_app

EXAMPLES_PER_FLAVOUR = 8
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


def test_no_request_gets_a_5xx_or_an_answer_the_document_does_not_describe(
    sqlite_ledger: Ledger,
) -> None:
    schema = schemathesis.openapi.from_wsgi("/openapi.json", wsgi_app(create_app(sqlite_ledger)))
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) == 18  # every route of SPEC §6 (and versions) but /openapi.json
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


def _takes_input(operation: Any) -> bool:
    return bool(operation.path_parameters or operation.query or operation.body)


def _existing_ids(ledger: Ledger, path: str) -> dict[str, Any] | None:
    """A fresh active channel with one occurrence, as the operation's path parameters."""
    if "{" not in path:
        return None
    name = f"fuzz-{len(ledger.list_channels(limit=1000).data)}"
    channel = ledger.create_channel(name, {"schedule": "* * * * * *"}, OK_TARGET, 1000, "active")
    occurrence = NewOccurrence(channel.channel_id, name, 1, ledger.db_now())
    assert ledger.insert_occurrence(occurrence)
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
