r"""The manifest written beside an exported artifact (`<artifact>.json`).

It says how to call the program without eqx_lru: its inputs and outputs (names, shapes
with `"batch"`/`"length"` for the symbolic dimensions, dtypes), the carry's layout for a
step or loop program, the form the program computes in, what the model reads (the
vocabulary size of token ids, or the number of input features) and, for a classifier,
the number of classes; which run-time checks of the library the exported program does not
perform; and the library and JAX versions that wrote it.
"""

import hashlib
from typing import Any

import jax
import numpy as np

from .._model import LRUModel
from .._retrieval import LRURetrievalModel
from .._runtime_check import skipped_checks
from ._format import Format
from ._prepare import cores, is_complex
from ._program import Features, Program, Reads, Tokens


def _dim(d) -> int | str:
    return d if isinstance(d, int) else str(d)


def classes_of(model, out_shape: tuple) -> int | None:
    """The number of classes of a classifier of the library (an `LRUModel` with a head
    and pooling, or an `LRURetrievalModel`), else None."""
    pooled = len(out_shape) == 2  # (batch, classes): no length axis
    if isinstance(model, LRURetrievalModel) or (
        isinstance(model, LRUModel) and model.head is not None and model.pooling is not None
    ):
        return int(out_shape[-1]) if pooled else None
    return None


def form_of(model) -> str:
    """`"complex"` if a core of `model` keeps a complex state, else `"real"`."""
    return "complex" if any(is_complex(c) for c in cores(model)) else "real"


def _notes(program: Program, reads: Reads, checks: list[dict[str, str]]) -> str:
    notes = "Inference mode (running batch-norm statistics, no dropout); batch norm folded."
    if isinstance(reads, Tokens):
        notes += f" Token ids must be in [0, {reads.vocab_size}) (others are clamped)."
    if any(name == "length" for name, _, _ in program.inputs):
        notes += " Each length must be in [1, the padded length]."
    if checks:
        notes += " The exported program does not check its inputs (see 'unchecked')."
    if program.carry:
        notes += " The carry starts at zeros; feed the returned next_carry back."
    return notes


def manifest(
    fmt: Format, program: Program, model, reads: Reads, data: bytes, closed: Any
) -> dict[str, Any]:
    """The manifest of `data`, the artifact of `program` in format `fmt`, built from
    `model` (prepared); `closed` is the program's jaxpr (its outputs and checks)."""
    from .. import __version__

    checks = skipped_checks(closed)
    outputs = [
        {"name": n, "shape": [_dim(d) for d in a.shape], "dtype": str(a.dtype)}
        for n, a in zip(program.outputs, closed.out_avals, strict=True)
    ]
    return {
        "format": fmt.name,
        "program": program.kind,
        "artifact": None,  # the file name, set when it is written
        "bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "inputs": [
            {"name": n, "shape": list(s), "dtype": str(np.dtype(d))} for n, s, d in program.inputs
        ],
        "outputs": outputs,
        "carry": program.carry,
        "vocab_size": reads.vocab_size if isinstance(reads, Tokens) else None,
        "in_features": reads.size if isinstance(reads, Features) else None,
        "classes": classes_of(model, tuple(closed.out_avals[0].shape)),
        "exported_form": form_of(model),
        "notes": _notes(program, reads, checks),
        "unchecked": checks,
        "eqx_lru": __version__,
        "jax": jax.__version__,
    }
