"""Which checkpoints a run's readers trust (the trainer's `--resume`, whose best weights
give the test score, and `python -m experiments.export`), decided once.

`check_bound` refuses a checkpoint of another run (`NotBound`: a training setting, or the
run id, differs from the run's), and `trusted_best` finds the `best` pair that a `last`
checkpoint records (`NoTrustedBest` when it is not there). Which settings bind a run is the
trainer's to say: each caller passes its own `keys` (the LRA trainer's
`config.TRAINING_KEYS`, the language model's). The readers word the refusals for their
users. Before either reads a `last` record, `check_last` (`last_record.py`) checks its
fields.
"""

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .last_record import check_last
from .store import CheckpointError, Pair, locate

__all__ = ["NotBound", "NoTrustedBest", "check_bound", "recorded_best", "trusted_best"]


class NotBound(CheckpointError):
    """`path` is a checkpoint of another run (see `check_bound`): `diff` maps each training
    setting that differs to `(the checkpoint's value, the run's)`; with the same settings,
    `run_ids` is `(the checkpoint's run id, the run's)`."""

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        diff: Mapping[str, tuple[Any, Any]] | None = None,
        run_ids: tuple[str, str] | None = None,
    ):
        self.path, self.diff, self.run_ids = Path(path), dict(diff or {}), run_ids
        super().__init__(f"{self.path} does not belong to the run ({self.what('the run')}).")

    def what(self, run: str) -> str:
        """What differs, in words; `run` names where the run's own id comes from."""
        if self.diff:
            return "; ".join(
                f"{k}: {a!r} in {self.path.name}, {b!r} in config.json"
                for k, (a, b) in self.diff.items()
            )
        assert self.run_ids is not None  # `NotBound` holds a diff or both run ids
        theirs, own = self.run_ids
        return f"run id {theirs} in {self.path.name}, {own} in {run}"


def check_bound(
    meta: Mapping[str, Any],
    path: str | os.PathLike,
    *,
    run_id: str | None,
    settings: Mapping[str, Any] | None,
    keys: Sequence[str],
) -> None:
    """Refuse the checkpoint `path` (its JSON `meta`) if it belongs to another run.

    **Arguments:**

    - `run_id`: the run's id (`config.json`'s `run_id`); None: not compared.
    - `settings`: the run's settings (`config.json`); None: not compared.
    - `keys`: the settings that bind a run (the trainer's own list, e.g. the LRA
        trainer's `config.TRAINING_KEYS`).

    **Raises:** `NotBound` if a training setting (`keys`) that both the checkpoint's
    `config` and `settings` hold differs, or else if the checkpoint records a run id other
    than `run_id`.
    """
    config = meta.get("config")
    theirs = config if isinstance(config, dict) else {}
    settings = settings or {}
    diff = {
        k: (theirs[k], settings[k])
        for k in keys
        if k in theirs and k in settings and theirs[k] != settings[k]
    }
    if diff:
        raise NotBound(path, diff=diff)
    recorded = meta.get("run_id")
    if recorded is not None and run_id is not None and recorded != run_id:
        raise NotBound(path, run_ids=(recorded, run_id))


def recorded_best(
    record: Mapping[str, Any] | None, path: str | os.PathLike | None = None
) -> tuple[dict[str, Any] | None, str | None]:
    """The best weights a `last` checkpoint's JSON `record` (read from `path`) names: `(its
    "best" entry (step, val accuracy), their SHA-256)`, each None where it records none.

    **Raises:** `CheckpointError` if `best` or `best_sha256` is malformed (`check_last`):
    such a record is refused, not read as "none recorded".
    """
    record = record or {}
    check_last(record, path, fields=("best", "best_sha256"))
    best = record.get("best")
    return best, record.get("best_sha256") if best is not None else None


class NoTrustedBest(CheckpointError):
    """The best weights `trusted_best` looks for are not in `folder`: `want` the SHA-256
    the record names (None: no record), `newest` the newest `best` pair there (None: none,
    or its JSON is damaged), `run_id` the run's id."""

    def __init__(self, folder: Path, *, want: str | None, newest: Pair | None, run_id: str | None):
        self.folder, self.want, self.newest, self.run_id = folder, want, newest, run_id
        super().__init__(f"the best weights are not in {folder}: {self.why()}.")

    def why(self, *, explain: bool = False) -> str:
        """Why, naming the file; `explain`: say why an older `best.prev.*` is not used."""
        newest = self.newest
        if newest is None:
            return f"{self.folder / 'best.eqx'} (with best.json) is missing"
        if not newest.intact:
            differs = (
                f"the one in {newest.json_path.name}; a crash never leaves that, so an older "
                "best.prev.* is not used in its place"
                if explain
                else f"{newest.json_path.name}'s"
            )
            return (
                f"{newest.eqx_path} is missing, corrupt or truncated (its SHA-256 differs from "
                f"{differs})"
            )
        if newest.meta.get("run_id") not in (None, self.run_id):
            return f"{newest.json_path} is from another run (run id {newest.meta.get('run_id')})"
        return (
            f"{newest.json_path} holds the weights of step {newest.meta.get('step')}, another file"
        )


def trusted_best(
    folder: str | os.PathLike,
    record: Mapping[str, Any] | None,
    *,
    run_id: str | None,
    settings: Mapping[str, Any] | None,
    keys: Sequence[str],
) -> Pair:
    """The `best` pair in `folder` that the run's `last` checkpoint (its JSON `record`)
    trusts: the one with the SHA-256 the record names (`best.*`, else `best.prev.*` where a
    crash mid-save left it there), or, where the record names none (no record, or one from
    before digests), the newest complete pair. It must belong to the run (`check_bound`
    with `run_id`, `settings` and `keys`). A damaged newest pair is not replaced by an older one.

    The caller loads it (`load_pair`) and compares its step with the record's
    (`recorded_best`).

    **Returns:** the pair, intact.

    **Raises:** `NoTrustedBest` if no such intact pair is there; `NotBound` if it belongs
    to another run; `CheckpointError` if, without a digest, `best.json` is not valid JSON.
    """
    folder = Path(folder)
    _, want = recorded_best(record)
    pair = locate(folder, "best", sha256=want) if want else locate(folder, "best")
    if pair is not None and pair.intact:
        check_bound(pair.meta, pair.json_path, run_id=run_id, settings=settings, keys=keys)
        return pair
    try:
        newest = locate(folder, "best")
    except CheckpointError:
        newest = None
    raise NoTrustedBest(folder, want=want, newest=newest, run_id=run_id)
