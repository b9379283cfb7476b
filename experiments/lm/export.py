"""Export a language-model run out of JAX through the library's `eqx_lru.export`, as
`python -m experiments.export` does for LRA runs:

    python -m experiments.lm export --run runs/lm --format stablehlo|onnx [--step] [--dest DIR]
        [--overwrite]

reads the run's newest complete checkpoint (verified as `--resume` and `sample` verify it,
`weights.load_model`) and writes, into `DIR` (default `RUN/export/`), `model.<suffix>`
(the whole sequence: byte ids `(batch, length)` int32 and valid lengths `(batch,)` to the
next-byte logits `(batch, length, 256)`) or, with `--step`, `step.<suffix>` (one byte of
`batch` streams and the carry, to the logits and the next carry: the program a sampler
calls), each with its manifest (`<artifact>.json`) holding the library's fields and the
run's settings, corpus digest and source checkpoint. ONNX runs the real form
(`eqx_lru.to_real`, the same function).
"""

import sys
from pathlib import Path
from typing import Any

import eqx_lru.export

from ..runs.errors import UsageError
from .model import VOCAB
from .weights import Loaded, load_model

__all__ = ["export_run", "export_main"]

_MODEL_KEYS = ("form", "depth", "d_model", "d_state", "r_min", "r_max", "max_phase")


def _metadata(loaded: Loaded) -> dict[str, Any]:
    """The run's entries of the manifest (the library's own notes say what is checked)."""
    cfg = loaded.cfg
    return {
        "task": "byte-level language model (experiments/lm): inputs are bytes (token ids "
        "0-255), outputs the logits of the next byte",
        "model": {k: getattr(cfg, k) for k in _MODEL_KEYS},
        "corpus_sha256": cfg.corpus_sha256,
        "source": {
            "checkpoint": str(loaded.checkpoint),
            "step": loaded.step,
            "sha256": loaded.sha256,
        },
    }


def export_run(
    run: str | Path,
    fmt: str,
    *,
    step: bool = False,
    dest: str | Path | None = None,
    overwrite: bool = False,
) -> Path:
    """Export the run in folder `run`; returns the artifact's path (its manifest is the
    same path plus `.json`). Files there that export did not write are replaced only with
    `overwrite` (`eqx_lru.export.write`, as `python -m experiments.export --overwrite`).

    **Raises:** `UsageError` for a folder without a usable run, or what `eqx_lru.export`
    refuses (`ExportError`, worded by the library).
    """
    loaded = load_model(run)
    folder = Path(dest) if dest is not None else Path(run) / "export"
    try:
        exported = eqx_lru.export.export(
            loaded.model,
            loaded.state,
            format=fmt,
            program="step" if step else "sequence",
            reads=eqx_lru.export.Tokens(VOCAB),
            description=f"eqx_lru byte-level LRUModel from {loaded.checkpoint}",
            metadata=_metadata(loaded),
        )
        return eqx_lru.export.write(
            exported,
            folder / (("step" if step else "model") + exported.format.suffix),
            overwrite=overwrite,
        )
    except eqx_lru.export.ExportError as e:
        raise UsageError(str(e)) from None


def export_main(args) -> int:
    """`python -m experiments.lm export ...` (parsed `args`)."""
    artifact = export_run(
        args.run, args.format, step=args.step, dest=args.dest, overwrite=args.overwrite
    )
    print(f"wrote {artifact} and {artifact.name}.json", file=sys.stderr)
    return 0
