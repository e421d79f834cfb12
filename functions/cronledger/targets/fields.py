"""Reading a target document while collecting every problem with it.

Each check records a `FieldError` at `target.<key>` and returns None instead of raising, so one
pass over a document reports all of its problems. JSON `null` on an optional key means "not
given", because clients that serialise a whole form send nulls for the fields left blank.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from cronledger.errors import FieldError


class DocumentChecks:
    def __init__(self, doc: Mapping[str, Any]) -> None:
        self.doc = doc
        self.errors: list[FieldError] = []

    def fail(self, key: str, code: str, message: str) -> None:
        self.errors.append(FieldError(f"target.{key}", code, message))

    def string(
        self,
        key: str,
        *,
        example: str,
        max_len: int,
        required: bool = True,
        pattern: re.Pattern[str] | None = None,
        pattern_hint: str = "",
    ) -> str | None:
        value = self.doc.get(key)
        if value is None:
            if required:
                self.fail(key, "required", f"{key} is required, e.g. {example!r}")
            return None
        if not isinstance(value, str):
            self.fail(key, "type_mismatch", f"{key} must be a string, e.g. {example!r}")
            return None
        if not value.strip():
            self.fail(key, "required", f"{key} must not be blank, e.g. {example!r}")
            return None
        if len(value) > max_len:
            self.fail(key, "too_long", f"{key} must be at most {max_len} characters")
            return None
        if pattern is not None and not pattern.fullmatch(value):
            self.fail(key, "invalid", f"{key} {pattern_hint}, e.g. {example!r}")
            return None
        return value

    def boolean(self, key: str) -> bool | None:
        value = self.doc.get(key)
        if value is not None and not isinstance(value, bool):
            self.fail(key, "type_mismatch", f"{key} must be true or false (a JSON boolean)")
            return None
        return value
