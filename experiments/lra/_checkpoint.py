"""Atomic checkpoints: an `eqx.tree_serialise_leaves` file plus a small JSON.

A checkpoint named `NAME` in a folder is two files:

- `NAME.eqx`: the leaves of a pytree (for training: model, BatchNorm state, optimiser
  state, RNG key and the step as an int64 array), written by `eqx.tree_serialise_leaves`.
  Reading it needs a pytree of the same structure, `like`.
- `NAME.json`: small metadata (step, best validation accuracy, the run's config, ...) and
  the SHA-256 of the `.eqx` file (`"sha256"`).

**One unit.** The JSON names its `.eqx` by content (the SHA-256), so a pair is complete
exactly when a JSON and an `.eqx` with that digest are both on disk, whatever their names.
`save` keeps the previous complete pair as `NAME.prev.eqx` / `NAME.prev.json` (moved there
`.eqx` first, then JSON) until the new pair is complete; each new file is written to a
temporary name, flushed with `fsync` and `os.replace`d, and the folder is `fsync`ed after
the renames. Whatever instant the process dies (`kill -9`, power loss), the folder holds
the new pair or the previous one complete, and `locate` finds the newest complete pair.

**Integrity.** `load` checks the SHA-256 before reading a leaf, so a truncated or corrupted
file is reported by name (`CheckpointError`) rather than as a shape mismatch, and
`finite=True` refuses leaves that hold NaN or infinity. A JSON file that does not parse,
or lacks a required entry, is reported by name as corrupt (`read_json`). A crash never
produces these (every file is replaced whole), so they are refused rather than skipped.

**Trust.** Which checkpoints a run's readers (the trainer's `--resume`, whose best
weights give the test score, and `python -m experiments.export`) accept is decided here,
once: `check_bound` refuses a checkpoint of another run (`NotBound`: a training setting,
or the run id, differs from the run's), and `trusted_best` finds the `best` pair that a
`last` checkpoint records (`NoTrustedBest` when it is not there). The readers word the
refusals for their users. Before either reads a `last` record, `check_last` checks its
fields (types and shapes: `step`, `pending`, `best`, `best_sha256`, `data`, `config`,
`run_id`): a JSON file edited by hand or written by another tool is refused by name,
never read as "nothing recorded".

**Owner.** `RunLock` holds an exclusive `flock` on `FOLDER/.lock` (which records the
owner's pid and host) while a trainer writes the folder; the kernel releases it when the
owner dies, so a dead owner never leaves the folder locked.
"""

import dataclasses
import errno
import hashlib
import io
import json
import os
import socket
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import numpy as np

__all__ = [
    "CheckpointError",
    "FolderInUse",
    "Pair",
    "RunLock",
    "save",
    "load",
    "locate",
    "load_pair",
    "exists",
    "to_host",
    "write_atomic",
    "read_json",
    "sha256",
    "nonfinite_leaves",
    "PREVIOUS",
    "NotBound",
    "NoTrustedBest",
    "check_bound",
    "check_last",
    "recorded_best",
    "trusted_best",
]

#: The suffix of the previous complete pair: `NAME.prev.eqx`, `NAME.prev.json`.
PREVIOUS = ".prev"


class CheckpointError(ValueError):
    """A checkpoint or run file that is missing, corrupt, truncated or unusable; the
    message names the file and says what to do."""


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read_json(path: str | os.PathLike, *, required: tuple[str, ...] = ()) -> dict[str, Any]:
    """Parse the JSON object in `path`, naming the file if it is not one or lacks `required`."""
    path = Path(path)
    try:
        meta = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(
            f"{path} is corrupt (not valid JSON: {e}); it was truncated or overwritten. "
            "Restore it from a backup, or start a new run with another --out."
        ) from None
    missing = [k for k in required if not isinstance(meta, dict) or k not in meta]
    if missing:
        raise CheckpointError(
            f"{path} is corrupt: it lacks {', '.join(map(repr, missing))}. Restore it from a "
            "backup, or start a new run with another --out."
        )
    return meta


def nonfinite_leaves(tree: Any) -> list[str]:
    """Key paths of the floating leaves of `tree` that hold NaN or infinity."""
    bad = []
    for path, leaf in jax.tree_util.tree_leaves_with_path(tree):
        x = np.asarray(leaf) if isinstance(leaf, np.ndarray | jax.Array) else None
        if x is not None and np.issubdtype(x.dtype, np.inexact) and not np.all(np.isfinite(x)):
            bad.append(jax.tree_util.keystr(path))
    return bad


