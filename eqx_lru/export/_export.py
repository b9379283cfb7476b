r"""`export`: a model or block of the library out of JAX; `write`: onto disk."""

import dataclasses
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import equinox as eqx
import jax

from ._format import FORMATS, Format
from ._manifest import manifest
from ._prepare import prepare
from ._program import ExportError, Program, Reads, reads_of, symbolic_specs


@dataclasses.dataclass
class Exported:
    """An exported program: the artifact's bytes (`data`), its `manifest` (a JSON-ready
    dict; `"artifact"` is set by `write`), the `format` record and the `program` built."""

    data: bytes
    manifest: dict[str, Any]
    format: Format
    program: Program


def _format(format: str | Format) -> Format:
    if isinstance(format, Format):
        return format
    if format not in FORMATS:
        raise ExportError(
            f"`format` must be one of {', '.join(FORMATS)} or an eqx_lru.export.Format "
            f"record; got {format!r}."
        )
    return FORMATS[format]


def export(
    model: eqx.Module,
    state: eqx.nn.State | None = None,
    *,
    format: str | Format = "stablehlo",
    program: str = "sequence",
    reads: Reads | None = None,
    description: str = "",
    metadata: Mapping[str, Any] | None = None,
) -> Exported:
    """Export `model` (an `LRUModel`, `LRUBlock`, `LRURetrievalModel`, or a module of
    your own with their call and, for streaming, `init_carry`/`step`) in inference mode.

    **Arguments:**

    - `model`, `state`: the module and its batch-norm state (`eqx.nn.make_with_state`);
        `None` for a model without one. Batch norm is folded into its running statistics.
    - `format`: `"stablehlo"`, `"onnx"` (needs the `export` extra; the real form), or any
        `eqx_lru.export.Format` record.
    - `program`: `"sequence"` (the whole sequence: `(x, length) -> out`, for ONNX also
        from and to a carry), `"step"` (one position of a batch of streams: `(x_t,
        *carry) -> (y_t, *carry)`) or `"pair"` (an `LRURetrievalModel`'s whole pair).
        `batch` and `length` are symbolic: one artifact serves every size.
    - `reads`: what one input position is, `Tokens(vocab_size)` or `Features(size,
        dtype)`; read from the model for the library's models and blocks.
    - `description`: a free text stored in the artifact where the format has a place.
    - `metadata`: entries added to the manifest (e.g. the task the model was trained on).

    **Returns:** an `Exported` (bytes and manifest); `write(exported, path)` saves both.

    **Raises:** `ExportError` naming the problem and what to do (an unknown format or
    program, a bidirectional model for a step or loop, a core with no real form for a
    real-only format).
    """
    fmt = _format(format)
    if program not in fmt.programs:
        raise ExportError(
            f"`program` must be one of {', '.join(fmt.programs)} for format {fmt.name!r}; "
            f"got {program!r}."
        )
    if state is None:
        state = eqx.nn.State(model)
    reads = reads if reads is not None else reads_of(model)
    prepared = prepare(model, state, real=fmt.real)
    built = fmt.programs[program](prepared, state, reads)
    closed = jax.make_jaxpr(built.fn)(*symbolic_specs(built))
    data = fmt.serialise(built, description)
    info = manifest(fmt, built, prepared, reads, data, closed)
    info.update(metadata or {})
    return Exported(data, info, fmt, built)


def _write_atomic(path: Path, data: bytes) -> None:
    """`data` into `path` through a temporary file beside it, `fsync` and a rename (then
    the folder synced): a reader never sees a partly written file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    try:
        fd = os.open(path.parent, os.O_RDONLY)
    except OSError:  # folders cannot be opened here: the rename is all there is
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write(exported: Exported, path: str | os.PathLike) -> Path:
    """Write the artifact to `path` and its manifest to `path` + `".json"` (the manifest's
    `"artifact"` is the file name), each atomically; the folder is created. Returns
    `path`."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ExportError(
            f"{str(path.parent)!r} is not a writable folder ({e.strerror or e})."
        ) from None
    _write_atomic(path, exported.data)
    info = {**exported.manifest, "artifact": path.name}
    _write_atomic(path.with_name(path.name + ".json"), json.dumps(info, indent=1).encode())
    return path
