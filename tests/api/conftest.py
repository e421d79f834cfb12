"""API fixtures: the resolver over the suite's parametrised `ledger` (PostgreSQL and SQLite,
from tests/conftest.py), a request helper, and the step-by-step scheduler of `helpers`."""

from __future__ import annotations

from typing import Any

import pytest
from aws_lambda_powertools.event_handler import APIGatewayHttpResolver

from cronledger.api import create_app
from cronledger.ledger import Ledger
from tests.api.helpers import SETTINGS, Api, Scheduler
from tests.api.http import Answer, call


@pytest.fixture
def app(ledger: Ledger) -> APIGatewayHttpResolver:
    return create_app(ledger, SETTINGS)


@pytest.fixture
def scheduler(ledger: Ledger) -> Scheduler:
    return Scheduler(ledger)


@pytest.fixture
def api(app: APIGatewayHttpResolver) -> Api:
    def request(method: str, path: str, query: Any = None, body: Any = None, **kw: Any) -> Answer:
        return call(app, method, path, query, body, **kw)

    return request