def write_atomic(path: str | os.PathLike, data: bytes) -> None:
    """Write `data` to `path` via a temporary file, `fsync` and `os.replace`."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    _fsync_folder(path.parent)


def _fsync_folder(folder: Path) -> None:
    """Make the renames in `folder` durable (a no-op where folders cannot be opened)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _write_temp(path: Path, data: bytes) -> Path:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp


def to_host(tree: Any) -> Any:
    """Every `jax.Array` leaf of `tree` as a NumPy array on this host.

    Works for arrays replicated over several processes too (it reads this process's first
    shard, which for a replicated array is the whole value).
    """

    def leaf(x):
        if isinstance(x, jax.Array):
            if x.is_fully_addressable:
                return np.asarray(x)
            return np.asarray(x.addressable_data(0))
        return x

    return jax.tree_util.tree_map(leaf, tree)


def exists(folder: str | os.PathLike, name: str) -> bool:
    """Whether `folder` holds any file of checkpoint `name` (complete or not)."""
    folder = Path(folder)
    return any(
        (folder / f"{name}{gen}{ext}").exists()
        for gen in ("", PREVIOUS)
        for ext in (".eqx", ".json")
    )


@dataclasses.dataclass(frozen=True)
class Pair:
    """A checkpoint's JSON and the `.eqx` it names; `intact`: the digests agree."""

    json_path: Path
    eqx_path: Path
    meta: dict[str, Any]
    intact: bool


def _digest(path: Path) -> str | None:
    try:
        return sha256(path.read_bytes())
    except FileNotFoundError:
        return None


def locate(folder: str | os.PathLike, name: str, *, sha256: str | None = None) -> Pair | None:
    """The newest checkpoint `name` in `folder`: `NAME.json` (else `NAME.prev.json`) with the
    `.eqx` of the same SHA-256 (`intact=True`), or, if no `.eqx` matches, with its own
    `.eqx` (`intact=False`: damaged or missing; `load_pair` says which). None if neither
    JSON exists (no save finished yet). With `sha256`: the pair whose JSON records that
    digest (None if neither does).

    **Raises:** `CheckpointError` if `NAME.json` is not valid JSON (a crash never leaves one:
    every file is replaced whole); not with `sha256`, where such a JSON is skipped.
    """
    folder = Path(folder)
    for first, other in (("", PREVIOUS), (PREVIOUS, "")):
        json_path = folder / f"{name}{first}.json"
        if not json_path.is_file():
            continue
        if sha256 is not None:
            try:
                meta = read_json(json_path)
            except (CheckpointError, OSError):
                continue
            if not isinstance(meta, dict) or meta.get("sha256") != sha256:
                continue
        else:
            meta = read_json(json_path)
        if not isinstance(meta, dict):
            raise CheckpointError(
                f"{json_path} is corrupt (not a JSON object). Restore it from a backup, "
                "or start a new run with another --out."
            )
        own = folder / f"{name}{first}.eqx"
        if "sha256" not in meta:  # written before digests were recorded
            return Pair(json_path, own, meta, own.is_file())
        for eqx_path in (own, folder / f"{name}{other}.eqx"):
            if _digest(eqx_path) == meta["sha256"]:
                return Pair(json_path, eqx_path, meta, True)
        return Pair(json_path, own, meta, False)
    return None


def save(folder: str | os.PathLike, name: str, tree: Any, meta: Mapping[str, Any]) -> str:
    """Write `tree` to `folder/name.eqx` and `meta` to `folder/name.json` as one unit.

    The newest complete pair already there becomes `name.prev.*` (see the module
    docstring), so a crash at any instant leaves a complete pair for `locate`.
    `meta["step"]` (an int) is required; it is the consistency check `load` uses, so the
    caller must also keep the same step inside `tree` (see `load`'s `step_of`).

    **Returns:** the SHA-256 of the `.eqx` file (recorded in the JSON as `"sha256"`).
    """
    if "step" not in meta:
        raise ValueError("checkpoint metadata needs a 'step' entry.")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    eqx.tree_serialise_leaves(buffer, to_host(tree))
    data = buffer.getvalue()
    digest = sha256(data)
    text = json.dumps({**meta, "sha256": digest}, indent=1, sort_keys=True, allow_nan=True)
    eqx_path, json_path = folder / f"{name}.eqx", folder / f"{name}.json"
    tmp_eqx = _write_temp(eqx_path, data)
    try:
        tmp_json = _write_temp(json_path, text.encode())
        try:
            try:
                current = locate(folder, name)
            except CheckpointError:  # a damaged NAME.json: keep NAME.prev.*, replace NAME.*
                current = None
            if current is not None and current.intact:  # keep it as the previous pair
                for path, ext in ((current.eqx_path, ".eqx"), (current.json_path, ".json")):
                    previous = folder / f"{name}{PREVIOUS}{ext}"
                    if path != previous:
                        os.replace(path, previous)
                _fsync_folder(folder)
            os.replace(tmp_eqx, eqx_path)
            os.replace(tmp_json, json_path)
            _fsync_folder(folder)
        finally:
            tmp_json.unlink(missing_ok=True)
    finally:
        tmp_eqx.unlink(missing_ok=True)
    return digest


