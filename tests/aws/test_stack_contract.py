"""The functions and the stack agree: the handlers it names exist, the metrics and dimension
its alarms select are the ones emitted, the variables it sets are the ones read; and importing
a handler, as Lambda does before the first invocation, reads no setting and opens nothing."""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
from typing import Any

import sqlalchemy as sa

import cronledger
from cronledger import alerts, claim as claim_loop, metrics, reconcile
from cronledger.aws import claim, database, migrate, runtime, wake
from cronledger.outbox import detail_type
from cronledger.settings import Settings
from tests.aws.stack import INFRA, constants, handler_modules, lambda_import_environment


def test_every_handler_the_stack_names_is_a_function_of_this_package() -> None:
    handlers = constants("functions")["HANDLERS"]

    assert set(handlers) == {"reconcile", "claim", "execute", "api", "migrate", "channels"}
    for path in handlers.values():
        module, name = path.rsplit(".", 1)
        assert callable(getattr(importlib.import_module(module), name)), path


def test_the_alarmed_metrics_and_their_one_dimension_are_the_ones_the_handlers_emit() -> None:
    alarms = constants("monitoring")

    assert alarms["BACKLOG_METRIC"] == metrics.OLDEST_PENDING_AGE
    assert alarms["RECONCILE_METRIC"] == runtime.RECONCILE_SUCCEEDED
    assert alarms["LAG_METRIC"] == metrics.SCHEDULE_LAG
    assert alarms["DB_UNAVAILABLE_METRIC"] == metrics.DB_UNAVAILABLE
    assert alarms["DB_OPERATIONS"] == (reconcile.JOB, claim_loop.JOB)  # every Operation recorded
    assert alarms["UNDELIVERED_AGE_METRIC"] == metrics.OLDEST_UNDELIVERED_EVENT_AGE
    # The service name is the Powertools logger's name: the package's loggers must sit under it.
    assert constants("functions")["SERVICE_NAME"] == cronledger.__name__


def test_the_variables_the_stack_sets_are_the_ones_the_functions_read() -> None:
    stack_database = set(re.findall(r'"(CRONLEDGER_DB_\w+)"', (INFRA / "database.py").read_text()))
    functions_source = (INFRA / "functions.py").read_text()

    assert stack_database == {
        database.DB_HOST,
        database.DB_PORT,
        database.DB_NAME,
        database.DB_USER,
        database.DB_IAM_AUTH,
        migrate.APP_USER,  # the role migrate grants
        database.DB_PROXY,
        database.DB_ADMIN_SECRET_ARN,
    }
    assert f'"{claim.EXECUTE_FUNCTION_NAME}"' in functions_source
    migration = set(re.findall(r'"(CRONLEDGER_\w+)"', (INFRA / "migration.py").read_text()))
    assert migration == {migrate.SECRET_ARN, "CRONLEDGER_DB_SOCKET_TIMEOUT_SECS"}
    assert (
        Settings.from_env({"CRONLEDGER_DB_SOCKET_TIMEOUT_SECS": "300"}).db_socket_timeout_secs
        == 300
    )
    assert f'"{wake.CLAIM_FUNCTION_NAME}"' in functions_source
    bus = constants("bus")
    told = Settings.from_env(
        {bus["BUS_VARIABLE"]: "acme-events", bus["INSTALLATION_VARIABLE"]: "acme"}
    )
    assert (told.event_bus_name, told.installation) == ("acme-events", "acme")


def test_the_alert_rules_match_the_detail_types_of_the_kinds_a_channel_delivers_by_default() -> (
    None
):
    assert set(constants("bus")["ALERT_DETAIL_TYPES"]) == {
        detail_type(kind) for kind in alerts.DEFAULT_ON
    }


IMPORT_WITHOUT_NETWORK = """
import socket, sys

def refuse(*args, **kwargs):
    raise AssertionError("a handler module touched the network while being imported")

socket.socket.connect = refuse
socket.socket.connect_ex = refuse
socket.create_connection = refuse
socket.getaddrinfo = refuse
for module in sys.argv[1:]:
    __import__(module)
print("imported", len(sys.argv) - 1)
"""


