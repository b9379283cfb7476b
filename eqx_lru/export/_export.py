r"""`export`: a model or block of the library out of JAX; `write`: onto disk."""

import dataclasses
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import equinox as eqx
import jax

from ._files import write_pair
from ._format import FORMATS, Format
from ._guard import guarded
from ._manifest import manifest
from ._prepare import cores, prepare
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


def _untraceable(error: Exception, model, fmt: Format, program: str) -> Exception:
    """`error`, raised while building, tracing or serialising the program, as one
    `ExportError` line naming the cores, the format and the reason; `error` itself if it
    is one already, or not an error of tracing (a bug is not hidden)."""
    traced = isinstance(error, TypeError | NotImplementedError | ValueError)
    if isinstance(error, ExportError) or not (
        traced or type(error).__name__ == "InconclusiveDimensionOperation"
    ):
        return error
    names = sorted({type(c).__name__ for c in cores(model)}) or [type(model).__name__]
    lines = str(error).strip().splitlines() or [""]
    reason = f"{type(error).__name__}: {lines[0][:300]}"
    return ExportError(
        f"format {fmt.name!r} cannot export the {program!r} program of this model "
        f"({', '.join(names)}): tracing it with a symbolic batch and length failed ({reason}). "
        "Export another program or format, or give the core a computation that takes a "
        "symbolic length."
    )


def export(
    model: eqx.Module,
    state: eqx.nn.State | None = None,
    *,
    format: str | Format = "stablehlo",
    program: str = "sequence",
    reads: Reads | None = None,
    dt: bool = False,
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
    - `dt`: also read time steps (irregular sampling; see the concepts page on time
        steps): the sequence programs take `dt` `(batch, length)` after `length`, the step
        `dt_t` `(batch,)` after `x_t`. Every core of the model must take them
        (`takes_dt`); not for `"pair"`.
    - `description`: a free text stored in the artifact where the format has a place.
    - `metadata`: entries added to the manifest (e.g. the task the model was trained on).

    **Returns:** an `Exported` (bytes and manifest); `write(exported, path)` saves both.

    **Raises:** `ExportError` naming the problem and what to do (an unknown format or
    program, a bidirectional model for a step or loop, a core with no real form for a
    real-only format, a model that cannot be traced with a symbolic batch and length).
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
    if dt and program == "pair":
        raise ExportError(
            "`dt=True` is not supported for program='pair' (the two-tower model's documents "
            "would need one row of steps each): export without `dt`."
        )
    prepared = prepare(model, state, real=fmt.real)
    try:
        # `dt` only when asked: a format record's builders need not know the option.
        options = {"dt": True} if dt else {}
        built = guarded(fmt.programs[program](prepared, state, reads, **options), reads)
        closed = jax.make_jaxpr(built.fn)(*symbolic_specs(built))
        data = fmt.serialise(built, description)
    except Exception as e:
        raise _untraceable(e, prepared, fmt, program) from None
    info = manifest(fmt, built, prepared, reads, data, closed)
    info.update(metadata or {})
    return Exported(data, info, fmt, built)


def write(exported: Exported, path: str | os.PathLike, *, overwrite: bool = False) -> Path:
    """Write the artifact to `path` and its manifest to `path` + `".json"` (the manifest's
    `"artifact"` is the file name) as one unit; the folder is created. Returns `path`.

    Files at either name that export did not write (no manifest of ours beside the
    artifact, or one whose SHA-256 is not the artifact's; a symbolic link) are replaced
    only with `overwrite=True`; no write follows a link. The pair is replaced whole: a
    crash leaves the old pair, the new one, or a manifest without an artifact, never an
    artifact beside another's manifest; a full disk leaves the old pair untouched.

    **Raises:** `ExportError` (one line) for files it would not replace, a folder it cannot
    create or a write that fails (naming the path and the reason)."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ExportError(
            f"{str(path.parent)!r} is not a writable folder ({e.strerror or e})."
        ) from None
    info = {**exported.manifest, "artifact": path.name}
    write_pair(path, exported.data, json.dumps(info, indent=1).encode(), overwrite=overwrite)
    return path
