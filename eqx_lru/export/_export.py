r"""`export`: a model or block of the library out of JAX; `write`: onto disk."""

import copy
import dataclasses
import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import equinox as eqx
import jax

from ._arguments import check_flags, check_metadata, check_model, check_path, check_reads
from ._files import write_pair
from ._format import FORMATS, Format
from ._guard import guarded
from ._manifest import OWN_KEYS, manifest
from ._prepare import cores, prepare
from ._program import ExportError, Program, Reads, symbolic_specs


@dataclasses.dataclass
class Exported:
    """An exported program: the artifact's bytes (`data`), its `manifest` (a JSON-ready
    dict; `"artifact"` is set by `write`), the `format` record and the `program` built.

    The manifest's own entries (`eqx_lru.export`'s, listed in the export guide) describe
    the artifact: `write` refuses an `Exported` whose own entries were changed since
    `export` made it. Add entries of your own under other names."""

    data: bytes
    manifest: dict[str, Any]
    format: Format
    program: Program
    _own: dict[str, Any] | None = dataclasses.field(
        default=None, init=False, repr=False, compare=False
    )


def _format(format: Any) -> Format:
    if isinstance(format, Format):
        return format
    if not isinstance(format, str) or format not in FORMATS:
        raise ExportError(
            f"`format` must be one of {', '.join(FORMATS)} or an eqx_lru.export.Format "
            f"record; got {format!r}."
        )
    return FORMATS[format]


#: The model contract of the call, as the sequence programs trace it (the export guide).
_CALL_CONTRACT = (
    "The call is traced once for every length: `x.shape[0]` is the symbolic dimension "
    "`length` (not an int) and `length=` an int32 scalar; use them only where JAX takes a "
    "traced size (`h[length - 1]` or `h[-1]`, not `h[x.shape[0] - 1]`; jnp, not np; no "
    "Python `if` on them), or export program='step'."
)


def _untraceable(error: Exception, model, fmt: Format, program: str) -> Exception:
    """`error`, raised while building, tracing or serialising the program, as one
    `ExportError` line naming the cores, the format and the reason; `error` itself if it
    is one already, or not an error of tracing (a bug is not hidden)."""
    traced = isinstance(error, TypeError | NotImplementedError | ValueError | IndexError)
    shapes = type(error).__name__ == "InconclusiveDimensionOperation"
    if isinstance(error, ExportError) or not (traced or shapes):
        return error
    names = sorted({type(c).__name__ for c in cores(model)})
    label = ": ".join([type(model).__name__, *([", ".join(names)] if names else [])])
    lines = str(error).strip().splitlines() or [""]
    reason = f"{type(error).__name__}: {lines[0][:300]}"
    symbolic = shapes or "length" in lines[0] or isinstance(error, IndexError)
    advice = (
        _CALL_CONTRACT
        if symbolic and program != "step"
        else "Export another program or format, or give the core a computation that takes "
        "a symbolic length."
    )
    return ExportError(
        f"format {fmt.name!r} cannot export the {program!r} program of this model "
        f"({label}): tracing it with a symbolic batch and length failed ({reason}). "
        f"{advice}"
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
    your own with their call and, for streaming, `init_carry`/`step`: the model contract
    of the export guide) in inference mode.

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
    - `metadata`: JSON entries added to the manifest (e.g. the task the model was trained
        on), under names other than the manifest's own.

    **Returns:** an `Exported` (bytes and manifest); `write(exported, path)` saves both.

    **Raises:** `ExportError` naming the problem and what to do (an unknown format or
    program, a bidirectional model for a step or loop, a core with no real form for a
    real-only format, a model that cannot be traced with a symbolic batch and length, a
    `metadata` key of the manifest's own), `TypeError` for an argument of the wrong kind.
    """
    state = check_model(model, state)
    fmt = _format(format)
    if not isinstance(program, str) or program not in fmt.programs:
        raise ExportError(
            f"`program` must be one of {', '.join(fmt.programs)} for format {fmt.name!r}; "
            f"got {program!r}."
        )
    check_flags(dt=dt, description=description)
    extra = check_metadata(metadata)
    reads = check_reads(model, reads)
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
    exported = Exported(data, {**info, **extra}, fmt, built)
    exported._own = copy.deepcopy(info)
    return exported


def _manifest_text(exported: Exported, name: str) -> bytes:
    """The manifest of `exported` as written beside the artifact `name`; an error where
    its own entries are not those `export` wrote, or it is not JSON."""
    info = exported.manifest
    if not isinstance(info, dict):
        raise TypeError(f"`exported.manifest` must be a dict; got {type(info).__name__}.")
    if info.get("sha256") != hashlib.sha256(exported.data).hexdigest():
        raise ExportError(
            "`exported.manifest['sha256']` is not the SHA-256 of `exported.data`: the "
            "manifest's own entries describe the artifact; export again."
        )
    own = exported._own or {}
    changed = [k for k in OWN_KEYS if k in own and k != "artifact" and info.get(k) != own[k]]
    if changed:
        raise ExportError(
            f"`exported.manifest[{changed[0]!r}]` is not what export wrote: the manifest's "
            f"own entries ({', '.join(OWN_KEYS)}) describe the artifact; add yours under "
            "other names (export's `metadata=`)."
        )
    try:
        return json.dumps({**info, "artifact": name}, indent=1).encode()
    except (TypeError, ValueError, RecursionError) as e:
        raise ExportError(f"`exported.manifest` is not JSON ({e}).") from None


def write(exported: Exported, path: str | os.PathLike, *, overwrite: bool = False) -> Path:
    """Write the artifact to `path` and its manifest to `path` + `".json"` (the manifest's
    `"artifact"` is the file name) as one unit; the folder is created. Returns `path`.

    Files at either name that export did not write (no manifest of ours beside the
    artifact, or one whose SHA-256 is not the artifact's; a symbolic link) are replaced
    only with `overwrite=True`; no write follows a link. The pair is replaced whole: a
    crash leaves the old pair, the new one, or a manifest without an artifact, never an
    artifact beside another's manifest; a full disk leaves the old pair untouched. Writers
    to one path (threads or processes) take turns (a lock): the last one wins whole.

    **Raises:** `ExportError` (one line) for files it would not replace, an `Exported`
    whose manifest's own entries were changed, and every error of the operating system
    (naming the path, the reason and what to do); `TypeError` for an argument of the
    wrong kind."""
    if not isinstance(exported, Exported):
        raise TypeError(
            f"`exported` must be what eqx_lru.export.export returns; got {type(exported).__name__}."
        )
    path = check_path(path)
    if not isinstance(overwrite, bool):
        raise TypeError(f"`overwrite` must be True or False; got {overwrite!r}.")
    text = _manifest_text(exported, path.name)
    write_pair(path, exported.data, text, overwrite=overwrite)
    return path
