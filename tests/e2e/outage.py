"""A ledger that is away while a test says so: the real one (and each of its stores), except
that every call made while `is_down()` fails as a lost database does."""

from __future__ import annotations

from typing import Any

from cronledger.ledger import DatabaseUnavailable, Ledger
from cronledger.ledger.store import Store


class Outage:
    """`failed_at` is when each call failed, `served_at` when each other call was made, both
    by `now()`. Subclasses say when the database is away and what time it is."""

    def __init__(self, ledger: Ledger) -> None:
        self._ledger = ledger
        self.failed_at: list[float] = []
        self.served_at: list[float] = []

    def is_down(self) -> bool:
        raise NotImplementedError

    def now(self) -> float:
        raise NotImplementedError

    def __getattr__(self, name: str) -> Any:
        real = getattr(self._ledger, name)
        if isinstance(real, Store):  # one of its stores: down as the ledger is
            inner = object.__new__(type(self))
            vars(inner).update(vars(self), _ledger=real)
            return inner
        if not callable(real):
            return real

        def call(*args: Any, **kwargs: Any) -> Any:
            if self.is_down():
                self.failed_at.append(self.now())
                raise DatabaseUnavailable("connection refused")
            self.served_at.append(self.now())
            return real(*args, **kwargs)

        return call
