"""Documents as pydantic models, and pydantic's refusals as `FieldError`s, in one place.

A `Document` is closed (an unknown key is named, with the closest known one) and strict (`"3"`
is not 3). Every problem is collected in one pass; `field_errors` gives each a dotted path, a
code (`required`, `type_mismatch`, `invalid`, `too_long`) and a message that says how to fix
it. A check in its own words raises `refused(code, message)`, optionally at a sibling's path.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping, Sequence
from functools import reduce
from typing import Annotated, Any, ClassVar, Final, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    WrapValidator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from cronledger.errors import FieldError

CODES: Final = frozenset({"required", "type_mismatch", "invalid", "too_long"})
#: pydantic's error types that are ours under another name (others: `type_mismatch` when
#: they end `_type` or `_parsing`, else `invalid`).
_CODE_OF: Final = {
    "missing": "required",
    "string_too_long": "too_long",
    "dict_too_long": "too_long",
}
#: JSON's name for each kind of value, the first that matches (a boolean is an `int`).
_JSON_TYPES: Final = (
    (type(None), "null"),
    (bool, "a boolean"),
    (int | float, "a number"),
    (str, "a string"),
    (Mapping, "an object"),
    (list | tuple, "an array"),
)


def refused(code: str, message: str, instead: str | None = None) -> PydanticCustomError:
    """A refusal in the API's words (raise it from a validator). `instead`: the sibling key
    it is reported at."""
    return PydanticCustomError(code, message, {"instead": instead} if instead else None)


def json_type(value: Any) -> str:
    """How JSON names the kind of `value`, for messages (`got a string`)."""
    named = (name for kind, name in _JSON_TYPES if isinstance(value, kind))
    return next(named, type(value).__name__)


def explained(explain: Callable[[Any], tuple[str, str]]) -> WrapValidator:
    """Answer any refusal of the wrapped type with `explain(value)`: `(code, message)`."""

    def validate(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        try:
            return handler(value)
        except ValidationError:
            raise refused(*explain(value)) from None

    return WrapValidator(validate)


def whole(low: int, high: int) -> Any:
    """An integer `low..high` (a boolean is not one); the bounds are its JSON schema's."""

    def explain(value: Any) -> tuple[str, str]:
        if isinstance(value, int) and not isinstance(value, bool):
            return "invalid", f"must be {low}..{high}, got {value}"
        return "type_mismatch", f"must be an integer {low}..{high}, got {json_type(value)}"

    return Annotated[int, Field(ge=low, le=high), explained(explain)]


def choice(*options: str) -> Any:
    """One of `options`, a JSON schema `enum`."""
    allowed = ", ".join(f'"{option}"' for option in options)

    def explain(value: Any) -> tuple[str, str]:
        if isinstance(value, str):
            return "invalid", f'"{value}" is not one of {allowed}'
        return "type_mismatch", f"must be one of {allowed}, got {json_type(value)}"

    return Annotated[Literal[options], explained(explain)]


def without_null(extra: Mapping[str, Any] | None = None) -> Callable[[dict[str, Any]], None]:
    """A `json_schema_extra` that documents an optional key (`T | None`) as `T` alone (`null`
    reads as "not given" there) and adds `extra`."""

    def rewrite(schema: dict[str, Any]) -> None:
        (kept,) = [s for s in schema.pop("anyOf") if s.get("type") != "null"]
        schema.update({**kept, **(extra or {})})

    return rewrite