def load(
    folder: str | os.PathLike,
    name: str,
    like: Any,
    *,
    step_of=None,
    finite: bool = False,
    required: tuple[str, ...] = (),
) -> tuple[Any, dict[str, Any]]:
    """Read the checkpoint `folder/name` into a pytree shaped like `like`.

    **Arguments:**

    - `like`: a pytree with the structure, shapes and dtypes of the saved one (e.g. a
        freshly initialised model and optimiser state).
    - `step_of`: optional `tree -> int`; if given, the step found in the leaves must equal
        the JSON's `step`.
    - `finite`: refuse a checkpoint with a NaN or infinite floating-point leaf.
    - `required`: entries the JSON must have (besides `step`).

    **Returns:** `(tree, meta)`, the leaves as NumPy arrays.

    **Raises:** `FileNotFoundError` if either file is missing; `CheckpointError` (a
    `ValueError`) naming the file if it is corrupt (checksum, JSON), does not fit `like`,
    holds non-finite values (with `finite`), or the two files disagree.
    """
    folder = Path(folder)
    return load_pair(
        folder / f"{name}.json",
        folder / f"{name}.eqx",
        like,
        step_of=step_of,
        finite=finite,
        required=required,
    )


def load_pair(
    json_path: Path,
    eqx_path: Path,
    like: Any,
    *,
    step_of=None,
    finite: bool = False,
    required: tuple[str, ...] = (),
) -> tuple[Any, dict[str, Any]]:
    """`load` of an explicit pair of files (e.g. a `Pair` found by `locate`)."""
    for path in (eqx_path, json_path):
        if not path.is_file():
            raise FileNotFoundError(f"No checkpoint file {str(path)!r}.")
    meta = read_json(json_path, required=("step", *required))
    data = eqx_path.read_bytes()
    intact = "sha256" not in meta or sha256(data) == meta["sha256"]
    try:
        tree = eqx.tree_deserialise_leaves(io.BytesIO(data), to_host(like))
    except Exception as e:  # shape/dtype/structure mismatch, truncated file
        if not intact:
            raise _corrupt(eqx_path, json_path, data) from None
        raise CheckpointError(
            f"{eqx_path} does not fit the model being built ({type(e).__name__}: {e}). Was it "
            "written with different model settings (task, --core, --form, --d-model, "
            "--d-state, --depth)? Use the same flags as the original run or a fresh --out."
        ) from e
    if step_of is not None and int(step_of(tree)) != int(meta["step"]):
        if not intact:
            raise _corrupt(
                eqx_path,
                json_path,
                data,
                f"; it holds step {int(step_of(tree))}, the JSON "
                f"says {meta['step']}: a damaged file, or the run was killed between "
                "writing the two files",
            )
        raise CheckpointError(
            f"{eqx_path} holds step {int(step_of(tree))} but {json_path} says step "
            f"{meta['step']}: the run was killed between writing the two files. Delete "
            f"{json_path.name} and {eqx_path.name} to restart, or restore them from a backup."
        )
    if not intact:
        raise _corrupt(eqx_path, json_path, data)
    if finite:
        bad = nonfinite_leaves(tree)
        if bad:
            shown = ", ".join(bad[:5]) + (f" and {len(bad) - 5} more" if len(bad) > 5 else "")
            raise CheckpointError(
                f"{eqx_path} holds non-finite values (NaN or infinity) in {shown}; resuming "
                "would train on them. Restore an earlier checkpoint, or start again with a "
                "fresh --out (and a lower --lr if the run diverged)."
            )
    return tree, meta


def _corrupt(eqx_path: Path, json_path: Path, data: bytes, detail: str = "") -> CheckpointError:
    return CheckpointError(
        f"{eqx_path} is corrupt or truncated: its SHA-256 does not match the one recorded in "
        f"{json_path.name} ({len(data)} bytes on disk{detail}). Restore it from a backup, or "
        "start again with a fresh --out."
    )


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
        theirs, own = self.run_ids
        return f"run id {theirs} in {self.path.name}, {own} in {run}"


