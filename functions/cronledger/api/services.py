"""What a route serves from: the ledger, settings and target policy of the answering app.

Routes live on module-level Routers shared by every app; Powertools keeps the request in
class-level state, so an app answers one request at a time and sets its services before it
routes (`serve`), for the route to read (`serving`).
"""

from __future__ import annotations

from typing import NamedTuple

from cronledger.ledger import Ledger
from cronledger.settings import Settings
from cronledger.targets.policy import TargetPolicy


class Services(NamedTuple):
    ledger: Ledger
    settings: Settings
    #: What a target may name (`TargetPolicy.from_settings`, secrets' hosts included).
    policy: TargetPolicy


_current: Services | None = None


def serve(services: Services) -> None:
    """Make `services` what routes serve from, for the request about to be resolved."""
    global _current
    _current = services


def serving() -> Services:
    """The services of the app answering the current request."""
    if _current is None:
        raise RuntimeError("no app is answering a request")
    return _current
