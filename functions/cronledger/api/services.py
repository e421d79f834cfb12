"""What a route serves from: the ledger, the settings and the target policy of the app that
is answering the request.

Route functions live at module level on Powertools `Router`s, shared by every app a process
builds (a test builds many). Powertools keeps the request being resolved in class-level state,
so an app answers one request at a time (`app.handle_event`); the app's services ride the same
way: the resolver sets them before it routes, and a route reads them with `serving()`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from cronledger.ledger import Ledger
from cronledger.settings import Settings
from cronledger.targets import TargetPolicy


@dataclass(frozen=True, slots=True)
class Services:
    ledger: Ledger
    settings: Settings
    #: What a target may name (`TargetPolicy.from_settings`, secrets' hosts included).
    policy: TargetPolicy


class _Current:
    services: ClassVar[Services | None] = None


def serve(services: Services) -> None:
    """Make `services` what routes serve from, for the request about to be resolved."""
    _Current.services = services


def serving() -> Services:
    """The services of the app answering the current request."""
    services = _Current.services
    if services is None:
        raise RuntimeError("no app is answering a request")
    return services
