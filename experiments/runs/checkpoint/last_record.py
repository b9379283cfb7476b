"""The fields of a `last` checkpoint's JSON record, checked before anyone reads them: a
file edited by hand or written by another tool is refused by name, never read as "nothing
recorded"."""

import json
import os
from collections.abc import Mapping
from typing import Any

from .store import CheckpointError

__all__ = ["check_last"]


def _kind(value: Any) -> str:
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


def _shown(value: Any, limit: int = 60) -> str:
    """`value` as it reads in the JSON file, cut to `limit` characters."""
    text = json.dumps(value, allow_nan=True, default=str)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_sha256(value: Any) -> bool:
    return (
        isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value)
    )


def _best_problem(best: Any) -> str | None:
    if best is None:
        return None
    if not isinstance(best, dict):
        return f"{_shown(best)} ({_kind(best)})"
    for key, ok in (("step", _is_int), ("val_accuracy", _is_number)):
        if key not in best:
            return f"{_shown(best)} (an object without {key!r})"
        if not ok(best[key]) or (key == "step" and best[key] < 0):
            return f"{_shown(best)} (its {key!r} is {_kind(best[key])}: {_shown(best[key])})"
    return None


def _pending_problem(pending: Any) -> str | None:
    if not isinstance(pending, list):
        return f"{_shown(pending)} ({_kind(pending)})"
    for i, row in enumerate(pending):
        if not (isinstance(row, list) and len(row) == 3 and all(map(_is_number, row))):
            return f"a list whose row {i} is {_shown(row)}"
    return None


def _data_problem(data: Any) -> str | None:
    if not isinstance(data, dict):
        return f"{_shown(data)} ({_kind(data)})"
    for split, fingerprint in data.items():
        if not isinstance(fingerprint, dict):
            return f"an object whose {split!r} is {_shown(fingerprint)} ({_kind(fingerprint)})"
    return None


def _simple(ok) -> Any:
    return lambda value: None if ok(value) else f"{_shown(value)} ({_kind(value)})"


#: The fields of a `last` record `check_last` checks: (what is wrong with a value, or None;
#: what is expected). An absent field is not checked here (readers say which they need).
_LAST_FIELDS = {
    "step": (_simple(lambda v: _is_int(v) and v >= 0), "a whole number >= 0"),
    "pending": (
        _pending_problem,
        "a list of [loss, accuracy, learning rate] rows of 3 numbers each",
    ),
    "best": (
        _best_problem,
        "null or an object with a whole-number 'step' and a numeric 'val_accuracy'",
    ),
    "best_sha256": (
        _simple(lambda v: v is None or _is_sha256(v)),
        "null or a SHA-256 (64 lowercase hexadecimal digits)",
    ),
    "data": (_data_problem, "an object holding each split's fingerprint (an object)"),
    "config": (_simple(lambda v: isinstance(v, dict)), "an object (the run's settings)"),
    "run_id": (_simple(lambda v: isinstance(v, str)), "a string (the run's id)"),
}


def check_last(
    meta: Mapping[str, Any],
    path: str | os.PathLike | None,
    *,
    fields: tuple[str, ...] = tuple(_LAST_FIELDS),
) -> None:
    """Refuse a `last` checkpoint's JSON `meta` (read from `path`) whose fields do not have
    the types and shapes the trainer writes: `step` a whole number >= 0; `pending` a list
    of `[loss, accuracy, lr]` rows of 3 numbers; `best` null or an object with an integer
    `step` and a numeric `val_accuracy`; `best_sha256` null or a SHA-256 hex digest; `data`
    an object of objects (each split's fingerprint); `config` an object; `run_id` a string.
    A field that is absent is not checked (the reader requires what it needs).

    **Arguments:**

    - `fields`: the fields to check (default: all of the above).

    **Raises:** `CheckpointError` naming `path`, the field, what it holds and what was
    expected.
    """
    for field in fields:
        if field not in meta:
            continue
        problem, expected = _LAST_FIELDS[field]
        found = problem(meta[field])
        if found is not None:
            where = path if path is not None else "the `last` checkpoint's JSON"
            raise CheckpointError(
                f"{where} is corrupt: its {field!r} is {found}, not {expected}; it was edited, "
                "or written by another tool. Restore the run's own files, or start a new run "
                "with another --out."
            )
