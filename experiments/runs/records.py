"""A JSON object a command wrote beside its files (a checkpoint's JSON, the data cache's
`meta.json`) read as a typed record: each field's presence and JSON type checked before
it is read (`Fields.get`, against a `Rule`), so that a file edited by hand or written by
another tool is refused in one line naming the file and the field, never read as a
`KeyError` or a wrong value.

Importing this module imports nothing else of `experiments` (the checkpoint store uses it).
"""

import dataclasses
import json
from collections.abc import Callable, Mapping
from typing import Any

__all__ = [
    "Rule",
    "Fields",
    "REQUIRED",
    "kind",
    "shown",
    "is_int",
    "is_number",
    "is_sha256",
    "WHOLE",
    "NUMBER",
    "TEXT",
    "OBJECT",
    "SHA256",
]


def kind(value: Any) -> str:
    """The JSON type of `value`, in words."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "a list" if isinstance(value, list) else "an object"


def shown(value: Any, limit: int = 60) -> str:
    """`value` as it reads in the JSON file, cut to `limit` characters."""
    text = json.dumps(value, allow_nan=True, default=str)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def is_sha256(value: Any) -> bool:
    return (
        isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value)
    )


@dataclasses.dataclass(frozen=True)
class Rule:
    """What a field must hold: `problem(value)` is what is wrong with a value, in words
    (None: nothing); `expected` the value wanted, in words."""

    problem: Callable[[Any], str | None]
    expected: str

    @classmethod
    def of(cls, ok: Callable[[Any], bool], expected: str) -> "Rule":
        """The rule of the values `ok` accepts; a refused value is shown with its type."""
        return cls(lambda v: None if ok(v) else f"{shown(v)} ({kind(v)})", expected)

    def or_null(self) -> "Rule":
        """This rule, or null."""
        return Rule(lambda v: None if v is None else self.problem(v), f"null or {self.expected}")


WHOLE = Rule.of(lambda v: is_int(v) and v >= 0, "a whole number >= 0")
NUMBER = Rule.of(is_number, "a number")
TEXT = Rule.of(lambda v: isinstance(v, str), "a string")
OBJECT = Rule.of(lambda v: isinstance(v, dict), "an object")
SHA256 = Rule.of(is_sha256, "a SHA-256 (64 lowercase hexadecimal digits)")

#: `Fields.get`'s default: the field must be there.
REQUIRED: Any = object()


@dataclasses.dataclass(frozen=True)
class Fields:
    """The JSON object `obj` read from `where` (a file, in words), a field at a time; a
    refusal is `error(line)`, the line ending with `advice` (what to do)."""

    obj: Mapping[str, Any]
    where: str
    error: type[Exception] = ValueError
    advice: str = "it was edited, or written by another tool."

    @classmethod
    def of(
        cls,
        obj: Any,
        *,
        where: Any,
        error: type[Exception] = ValueError,
        advice: str = "it was edited, or written by another tool.",
    ) -> "Fields":
        """`obj`'s fields; **raises** `error` if it is not a JSON object."""
        if not isinstance(obj, Mapping):
            raise error(f"{where} is corrupt (not a JSON object: {kind(obj)}); {advice}")
        return cls(obj, str(where), error, advice)

    def get(self, name: str, rule: Rule, default: Any = REQUIRED) -> Any:
        """The field `name`, which `rule` accepts; `default` where it is absent (by default
        an absent field is refused).

        **Raises:** `error`, one line naming the file and the field: what it holds and
        what was expected, or that it lacks the field.
        """
        if name not in self.obj:
            if default is REQUIRED:
                raise self.error(f"{self.where} is corrupt: it lacks {name!r}; {self.advice}")
            return default
        found = rule.problem(self.obj[name])
        if found is not None:
            raise self.error(
                f"{self.where} is corrupt: its {name!r} is {found}, not {rule.expected}; "
                + self.advice
            )
        return self.obj[name]