class Document(BaseModel):
    """A closed, strict document; see the module header. `example` completes the message of a
    value that is not an object; `needs` says what a missing required key is for."""

    model_config = ConfigDict(extra="forbid", strict=True)
    example: ClassVar[str] = "{}"
    needs: ClassVar[Mapping[str, str]] = {}
    #: What an unknown key's message says instead of naming the closest key, by key.
    unknown_hints: ClassVar[Mapping[str, str]] = {}
    #: Whether a key set to `null` counts as left out (else it is a type mismatch).
    null_means_absent: ClassVar[bool] = False

    @classmethod
    def relations(cls, document: Mapping[str, Any]) -> list[InitErrorDetails]:
        """Problems of the raw document between keys, found whatever the keys' own checks say."""
        return []

    @model_validator(mode="wrap")
    @classmethod
    def _every_problem_in_its_words(
        cls, value: Any, handler: ValidatorFunctionWrapHandler, info: ValidationInfo
    ) -> Any:
        if not isinstance(value, Mapping | BaseModel):
            raise refused(
                "type_mismatch", f"must be an object, got {json_type(value)}; e.g. {cls.example}"
            )
        if cls.null_means_absent and isinstance(value, Mapping):
            value = {key: item for key, item in value.items() if item is not None}
        found = cls.relations(value) if isinstance(value, Mapping) else []
        try:
            document = handler(value)
        except ValidationError as exc:
            errors = sorted(exc.errors(), key=_unknown_keys_first)
            found = [*map(cls._in_its_words, errors), *found]
        if found:
            raise ValidationError.from_exception_data(cls.__name__, found)
        return document

    @classmethod
    def _in_its_words(cls, error: Any) -> InitErrorDetails:
        loc, kind = tuple(error["loc"]), error["type"]
        if len(loc) == 1 and kind == "extra_forbidden":
            return again(error, code="invalid", message=cls.unknown_key(str(loc[0])))
        if len(loc) == 1 and kind == "missing":
            return again(error, code="required", message=cls.required(str(loc[0])))
        return again(error)

    @classmethod
    def required(cls, key: str) -> str:
        """What a missing required key's message says."""
        return cls.needs.get(key, f"{key} is required")

    @classmethod
    def unknown_key(cls, key: str) -> str:
        known = [field.alias or name for name, field in cls.model_fields.items()]
        if key in cls.unknown_hints:
            return cls.unknown_hints[key]
        close = difflib.get_close_matches(key, known, n=1)
        hint = f'did you mean "{close[0]}"?' if close else f"known keys: {', '.join(known)}"
        return f'unknown key "{key}"; {hint}'


def again(
    error: Any,
    loc: tuple[str | int, ...] | None = None,
    *,
    code: str | None = None,
    message: str | None = None,
) -> InitErrorDetails:
    """An error of a caught `ValidationError` to raise again, moved or reworded."""
    return {
        "type": PydanticCustomError(
            code or error["type"], message or error["msg"], error.get("ctx")
        ),
        "loc": tuple(error["loc"]) if loc is None else loc,
        "input": None,
    }


def _untagged(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    try:
        return handler(value)
    except ValidationError as exc:
        found = [again(error, tuple(error["loc"][1:])) for error in exc.errors()]
        raise ValidationError.from_exception_data(exc.title, found) from None


UNTAGGED: Final = WrapValidator(_untagged)
"""On a tagged union: its errors at their place in the document, without the tag in the path."""


def _unknown_keys_first(error: Any) -> tuple[bool, str]:
    unknown = error["type"] == "extra_forbidden" and len(error["loc"]) == 1
    return not unknown, str(error["loc"][0]) if unknown else ""


def field_errors(exc: ValidationError, prefix: Sequence[str | int] = ()) -> list[FieldError]:
    """pydantic's errors as field errors, each at `prefix` + its place in the document."""
    return [field_error(error, prefix) for error in exc.errors()]


def field_error(error: Mapping[str, Any], prefix: Sequence[str | int] = ()) -> FieldError:
    """One pydantic error as a field error: the one translation (see the module header)."""
    ctx = error.get("ctx") or {}
    loc = [*prefix, *error.get("loc", ())]
    if ctx.get("instead"):
        loc[-1] = ctx["instead"]
    kind = str(error.get("type", ""))
    code = kind if kind in CODES else _CODE_OF.get(kind)
    if code is None:
        code = "type_mismatch" if kind.endswith(("_type", "_parsing")) else "invalid"
    message = str(error.get("msg", "is not valid")).removeprefix("Value error, ")
    if kind == "json_invalid":
        message = f"the body is not valid JSON: {ctx.get('error', 'cannot parse')}"
    # ("a", "b", 0, "c") is a.b[0].c
    return FieldError(reduce(child, loc, "") or "request", code, message)


def child(parent: str, part: str | int) -> str:
    """The path of `part` (a key or an index) inside the path `parent`."""
    if isinstance(part, int):
        return f"{parent}[{part}]"
    return f"{parent}.{part}" if parent else str(part)
