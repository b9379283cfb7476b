"""The checkpoint store: an `eqx.tree_serialise_leaves` file plus a small JSON, as one unit.

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
the renames (`experiments/runs/atomic.py`). Whatever instant the process dies (`kill -9`,
power loss), the folder holds the new pair or the previous one complete, and `locate`
finds the newest complete pair.

**Integrity.** `load` checks the SHA-256 before reading a leaf, so a truncated or corrupted
file is reported by name (`CheckpointError`) rather than as a shape mismatch, and
`finite=True` refuses leaves that hold NaN or infinity. A JSON file that does not parse,
lacks a required entry, or records a step or digest of the wrong kind, is reported by name
as corrupt (`read_json`; the fields checked as `runs.records` reads them). A crash never
produces these (every file is replaced whole), so they are refused rather than skipped.
"""

import dataclasses
import hashlib
import io
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import numpy as np

from ..atomic import fsync_folder, write_temp
from ..records import SHA256, WHOLE, Fields

__all__ = [
    "CheckpointError",
    "Pair",
    "PREVIOUS",
    "save",
    "load",
    "locate",
    "load_pair",
    "exists",
    "to_host",
    "read_json",
    "sha256",
    "nonfinite_leaves",
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


#: What to do about a checkpoint's JSON whose fields are malformed (the end of the line).
ADVICE = (
    "it was edited, or written by another tool. Restore the run's own files, or start a new "
    "run with another --out."
)


def _recorded_sha256(meta: Mapping[str, Any], path: str | os.PathLike) -> str | None:
    """The SHA-256 of the `.eqx` file that the checkpoint JSON `meta` (read from `path`)
    records; None in a JSON written before digests were recorded. **Raises:**
    `CheckpointError` naming `path` if it is not a SHA-256."""
    return Fields(meta, str(path), CheckpointError, ADVICE).get("sha256", SHA256, None)


def _recorded_step(meta: Mapping[str, Any], path: str | os.PathLike) -> int:
    """The step that the checkpoint JSON `meta` (read from `path`) records, a whole number."""
    return Fields(meta, str(path), CheckpointError, ADVICE).get("step", WHOLE)


def nonfinite_leaves(tree: Any) -> list[str]:
    """Key paths of the floating leaves of `tree` that hold NaN or infinity."""
    bad = []
    for path, leaf in jax.tree_util.tree_leaves_with_path(tree):
        x = np.asarray(leaf) if isinstance(leaf, np.ndarray | jax.Array) else None
        if x is not None and np.issubdtype(x.dtype, np.inexact) and not np.all(np.isfinite(x)):
            bad.append(jax.tree_util.keystr(path))
    return bad


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
        digest = _recorded_sha256(meta, json_path)
        if digest is None:  # written before digests were recorded
            return Pair(json_path, own, meta, own.is_file())
        for eqx_path in (own, folder / f"{name}{other}.eqx"):
            if _digest(eqx_path) == digest:
                return Pair(json_path, eqx_path, meta, True)
        return Pair(json_path, own, meta, False)
    return None


def save(folder: str | os.PathLike, name: str, tree: Any, meta: Mapping[str, Any]) -> str:
    """Write `tree` to `folder/name.eqx` and `meta` to `folder/name.json` as one unit.

    The newest complete pair already there becomes `name.prev.*` (see the module
    docstring), so a crash at any instant leaves a complete pair for `locate`.
    `meta`'s `step` (an int) is required; it is the consistency check `load` uses, so the
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
    tmp_eqx = write_temp(eqx_path, data)
    try:
        tmp_json = write_temp(json_path, text.encode())
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
                fsync_folder(folder)
            os.replace(tmp_eqx, eqx_path)
            os.replace(tmp_json, json_path)
            fsync_folder(folder)
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
    recorded, step = _recorded_sha256(meta, json_path), _recorded_step(meta, json_path)
    data = eqx_path.read_bytes()
    intact = recorded is None or sha256(data) == recorded
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
    if step_of is not None and int(step_of(tree)) != step:
        if not intact:
            raise _corrupt(
                eqx_path,
                json_path,
                data,
                f"; it holds step {int(step_of(tree))}, the JSON "
                f"says {step}: a damaged file, or the run was killed between "
                "writing the two files",
            )
        raise CheckpointError(
            f"{eqx_path} holds step {int(step_of(tree))} but {json_path} says step "
            f"{step}: the run was killed between writing the two files. Delete "
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
