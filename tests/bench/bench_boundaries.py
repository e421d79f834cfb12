"""What SPEC §10's checks cost where they run on every request or attempt.

- an `http` attempt on loopback: validation against the policy, resolution, the address check
  and one request on a connection pinned to the checked address (urllib3), median and p95;
- validating an `http` target document (every header, the URL, a secret reference);
- the API's request rules (`request_rules.screen`) on a 10 KiB channel body: media type, JSON
  object, and the lone-surrogate search, with and without an escaped character to look at.
"""

from __future__ import annotations

import json
import statistics
import time
from ipaddress import ip_network
from typing import Any

from cronledger.api.request_rules import screen
from cronledger.targets import run_target, target_errors
from cronledger.targets.policy import TargetPolicy
from tests.api.helpers import channel_document
from tests.unit.fixtures_targets import RecordingServer
from tests.unit.test_targets_http import envelope

ATTEMPTS = 500
VALIDATIONS = 20_000
SCREENS = 2_000


def main() -> None:
    loopback = TargetPolicy(http_allow_networks=(ip_network("127.0.0.0/8"),))
    with RecordingServer() as server:
        doc = {"type": "http", "url": f"{server.url}/hook", "headers": {"X-Team": "ops"}}
        for _ in range(50):  # warm up: imports, the server's threads
            run_target(doc, envelope(), 5.0, policy=loopback)
        took = []
        for _ in range(ATTEMPTS):
            started = time.perf_counter()
            outcome = run_target(doc, envelope(), 5.0, policy=loopback)
            took.append(time.perf_counter() - started)
            assert outcome.ok, outcome.error
    took.sort()
    print(
        f"http attempt on loopback (check, resolve, pinned request): median "
        f"{statistics.median(took) * 1000:.2f} ms, p95 {took[int(ATTEMPTS * 0.95)] * 1000:.2f} ms "
        f"({ATTEMPTS} attempts)"
    )

    document = {
        "type": "http",
        "url": "https://hooks.example.com/nightly?team=ops",
        "headers": {"X-Team": "ops", "X-Run": "nightly"},
        "secret_headers": {"Authorization": "env:CRONLEDGER_SECRET_HOOK_TOKEN"},
    }
    started = time.perf_counter()
    for _ in range(VALIDATIONS):
        target_errors(document, TargetPolicy())
    per = (time.perf_counter() - started) / VALIDATIONS
    print(f"http target validation: {per * 1e6:.0f} us per document")

    payload = {f"key{i}": "v" * 40 for i in range(200)}
    for label, extra in (("plain text", "ok"), ("with an escaped emoji", "\U0001f600")):
        body = json.dumps(
            channel_document(
                transport_config={"schedule": "0 15 2 * * *", "payload": {**payload, "x": extra}}
            )
        )
        event: dict[str, Any] = {
            "body": body,
            "headers": {"content-type": "application/json"},
            "requestContext": {"http": {"method": "POST"}},
        }
        started = time.perf_counter()
        for _ in range(SCREENS):
            screen(event)
        per = (time.perf_counter() - started) / SCREENS
        print(f"request rules on a {len(body) / 1024:.1f} KiB body ({label}): {per * 1e6:.0f} us")