def test_importing_every_handler_reads_no_setting_and_touches_no_network() -> None:
    modules = sorted(set(handler_modules().values()))

    done = subprocess.run(
        [sys.executable, "-c", IMPORT_WITHOUT_NETWORK, *modules],
        env=lambda_import_environment(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == f"imported {len(modules)}"


TRACED_AFTER_IMPORT = """
import sys

from aws_xray_sdk.core.patcher import _PATCHED_MODULES as patched

HTTP_TARGET = "cronledger.targets.pinned_http"

def state():
    http_target = sys.modules.get(HTTP_TARGET)
    return {
        "patched": sorted(patched),
        "loaded": sorted(m for m in ("botocore.session", HTTP_TARGET) if m in sys.modules),
        "http target traced": hasattr(getattr(http_target, "send", None), "__wrapped__"),
    }

__import__(sys.argv[1])
print(state())
import botocore.session, cronledger.targets.pinned_http
print(state())
"""


def traced_after_import(module: str) -> list[dict[str, Any]]:
    """Which libraries X-Ray has patched, which of botocore's clients and the http target's
    sender are loaded, and whether that sender is traced, after importing `module` as Lambda
    does, then after loading both."""
    done = subprocess.run(
        [sys.executable, "-c", TRACED_AFTER_IMPORT, module],
        env=lambda_import_environment(),  # tracing is on, as on Lambda
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return [ast.literal_eval(line) for line in done.stdout.splitlines()]


def test_tracing_patches_aws_and_http_when_a_function_loads_them() -> None:
    # reconcile never calls AWS: it does not load botocore's clients to trace them
    imported, later = traced_after_import("cronledger.aws.reconcile")
    assert imported["patched"] == []
    assert "botocore.session" not in imported["loaded"]
    # they are traced, as the http target's requests are, as soon as something loads them
    assert later == {
        "patched": ["botocore"],
        "loaded": ["botocore.session", "cronledger.targets.pinned_http"],
        "http target traced": True,
    }
    # claim calls Lambda on every invocation: its clients are loaded, and traced, at import
    imported, _ = traced_after_import("cronledger.aws.claim")
    assert imported["patched"] == ["botocore"]
    assert "botocore.session" in imported["loaded"]


#: What X-Ray emits, kept in `emitted`; `walk` flattens an entity and its subsegments.
CAPTURED_TRACE = """
from aws_xray_sdk.core import xray_recorder

class Emitted:
    def __init__(self):
        self.entities = []
    def send_entity(self, entity):
        self.entities.append(entity.to_dict())
    def set_daemon_address(self, address):
        pass

def walk(entity):
    return [entity] + [e for s in entity.get("subsegments", []) for e in walk(s)]

emitted = Emitted()
xray_recorder.configure(emitter=emitted)
"""

HTTP_TARGET_UNDER_A_TRACE = (
    CAPTURED_TRACE
    + """
import http.server, threading, time
import cronledger.aws.execute  # as Lambda imports the handler: tracing on, HTTP patched
from cronledger.aws.runtime import tracer
from cronledger.targets import pinned_http
from cronledger.targets.addresses import literal_address

class Hook(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(204)
        self.end_headers()
    def log_message(self, *args):
        pass

server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hook)
threading.Thread(target=server.serve_forever, daemon=True).start()
with tracer.provider.in_subsegment("## attempt"):
    answer = pinned_http.send(
        scheme="http", host="127.0.0.1", port=server.server_address[1],
        addresses=[literal_address("127.0.0.1")], method="POST", target="/hook/T0K3N?sig=S3CR3T",
        headers={}, body=b"{}", deadline=time.monotonic() + 10,
    )
traced = [e for emitted_entity in emitted.entities for e in walk(emitted_entity)]
request = [e for e in traced if e["name"] == "127.0.0.1"]
print(repr([answer.status, sorted({e["name"] for e in traced}), request]))
"""
)


def under_a_trace(script: str, **environment: str) -> subprocess.CompletedProcess[str]:
    """`script` run as on Lambda, inside an invocation's sampled trace; it must succeed."""
    done = subprocess.run(
        [sys.executable, "-c", script],
        env={
            **lambda_import_environment(),
            **environment,
            "_X_AMZN_TRACE_ID": "Root=1-5759e988-bd862e3fe1be46a994272793;"
            "Parent=53995c3f42cd8ad8;Sampled=1",
        },
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def test_an_http_targets_request_is_a_subsegment_of_the_invocations_trace() -> None:
    # Given the execute handler imported as on Lambda, inside an invocation's trace
    done = under_a_trace(HTTP_TARGET_UNDER_A_TRACE)

    # When the http target's request is answered, Then the trace holds it, named by its host,
    # with its method, status and origin, and nothing of its path or query
    status, names, (request,) = ast.literal_eval(done.stdout)
    assert status == 204
    assert names == ["## attempt", "127.0.0.1"]
    assert request["namespace"] == "remote"
    origin = request["http"]["request"]["url"]
    assert request["http"]["request"]["method"] == "POST" and origin.startswith("http://127.0.0.1:")
    assert request["http"]["response"]["status"] == 204
    assert "T0K3N" not in repr(request) and "S3CR3T" not in repr(request)


SQL_UNDER_A_TRACE = (
    CAPTURED_TRACE
    + """
import cronledger.aws.reconcile  # as Lambda imports the handler: tracing on
import sqlalchemy as sa
from cronledger.aws import runtime

with runtime.tracer.provider.in_subsegment("## pass"):
    with runtime.ledger().engine.connect() as connection:
        connection.execute(sa.text("SELECT :secret"), {"secret": "S3CR3T"})
        try:
            connection.execute(sa.text("SELECT no_such_column"))
        except sa.exc.DBAPIError:
            pass
traced = [e for emitted_entity in emitted.entities for e in walk(emitted_entity)]
print(repr([{k: e.get(k) for k in ("id", "parent_id", "name", "namespace", "sql", "fault")} for e in traced]))
"""
)


def test_each_ledger_statement_is_a_subsegment_of_the_invocations_trace(
    pg_database_url: str,
) -> None:
    # Given a function's ledger, built as on Lambda (tracing on), inside an invocation's trace
    done = under_a_trace(
        SQL_UNDER_A_TRACE,
        CRONLEDGER_DATABASE_URL=pg_database_url,
        CRONLEDGER_POLL_INTERVAL_MS="1000",
    )

    # When it runs a statement and one the database refuses, Then each is a remote subsegment
    # of the trace with X-Ray's SQL fields, the refused one a fault, and no value is recorded
    url = sa.make_url(pg_database_url)
    traced = ast.literal_eval(done.stdout)
    statements = [e for e in traced if e["name"] == f"{url.database}@{url.host}"]
    (parent,) = [e for e in traced if e["name"] == "## pass"]
    assert len(statements) >= 2
    for statement in statements:
        assert statement["namespace"] == "remote" and statement["parent_id"] == parent["id"]
        assert statement["sql"]["database_type"] == "postgresql"
        assert statement["sql"]["user"] == url.username
        assert statement["sql"]["driver_version"] == "pg8000"
    assert [e["fault"] for e in statements[-2:]] == [None, True]
    assert "S3CR3T" not in done.stdout
