"""Labels: a channel's `key: value` tags, spelled as Kubernetes spells them.

A key is an optional DNS-subdomain prefix and `/`, then a name of at most 63 characters of
`[A-Za-z0-9]` with `-`, `_` or `.` inside; a value is empty or such a name; at most 64 labels.
They never decide when a channel fires (not in the scheduling hash). A selector is a set of
`key=value` terms a channel must all carry.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Annotated, Any, Final

from pydantic import BeforeValidator, Field, ValidationError
from pydantic_core import InitErrorDetails

from cronledger.errors import FieldError, ValidationFailed
from cronledger.validation import json_type, refused

MAX_LABELS: Final = 64
NAME_MAX: Final = 63
PREFIX_MAX: Final = 253
NAME: Final = re.compile(rf"([A-Za-z0-9]([-A-Za-z0-9_.]{{0,{NAME_MAX - 2}}}[A-Za-z0-9])?)")
PREFIX: Final = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_NAME_RULE: Final = (
    f"at most {NAME_MAX} letters, digits, '-', '_' or '.', starting and ending with a letter "
    "or digit"
)
KEY_PATTERN: Final = rf"^(({PREFIX.pattern})/)?{NAME.pattern}$"
VALUE_PATTERN: Final = rf"^({NAME.pattern})?$"


def key_problem(key: str) -> str | None:
    """Why `key` is not a label key, or None."""
    prefix, slash, name = key.rpartition("/")
    if slash and not (len(prefix) <= PREFIX_MAX and PREFIX.fullmatch(prefix)):
        return (
            f"the prefix {prefix!r} must be a DNS subdomain (lower-case letters, digits, '-' "
            f"and '.', at most {PREFIX_MAX} characters), e.g. example.com/team"
        )
    if not NAME.fullmatch(name):
        return f"the name {name!r} must be {_NAME_RULE}, e.g. team or example.com/team"
    return None


def _labels(value: Any) -> Any:
    if not isinstance(value, dict):
        raise refused(
            "type_mismatch",
            f'must be an object of label keys to values, got {json_type(value)}; e.g. {{"team": '
            '"billing"}',
        )
    if len(value) > MAX_LABELS:
        raise refused("too_long", f"has {len(value)} labels; at most {MAX_LABELS} are allowed")
    problems: list[InitErrorDetails] = []
    for key, text in value.items():
        problem = key_problem(str(key))
        if problem is not None:
            problems.append(_at(key, "invalid", f"is not a label key: {problem}"))
        elif not isinstance(text, str):
            problems.append(
                _at(key, "type_mismatch", f'must be a string, got {json_type(text)}; "" for none')
            )
        elif text and not NAME.fullmatch(text):
            problems.append(_at(key, "invalid", f"the value must be empty or {_NAME_RULE}"))
    if problems:
        raise ValidationError.from_exception_data("labels", problems)
    return value


def _at(key: str, code: str, message: str) -> InitErrorDetails:
    return {"type": refused(code, message), "loc": (key,), "input": None}


Labels = Annotated[
    dict[str, str],
    BeforeValidator(_labels),
    Field(
        description="label key → value, as Kubernetes labels: not in the scheduling hash",
        json_schema_extra={
            "maxProperties": MAX_LABELS,
            "propertyNames": {"pattern": KEY_PATTERN, "maxLength": PREFIX_MAX + 1 + NAME_MAX},
            "additionalProperties": {"type": "string", "pattern": VALUE_PATTERN},
            "example": {"team": "billing", "example.com/tier": "gold"},
        },
    ),
]
"""A channel's labels (see the module header)."""


def selector(terms: Iterable[str]) -> dict[str, str]:
    """`key=value` terms, every one required (AND), as one map; `ValidationFailed` naming
    each term at `label` that is not a label key and value, or that gives a key twice."""
    wanted: dict[str, str] = {}
    problems: list[FieldError] = []
    for term in terms:
        key, equals, value = term.partition("=")
        problem = key_problem(key) if equals else "write it as key=value, e.g. team=billing"
        if problem is None and value and not NAME.fullmatch(value):
            problem = f"the value must be empty or {_NAME_RULE}"
        if problem is None and wanted.get(key, value) != value:
            problem = f"gives {key} a second value: a channel has one value per label"
        if problem is not None:
            problems.append(
                FieldError("label", "invalid", f"{term!r} is not a label selector: {problem}")
            )
        else:
            wanted[key] = value
    if problems:
        raise ValidationFailed(problems, "invalid label selector")
    return wanted
