"""Domain errors, shared by every layer and mapped to HTTP responses in exactly one place.
`ValidationFailed` carries *every* problem found, so a document is fixed in one round trip."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class FieldError:
    """One problem with one field: `path` (e.g. `transport_config.schedule`), a `code`
    (`required`, `invalid`, `type_mismatch`, `too_long`) and a message that says how to fix it."""

    path: str
    code: str
    message: str

    def as_dict(self) -> dict[str, str]:
        return {"path": self.path, "code": self.code, "message": self.message}


class CronledgerError(Exception):
    """Base of every domain error."""


class ValidationFailed(CronledgerError):
    """A document was refused; `errors` lists every problem found."""

    def __init__(self, errors: Iterable[FieldError], message: str = "validation failed") -> None:
        self.errors: list[FieldError] = list(errors)
        detail = "; ".join(f"{e.path}: {e.message}" for e in self.errors)
        super().__init__(f"{message}: {detail}" if detail else message)


class NotFound(CronledgerError):
    """The named thing does not exist."""


class Conflict(CronledgerError):
    """The thing exists but is in a state that refuses the request."""
