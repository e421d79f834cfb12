"""Reading a channel document: every problem with it, at once, or a definition safe to store.

One pass checks the name, `transport_config` (by compiling it), `target`, `timeout_ms` and
`status`, refuses unknown keys, and refuses values the database cannot hold (NUL characters,
lone surrogates, non-finite numbers) or the API could not serve back (objects and arrays
nested deeper than `request_rules.MAX_DEPTH`), so a user fixes a document in one round trip
and a bad document is a 400, never a 500 from the database or from reading it back.

Decisions where SPEC is silent:
- A name is 1..128 characters of `[A-Za-z0-9_.-]`, starting with a letter or digit, so that it
  can be typed on a command line and put in a URL without quoting.
- `timeout_ms` is 1..900000 (Lambda's 15-minute ceiling); when left out, the instance default
  (`CRONLEDGER_DEFAULT_TIMEOUT_MS`) is written into the version, so a version records how long
  it actually allows even if the default later changes.
- JSON `null` on an optional key means "not given", as in a target document.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

from cronledger.api.request_rules import MAX_DEPTH, TOO_DEEP
from cronledger.errors import FieldError, ValidationFailed
from cronledger.ledger import CHANNEL_ACTIVE, CHANNEL_DRAFT, CHANNEL_PAUSED
from cronledger.schedule import ScheduleInvalid, compile_schedule
from cronledger.targets import TargetPolicy, target_errors

NAME_MAX: Final = 128
NAME: Final = re.compile(rf"[A-Za-z0-9][A-Za-z0-9_.-]{{0,{NAME_MAX - 1}}}")
TIMEOUT_MAX_MS: Final = 900_000
_CREATE_KEYS: Final = ("name", "transport_config", "target", "timeout_ms", "status")
_UPDATE_KEYS: Final = ("name", "transport_config", "target", "timeout_ms")
#: Compiling needs a channel id (the default concurrency key); any id validates the same.
_PLACEHOLDER_ID: Final = "channel-being-validated"


@dataclass(frozen=True, slots=True)
class Definition:
    """A validated channel definition: what one version stores."""

    transport_config: dict[str, Any]
    target: dict[str, Any]
    timeout_ms: int


@dataclass(frozen=True, slots=True)
class NewChannel:
    name: str
    status: str
    definition: Definition


def read_new_channel(
    document: Mapping[str, Any], default_timeout_ms: int, policy: TargetPolicy
) -> NewChannel:
    """A create body, or `ValidationFailed` listing every problem. `policy` is the operator's
    (what a target may name: `TargetPolicy.from_settings`)."""
    errors = _unknown_keys(document, _CREATE_KEYS)
    name = _name(document.get("name"), errors)
    status = document.get("status")
    if status is None:
        status = CHANNEL_DRAFT
    elif status not in (CHANNEL_DRAFT, CHANNEL_ACTIVE, CHANNEL_PAUSED):
        errors.append(
            FieldError(
                "status",
                "invalid",
                'a channel is created "draft", "active" or "paused"; archive it afterwards',
            )
        )
    definition = _definition(document, default_timeout_ms, policy, errors)
    if errors:
        raise ValidationFailed(errors, "invalid channel")
    assert name is not None and definition is not None
    return NewChannel(name=name, status=status, definition=definition)


def read_new_version(
    document: Mapping[str, Any], current_name: str, default_timeout_ms: int, policy: TargetPolicy
) -> Definition:
    """An update body, or `ValidationFailed`. A channel keeps its name for life."""
    errors = _unknown_keys(
        document, _UPDATE_KEYS, {"status": "status is not part of a version; use PATCH …/status"}
    )
    name = document.get("name")
    if name is not None and name != current_name:
        errors.append(
            FieldError(
                "name",
                "invalid",
                f"a channel cannot be renamed (it is {current_name!r}); create a new channel "
                "under the new name and delete this one",
            )
        )
    definition = _definition(document, default_timeout_ms, policy, errors)
    if errors:
        raise ValidationFailed(errors, "invalid channel")
    assert definition is not None
    return definition


def _definition(
    document: Mapping[str, Any],
    default_timeout_ms: int,
    policy: TargetPolicy,
    errors: list[FieldError],
) -> Definition | None:
    found = len(errors)
    transport_config = document.get("transport_config")
    if transport_config is None:
        errors.append(
            FieldError(
                "transport_config",
                "required",
                'transport_config is required, e.g. {"schedule": "0 15 2 * * *"}',
            )
        )
    else:
        try:
            compile_schedule(transport_config, _PLACEHOLDER_ID)
        except ScheduleInvalid as exc:
            errors.extend(exc.errors)
    target = document.get("target")
    if target is None:
        errors.append(
            FieldError(
                "target",
                "required",
                'target is required, e.g. {"type": "http", "url": "https://example.com/hook"}',
            )
        )
    else:
        errors.extend(target_errors(target, policy))
    timeout_ms = _timeout_ms(document.get("timeout_ms"), default_timeout_ms, errors)
    reported = [e.path for e in errors]
    errors.extend(
        problem
        for problem in _unstorable(document, "")
        if not any(_within(problem.path, path) for path in reported)
    )
    if len(errors) > found:
        return None
    assert isinstance(transport_config, dict) and isinstance(target, dict)
    assert timeout_ms is not None
    return Definition(transport_config=transport_config, target=target, timeout_ms=timeout_ms)


def _name(value: Any, errors: list[FieldError]) -> str | None:
    example = "e.g. nightly-report"
    if value is None:
        errors.append(FieldError("name", "required", f"name is required, {example}"))
    elif not isinstance(value, str):
        errors.append(FieldError("name", "type_mismatch", f"name must be a string, {example}"))
    elif len(value) > NAME_MAX:
        errors.append(FieldError("name", "too_long", f"name must be at most {NAME_MAX} characters"))
    elif not NAME.fullmatch(value):
        errors.append(
            FieldError(
                "name",
                "invalid",
                "name must start with a letter or digit and use only letters, digits, "
                f"'_', '.' and '-', {example}",
            )
        )
    else:
        return value
    return None


def _timeout_ms(value: Any, default: int, errors: list[FieldError]) -> int | None:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        errors.append(
            FieldError(
                "timeout_ms",
                "type_mismatch",
                f"timeout_ms must be a whole number of milliseconds, 1..{TIMEOUT_MAX_MS}",
            )
        )
        return None
    if not 1 <= value <= TIMEOUT_MAX_MS:
        errors.append(
            FieldError(
                "timeout_ms",
                "invalid",
                f"timeout_ms must be 1..{TIMEOUT_MAX_MS} (15 minutes), got {value}",
            )
        )
        return None
    return value


def _unknown_keys(
    document: Mapping[str, Any], known: tuple[str, ...], hints: Mapping[str, str] | None = None
) -> list[FieldError]:
    errors = []
    for key in map(str, document):
        if key in known:
            continue
        close = difflib.get_close_matches(key, known, n=1)
        hint = f'did you mean "{close[0]}"?' if close else f"known keys: {', '.join(known)}"
        message = (hints or {}).get(key, f'unknown key "{key}"; {hint}')
        errors.append(FieldError(key, "invalid", message))
    return errors


def _unstorable(value: Any, path: str, depth: int = 1) -> Iterator[FieldError]:
    """Values JSON allows in transit but the ledger's JSON columns refuse, or nested deeper
    than the API can serve back (`value` is at `depth`; the document is the first level)."""
    if isinstance(value, Mapping | list) and depth > MAX_DEPTH:
        yield FieldError(path, "invalid", TOO_DEEP)
    elif isinstance(value, Mapping):
        for key, item in value.items():
            child = f"{path}.{key}" if path else str(key)
            if not storable_text(str(key)):
                yield FieldError(child, "invalid", "keys must be text without NUL characters")
            else:
                yield from _unstorable(item, child, depth + 1)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _unstorable(item, f"{path}[{index}]", depth + 1)
    elif isinstance(value, str) and not storable_text(value):
        yield FieldError(path, "invalid", "must be text without NUL characters")
    elif isinstance(value, float) and not math.isfinite(value):
        yield FieldError(path, "invalid", "must be a finite number (not NaN or Infinity)")


def storable_text(text: str) -> bool:
    """Text PostgreSQL can store: no NUL, no lone surrogate."""
    if "\x00" in text:
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _within(path: str, reported: str) -> bool:
    return path == reported or path.startswith((f"{reported}.", f"{reported}["))
