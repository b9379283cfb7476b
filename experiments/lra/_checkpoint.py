"""Atomic checkpoints: an `eqx.tree_serialise_leaves` file plus a small JSON.

A checkpoint named `NAME` in a folder is two files:

- `NAME.eqx`: the leaves of a pytree (for training: model, BatchNorm state, optimiser
  state, RNG key and the step as an int64 array), written by `eqx.tree_serialise_leaves`.
  Reading it needs a pytree of the same structure, `like`.
- `NAME.json`: small metadata (step, best validation accuracy, the run's config, ...).

Each file is written to a temporary name in the same folder, flushed with `fsync`, then
`os.replace`d over the old one, so a crash or Ctrl-C at any moment leaves either the old
or the new file, never a torn one. The `.eqx` file is replaced first; the JSON records the
step, and `load` checks it against the step stored in the `.eqx` leaves, so a crash
between the two replaces is detected instead of silently mixing two checkpoints.

**Integrity.** The JSON stores the SHA-256 of the `.eqx` file (`"sha256"`); `load` checks
it before reading a leaf, so a truncated or corrupted file is reported by name
(`CheckpointError`) rather than as a shape mismatch, and `finite=True` refuses leaves that
hold NaN or infinity. A JSON file that does not parse, or lacks a required entry, is
reported by name as corrupt (`read_json`).
"""

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


__all__ = ["CheckpointError", "save", "load", "exists", "to_host", "write_atomic", "read_json", "sha256", "nonfinite_leaves"]


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
    folder = Path(folder)
    return (folder / f"{name}.eqx").is_file() and (folder / f"{name}.json").is_file()


def save(folder: str | os.PathLike, name: str, tree: Any, meta: Mapping[str, Any]) -> None:
    """Write `tree` to `folder/name.eqx` and `meta` to `folder/name.json`, atomically.

    `meta["step"]` (an int) is required; it is the consistency check `load` uses, so the
    caller must also keep the same step inside `tree` (see `load`'s `step_of`).
    """
    if "step" not in meta:
        raise ValueError("checkpoint metadata needs a 'step' entry.")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    eqx.tree_serialise_leaves(buffer, to_host(tree))
    data = buffer.getvalue()
    write_atomic(folder / f"{name}.eqx", data)
    text = json.dumps({**meta, "sha256": sha256(data)}, indent=1, sort_keys=True, allow_nan=True)
    write_atomic(folder / f"{name}.json", text.encode())


def load(
    folder: str | os.PathLike, name: str, like: Any, *, step_of=None, finite: bool = False,
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
    eqx_path, json_path = folder / f"{name}.eqx", folder / f"{name}.json"
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
            raise _corrupt(eqx_path, json_path, data, f"; it holds step {int(step_of(tree))}, the JSON "
                           f"says {meta['step']}: a damaged file, or the run was killed between "
                           "writing the two files")
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
