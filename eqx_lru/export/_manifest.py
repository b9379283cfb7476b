r"""The manifest written beside an exported artifact (`<artifact>.json`).

It says how to call the program without eqx_lru: its inputs and outputs (names, shapes
with `"batch"`/`"length"` for the symbolic dimensions, dtypes), the carry's layout for a
step or loop program, the form the program computes in, what the model reads (the
vocabulary size of token ids, or the number of input features) and, for a classifier,
the number of classes; which checks the exported program performs (`"checked"`: an
invalid row gets NaN outputs, `_guard.py`) and which run-time checks of the library it does
not (`"unchecked"`); and the library and JAX versions that wrote it.
"""

import hashlib
from typing import Any

import jax
import numpy as np

from .._models._model import LRUModel
from .._models._retrieval import LRURetrievalModel
from .._runtime_check import skipped_checks
from .._version import package_version
from ._format import Format
from ._guard import checks_of
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


#: The manifest's own entries, written by `manifest`: `metadata=` may add others, never
#: these (`write` refuses an `Exported` whose own entries were changed).
OWN_KEYS = (
    "format",
    "program",
    "artifact",
    "bytes",
    "sha256",
    "inputs",
    "outputs",
    "carry",
    "vocab_size",
    "in_features",
    "classes",
    "exported_form",
    "notes",
    "checked",
    "unchecked",
    "eqx_lru",
    "jax",
)

#: What each check of `checked` asks of the inputs, in words (its rule follows).
_MEANS = {
    "length": "each length must be in [1, the padded length]",
    "token_ids": "token ids must be in the vocabulary",
    "dt": "time steps must be positive and finite (the gap before each position)",
}

_PAIR = (
    "x[:, 0] and x[:, 1] are the two documents of each pair, each padded to the common "
    "length; length[:, 0] and length[:, 1] their valid lengths."
)


def notes_of(program: Program, checked: list[dict[str, str]], unchecked: list) -> str:
    """The manifest's `"notes"`, written from its lists only (`checked`, `unchecked`, the
    inputs and carry), so that no note can say otherwise than they do."""
    parts = ["Inference mode (running batch-norm statistics, no dropout); batch norm folded."]
    if program.kind == "pair":
        parts.append(_PAIR)
    for c in checked:
        means = _MEANS.get(c["check"], c["check"])
        parts.append(
            f"{means[0].upper()}{means[1:]} ({c['rule']}): checked; a row that breaks it "
            "gets NaN in every floating-point output (see 'checked')."
        )
    if checked:
        parts.append("Test isfinite before reading a class.")
    for c in unchecked:
        parts.append(
            f"Not checked by the program: {c['check']} ({c['message']}); check it before "
            "calling (see 'unchecked')."
        )
    if program.carry:
        parts.append("The carry starts at zeros; feed the returned next_carry back.")
    return " ".join(parts)


def manifest(
    fmt: Format, program: Program, model, reads: Reads, data: bytes, closed: Any
) -> dict[str, Any]:
    """The manifest of `data`, the artifact of `program` in format `fmt`, built from
    `model` (prepared); `closed` is the program's jaxpr (its outputs and checks)."""
    checked = checks_of(program, reads)
    covered = {c["check"] for c in checked}
    unchecked = [c for c in skipped_checks(closed) if c["check"] not in covered]
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
        "notes": notes_of(program, checked, unchecked),
        "checked": checked,
        "unchecked": unchecked,
        "eqx_lru": package_version(),
        "jax": jax.__version__,
    }
