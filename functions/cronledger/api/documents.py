"""Reading a channel document: every problem at once, or a definition safe to store.

A body is read by its model (the target under the operator's policy, unknown keys refused),
and values the database cannot hold (NUL, lone surrogates, NaN) or the API could not serve
back (deeper than `MAX_DEPTH`) are refused beside its problems, so one round trip fixes a
document. A name can be typed and put in a URL unquoted; a left-out `timeout_ms` is the
instance default; JSON `null` means not given; a version is the whole document (no `labels`:
no labels).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Final

from pydantic import (
    BeforeValidator,
    Field,
    ValidationError,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
)

from cronledger.api.request_rules import MAX_DEPTH, TOO_DEEP, storable_text, walk
from cronledger.cron.config import TransportConfig
from cronledger.errors import FieldError, ValidationFailed
from cronledger.labels import Labels
from cronledger.ledger import CHANNEL_ACTIVE, CHANNEL_DRAFT, CHANNEL_PAUSED, Channel
from cronledger.settings import TIMEOUT_MAX_MS
from cronledger.targets import Target
from cronledger.targets.policy import TargetPolicy
from cronledger.validation import Document, explained, field_errors, refused

NAME_MAX: Final = 128
NAME: Final = re.compile(rf"[A-Za-z0-9][A-Za-z0-9_.-]{{0,{NAME_MAX - 1}}}")
_NAME_EXAMPLE: Final = "e.g. nightly-report"
_TARGET_EXAMPLE: Final = '{"type": "http", "url": "https://example.com/hook"}'


def _name(value: Any) -> str:
    if not isinstance(value, str):
        raise refused("type_mismatch", f"name must be a string, {_NAME_EXAMPLE}")
    if len(value) > NAME_MAX:
        raise refused("too_long", f"name must be at most {NAME_MAX} characters")
    if not NAME.fullmatch(value):
        raise refused(
            "invalid",
            "name must start with a letter or digit and use only letters, digits, '_', '.' and "
            f"'-', {_NAME_EXAMPLE}",
        )
    return value


def _timeout(value: Any) -> tuple[str, str]:
    if type(value) is not int:
        return (
            "type_mismatch",
            f"timeout_ms must be a whole number of milliseconds, 1..{TIMEOUT_MAX_MS}",
        )
    return "invalid", f"timeout_ms must be 1..{TIMEOUT_MAX_MS} (15 minutes), got {value}"


def _status(value: Any) -> str:
    if value not in (CHANNEL_DRAFT, CHANNEL_ACTIVE, CHANNEL_PAUSED):
        raise refused(
            "invalid", 'a channel is created "draft", "active" or "paused"; archive it afterwards'
        )
    return str(value)


Name = Annotated[
    str, BeforeValidator(_name), Field(pattern=f"^{NAME.pattern}$", examples=["nightly-report"])
]
TimeoutMs = Annotated[
    int,
    Field(ge=1, le=TIMEOUT_MAX_MS, description="default: the instance's default_timeout_ms"),
    explained(_timeout),
]


class ChannelUpdate(Document):
    """The channel's next version. `name`, if given, must be the channel's own name (the
    validation context's `name`). JSON `null` on a key means "not given"."""

    null_means_absent: ClassVar[bool] = True
    needs: ClassVar[Mapping[str, str]] = {
        "name": f"name is required, {_NAME_EXAMPLE}",
        "transport_config": 'transport_config is required, e.g. {"schedule": "0 15 2 * * *"}',
        "target": f"target is required, e.g. {_TARGET_EXAMPLE}",
    }
    unknown_hints: ClassVar[Mapping[str, str]] = {
        "status": "status is not part of a version; use PATCH …/status"
    }

    name: Name | None = None
    labels: Labels = Field(default_factory=dict)
    transport_config: TransportConfig
    target: Target
    timeout_ms: TimeoutMs | None = None

    @field_validator("name")
    @classmethod
    def _kept(cls, name: str | None, info: ValidationInfo) -> str | None:
        current = (info.context or {}).get("name")
        if current is not None and name != current:
            raise refused(
                "invalid",
                f"a channel cannot be renamed (it is {current!r}); create a new channel under "
                "the new name and delete this one",
            )
        return name


class ChannelCreate(ChannelUpdate):
    """A new channel: `draft` unless `"status"` says `active` or `paused`."""

    unknown_hints: ClassVar[Mapping[str, str]] = {}

    name: Name
    status: Annotated[
        str,
        BeforeValidator(_status),
        WithJsonSchema({"type": "string", "enum": [CHANNEL_DRAFT, CHANNEL_ACTIVE, CHANNEL_PAUSED]}),
    ] = CHANNEL_DRAFT


@dataclass(frozen=True, slots=True)
class Definition:
    """A validated channel definition: what one version stores, as the ledger's arguments."""

    transport_config: dict[str, Any]
    target: dict[str, Any]
    timeout_ms: int
    labels: dict[str, str]

    @classmethod
    def of(cls, channel: Channel) -> Definition:
        """What `channel`'s version stores."""
        return cls(channel.transport_config, channel.target, channel.timeout_ms, channel.labels)


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
    body = _read(ChannelCreate, document, {"policy": policy})
    assert isinstance(body, ChannelCreate)
    return NewChannel(body.name, body.status, _definition(body, document, default_timeout_ms))


def read_new_version(
    document: Mapping[str, Any], current_name: str, default_timeout_ms: int, policy: TargetPolicy
) -> Definition:
    """An update body, or `ValidationFailed`. A channel keeps its name for life."""
    body = _read(ChannelUpdate, document, {"policy": policy, "name": current_name})
    return _definition(body, document, default_timeout_ms)


def _read(
    model: type[ChannelUpdate], document: Mapping[str, Any], context: dict[str, Any]
) -> ChannelUpdate:
    """Every problem of `document` at once, each reported once at its outermost path."""
    errors: list[FieldError] = []
    body = None
    try:
        body = model.model_validate(document, context=context)
    except ValidationError as exc:
        errors = field_errors(exc)
    for problem in _unstorable(document):
        if not any(_within(problem.path, error.path) for error in errors):
            errors.append(problem)
    if errors:
        raise ValidationFailed(errors, "invalid channel")
    assert body is not None
    return body


def _definition(body: ChannelUpdate, document: Mapping[str, Any], default_ms: int) -> Definition:
    # What is stored is the document as written (defaults are the compiler's to apply).
    return Definition(
        transport_config=dict(document["transport_config"]),
        target=dict(document["target"]),
        timeout_ms=default_ms if body.timeout_ms is None else body.timeout_ms,
        labels=dict(body.labels),
    )


def _unstorable(document: Mapping[str, Any]) -> Iterator[FieldError]:
    """Values JSON allows in transit but the ledger's JSON columns refuse, or nested deeper
    than the API can serve back."""
    for path, key, item, depth in walk(document):
        if isinstance(key, str) and not storable_text(key):
            yield FieldError(path, "invalid", "keys must be text without NUL characters")
        elif depth > MAX_DEPTH and isinstance(item, Mapping | list):
            yield FieldError(path, "invalid", TOO_DEEP)
        elif isinstance(item, str) and not storable_text(item):
            yield FieldError(path, "invalid", "must be text without NUL characters")
        elif isinstance(item, float) and not math.isfinite(item):
            yield FieldError(path, "invalid", "must be a finite number (not NaN or Infinity)")


def _within(path: str, reported: str) -> bool:
    return path == reported or path.startswith((f"{reported}.", f"{reported}["))