def check_bound(
    meta: Mapping[str, Any],
    path: str | os.PathLike,
    *,
    run_id: str | None,
    settings: Mapping[str, Any] | None,
) -> None:
    """Refuse the checkpoint `path` (its JSON `meta`) if it belongs to another run.

    **Arguments:**

    - `run_id`: the run's id (`config.json`'s `run_id`); None: not compared.
    - `settings`: the run's settings (`config.json`); None: not compared.

    **Raises:** `NotBound` if a training setting (`config.TRAINING_KEYS`) that both the
    checkpoint's `config` and `settings` hold differs, or else if the checkpoint records a
    run id other than `run_id`.
    """
    from .config import TRAINING_KEYS

    theirs = meta.get("config") if isinstance(meta.get("config"), dict) else {}
    settings = settings or {}
    diff = {
        k: (theirs[k], settings[k])
        for k in TRAINING_KEYS
        if k in theirs and k in settings and theirs[k] != settings[k]
    }
    if diff:
        raise NotBound(path, diff=diff)
    recorded = meta.get("run_id")
    if recorded is not None and run_id is not None and recorded != run_id:
        raise NotBound(path, run_ids=(recorded, run_id))


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
) -> Pair:
    """The `best` pair in `folder` that the run's `last` checkpoint (its JSON `record`)
    trusts: the one with the SHA-256 the record names (`best.*`, else `best.prev.*` where a
    crash mid-save left it there), or, where the record names none (no record, or one from
    before digests), the newest complete pair. It must belong to the run (`check_bound`
    with `run_id` and `settings`). A damaged newest pair is not replaced by an older one.

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
        check_bound(pair.meta, pair.json_path, run_id=run_id, settings=settings)
        return pair
    try:
        newest = locate(folder, "best")
    except CheckpointError:
        newest = None
    raise NoTrustedBest(folder, want=want, newest=newest, run_id=run_id)


class FolderInUse(CheckpointError):
    """Another live process holds the folder's `RunLock`."""


class RunLock:
    """An exclusive lock on a run folder while one process writes it.

    `flock` on `FOLDER/.lock`: the kernel drops it when its owner exits or dies (even by
    `kill -9`), so a dead owner's lock is simply taken over. The file records the owner's
    pid, host and start time (UTC) for the refusal's message. Where the file system has no
    `flock` (some network mounts), the recorded owner is checked instead: a live pid on this
    host holds the folder, anything else is taken over.

    **Raises** (on `acquire`): `FolderInUse` naming the owner.
    """

    def __init__(self, folder: str | os.PathLike, *, what: str = "--out"):
        self.folder, self.what = Path(folder), what
        self.path = self.folder / ".lock"
        self._fd: int | None = None

    def _owner(self) -> str:
        try:
            owner = json.loads(self.path.read_text() or "{}")
            return (
                f"pid {owner.get('pid', '?')} on {owner.get('host', '?')}, since "
                f"{owner.get('since', '?')}"
            )
        except (OSError, ValueError):
            return "another process"

    def _refuse(self) -> FolderInUse:
        return FolderInUse(
            f"{self.what} {str(self.folder)!r} is in use by another trainer ({self._owner()}): two "
            "trainers would overwrite each other's checkpoints and metrics. Wait for it to end "
            f"(or stop it), or choose another {self.what}."
        )

    def acquire(self) -> "RunLock":
        import fcntl

        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise self._refuse() from None
        except OSError as e:
            if e.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                os.close(fd)
                raise
            if self._live_owner():
                os.close(fd)
                raise self._refuse() from None
        record = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "since": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(record).encode(), 0)
        self._fd = fd
        return self

    def _live_owner(self) -> bool:
        try:
            owner = json.loads(self.path.read_text() or "{}")
        except (OSError, ValueError):
            return False
        if owner.get("host") != socket.gethostname() or not isinstance(owner.get("pid"), int):
            return False
        if owner["pid"] == os.getpid():
            return False
        try:
            os.kill(owner["pid"], 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    def release(self) -> None:
        if self._fd is not None:
            try:
                os.ftruncate(self._fd, 0)
            except OSError:
                pass
            os.close(self._fd)  # closing drops the flock
            self._fd = None

    def __enter__(self) -> "RunLock":
        return self.acquire()

    def __exit__(self, *exc) -> bool:
        self.release()
        return False
