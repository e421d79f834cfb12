"""Target documents as models: one per `type`, told apart by it, every problem at its key.
JSON `null` on an optional key means "not given" (forms send nulls for blank fields). The
operator's `TargetPolicy` is the validation context's `policy`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, ClassVar, Union, get_args

from pydantic import (
    BeforeValidator,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    WrapValidator,
)

from cronledger.targets.interface import Delivery, TargetOutcome
from cronledger.targets.policy import TargetPolicy
from cronledger.validation import UNTAGGED, Document, refused

_EXAMPLE: dict[str, Any] = {"type": "http", "url": "https://example.com/hooks/nightly"}


class TargetDocument(Document):
    """A target of one `type` (its `type_name`): its keys and checks, the secret-free `ref`
    the ledger shows, and how an attempt runs it."""

    null_means_absent: ClassVar[bool] = True
    #: The `type` it is read for: its `type` key's one `Literal` value.
    type_name: ClassVar[str]
    #: The ledger's `target_ref`, filled from the document's keys.
    ref_format: ClassVar[str]

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        (cls.type_name,) = get_args(cls.model_fields["type"].annotation)

    @classmethod
    def ref(cls, doc: Mapping[str, Any]) -> str:
        return cls.ref_format.format_map(doc)

    @classmethod
    def run(cls, doc: Mapping[str, Any], delivery: Delivery) -> TargetOutcome:
        raise NotImplementedError

    @classmethod
    def unknown_key(cls, key: str) -> str:
        return f"unknown key; a {cls.type_name} target takes {', '.join(sorted(cls.model_fields))}"

    @classmethod
    def required(cls, key: str) -> str:
        extra = cls.model_fields[key].json_schema_extra
        example = extra.get("example") if isinstance(extra, dict) else None
        return f"{key} is required, e.g. {example!r}"


def policy_of(info: ValidationInfo) -> TargetPolicy:
    """The operator's policy the document is read under."""
    policy: TargetPolicy = (info.context or {})["policy"]
    return policy


def text(example: str, max_len: int, pattern: re.Pattern[str] | None = None, hint: str = "") -> Any:
    """A non-blank string of at most `max_len` characters (matching `pattern`, which `hint`
    describes), its messages naming the key."""

    def check(value: Any, info: ValidationInfo) -> str:
        key = info.field_name
        if not isinstance(value, str):
            raise refused("type_mismatch", f"{key} must be a string, e.g. {example!r}")
        if not value.strip():
            raise refused("required", f"{key} must not be blank, e.g. {example!r}")
        if len(value) > max_len:
            raise refused("too_long", f"{key} must be at most {max_len} characters")
        if pattern is not None and not pattern.fullmatch(value):
            raise refused("invalid", f"{key} {hint}, e.g. {example!r}")
        return value

    schema: dict[str, Any] = {"example": example, "maxLength": max_len}
    if pattern is not None:
        schema["pattern"] = f"^{pattern.pattern}$"
    return Annotated[str, BeforeValidator(check), Field(json_schema_extra=schema)]


def _boolean(value: Any, info: ValidationInfo) -> bool:
    if not isinstance(value, bool):
        raise refused("type_mismatch", f"{info.field_name} must be true or false (a JSON boolean)")
    return value


Boolean = Annotated[bool, BeforeValidator(_boolean)]


def union(models: Sequence[type[TargetDocument]]) -> Any:
    """The documents of `models`, each read as the one its `type` names."""
    names = [model.type_name for model in models]
    choices = ", ".join(names)

    def by_type(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        if not isinstance(value, Mapping):
            raise refused("type_mismatch", f"target must be an object, e.g. {json.dumps(_EXAMPLE)}")
        kind = value.get("type")
        problem = None
        if kind is None:
            problem = refused("required", f"type is required: one of {choices}")
        elif not isinstance(kind, str):
            problem = refused("type_mismatch", f"type must be one string: one of {choices}")
        elif kind not in names:
            problem = refused("invalid", f"unknown target type {kind!r}; use {choices}")
        if problem is not None:
            raise ValidationError.from_exception_data(
                "target", [{"type": problem, "loc": ("type",), "input": None}]
            )
        return handler(value)

    tagged = tuple(Annotated[model, Tag(model.type_name)] for model in models)
    return Annotated[
        Union[tagged],  # noqa: UP007 - a union built at run time
        Discriminator(lambda value: value.get("type") if isinstance(value, Mapping) else None),
        UNTAGGED,
        WrapValidator(by_type),
        Field(
            description="What runs: one `type` and that type's keys.",
            json_schema_extra={"example": _EXAMPLE},
        ),
    ]
