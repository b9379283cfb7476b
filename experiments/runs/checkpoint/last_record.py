"""The fields of a checkpoint's JSON record (a `last` or `best` checkpoint's), checked
before anyone reads them: `check_last` checks a record's fields, `Record.from_json` reads
it as a typed record. A file edited by hand or written by another tool is refused by name
and field, never read as "nothing recorded" (the rules: `runs.records`)."""

import dataclasses
import os
from collections.abc import Mapping
from typing import Any

from ..records import OBJECT, SHA256, TEXT, WHOLE, Fields, Rule, is_int, is_number, kind, shown
from .store import ADVICE, CheckpointError

__all__ = ["Record", "check_last"]


def _best_problem(best: Any) -> str | None:
    if best is None:
        return None
    if not isinstance(best, dict):
        return f"{shown(best)} ({kind(best)})"
    for key, ok in (("step", is_int), ("val_accuracy", is_number)):
        if key not in best:
            return f"{shown(best)} (an object without {key!r})"
        if not ok(best[key]) or (key == "step" and best[key] < 0):
            return f"{shown(best)} (its {key!r} is {kind(best[key])}: {shown(best[key])})"
    return None


def _pending_problem(pending: Any) -> str | None:
    if not isinstance(pending, list):
        return f"{shown(pending)} ({kind(pending)})"
    for i, row in enumerate(pending):
        if not (isinstance(row, list) and len(row) == 3 and all(map(is_number, row))):
            return f"a list whose row {i} is {shown(row)}"
    return None


def _data_problem(data: Any) -> str | None:
    if not isinstance(data, dict):
        return f"{shown(data)} ({kind(data)})"
    for split, fingerprint in data.items():
        if not isinstance(fingerprint, dict):
            return f"an object whose {split!r} is {shown(fingerprint)} ({kind(fingerprint)})"
    return None


#: The fields of a record and what each must hold. An absent field is not checked by
#: `check_last` (readers say which they need: `runs.checkpoint.load`'s `required`).
_FIELDS = {
    "step": WHOLE,
    "pending": Rule(
        _pending_problem, "a list of [loss, accuracy, learning rate] rows of 3 numbers each"
    ),
    "best": Rule(
        _best_problem, "null or an object with a whole-number 'step' and a numeric 'val_accuracy'"
    ),
    "best_sha256": SHA256.or_null(),
    "data": Rule(_data_problem, "an object holding each split's fingerprint (an object)"),
    "config": Rule(OBJECT.problem, "an object (the run's settings)"),
    "run_id": Rule(TEXT.problem, "a string (the run's id)"),
    "sha256": SHA256,
    "seconds_total": Rule.of(
        lambda v: is_number(v) and v >= 0, "a number >= 0 (the run's seconds so far)"
    ),
    "corpus_sha256": SHA256.or_null(),
}


@dataclasses.dataclass(frozen=True)
class Record:
    """A checkpoint's JSON record (`NAME.json`), each field checked; a field the file
    lacks is None (`pending`: empty). A trainer's `last` record:

    - `step`: the step of the weights (the one field every record has);
    - `sha256`: the digest of the `.eqx` (None: written before digests were recorded);
    - `pending`: the `(loss, accuracy, lr)` of the steps since the last train record;
    - `best`: the best validation result (`{"step", "val_accuracy", ...}`), or None;
      `best_sha256`: the digest of the `best.eqx` that holds its weights;
    - `data`: each split's fingerprint (the LRA trainer's); `config`: the run's settings;
      `run_id`: the run's id; `seconds_total`: the seconds of the run's processes to this
      checkpoint (the LRA trainer's); `corpus_sha256`: the corpus's digest (the language
      model's).
    """

    step: int
    sha256: str | None = None
    pending: tuple[tuple[float, float, float], ...] = ()
    best: dict[str, Any] | None = None
    best_sha256: str | None = None
    data: dict[str, Any] | None = None
    config: dict[str, Any] | None = None
    run_id: str | None = None
    seconds_total: float | None = None
    corpus_sha256: str | None = None

    @classmethod
    def from_json(cls, obj: Any, *, where: str | os.PathLike) -> "Record":
        """The record the JSON object `obj` (read from the file `where`) holds.

        **Raises:** `CheckpointError`, one line naming `where` and the field, if `obj` is
        not an object, lacks `step`, or a field does not hold what the trainer writes.
        """
        fields = Fields.of(obj, where=where, error=CheckpointError, advice=ADVICE)
        values = {name: fields.get(name, rule, None) for name, rule in _FIELDS.items()}
        values["step"] = fields.get("step", _FIELDS["step"])
        values["pending"] = tuple(tuple(row) for row in values["pending"] or ())
        if values["seconds_total"] is not None:
            values["seconds_total"] = float(values["seconds_total"])
        return cls(**values)


def check_last(
    meta: Mapping[str, Any],
    path: str | os.PathLike | None,
    *,
    fields: tuple[str, ...] = tuple(_FIELDS),
) -> None:
    """Refuse a `last` checkpoint's JSON `meta` (read from `path`) whose fields do not have
    the types and shapes the trainer writes: `step` a whole number >= 0; `pending` a list
    of `[loss, accuracy, lr]` rows of 3 numbers; `best` null or an object with an integer
    `step` and a numeric `val_accuracy`; `best_sha256` null or a SHA-256 hex digest; `data`
    an object of objects (each split's fingerprint); `config` an object; `run_id` a string;
    `sha256` a SHA-256; `seconds_total` a number >= 0; `corpus_sha256` null or a SHA-256.
    A field that is absent is not checked (the reader requires what it needs).

    **Arguments:**

    - `fields`: the fields to check (default: all of the above).

    **Raises:** `CheckpointError` naming `path`, the field, what it holds and what was
    expected.
    """
    where = path if path is not None else "the `last` checkpoint's JSON"
    record = Fields(meta, str(where), CheckpointError, ADVICE)
    for field in fields:
        record.get(field, _FIELDS[field], None)
