"""`export_run`: a trainer run's trusted best weights exported with `eqx_lru.export`, the
run's task, model settings and source checkpoint added to the manifest."""

from pathlib import Path
from typing import Any

import eqx_lru
from eqx_lru.export import FORMATS as _LIBRARY_FORMATS
from eqx_lru.export import ExportError, Features, Tokens

from ._run import Run, load_run

__all__ = ["FORMATS", "export_run"]

#: The formats of `--format`: the library's.
FORMATS = tuple(_LIBRARY_FORMATS)

_NO_PAIR_STEP = (
    "--step: a Retrieval run (two-tower model) has no streaming step (its head needs both "
    "documents whole); export the whole-pair program: drop --step (--format stablehlo)."
)

_MODEL_KEYS = ("core", "form", "depth", "d_model", "d_state", "pooling", "norm", "bidirectional")


def _run_metadata(run: Run) -> dict[str, Any]:
    """What the manifest says of the run beyond the library's own entries (whose notes
    describe the program): the task, the model's settings, the source checkpoint."""
    config = run.config
    return {
        "task": config.task,
        "model": {k: getattr(config, k) for k in (*_MODEL_KEYS, "glu")},
        "source": {
            "checkpoint": str(run.checkpoint),
            "step": run.meta.get("step"),
            "val_accuracy": run.meta.get("val_accuracy"),
            "sha256": run.meta.get("sha256"),
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
    """Export the run in folder `run` with `eqx_lru.export` (the whole sequence, the whole
    pair of a Retrieval run, or with `step` one streaming step) into `dest` (default
    `run/export`) as `model.<suffix>` or `step.<suffix>`; returns the artifact's path (the
    manifest is the same path plus `.json`). Files there that export did not write are
    replaced only with `overwrite` (`eqx_lru.export.write`)."""
    if fmt not in FORMATS:
        raise ExportError(f"--format must be one of {', '.join(FORMATS)}; got {fmt!r}.")
    loaded = load_run(run)
    if loaded.pair and step:
        raise ExportError(_NO_PAIR_STEP)
    reads = Tokens(loaded.in_size) if loaded.tokens else Features(loaded.in_size)
    name = type(loaded.model).__name__  # LRUModel, or LRURetrievalModel
    try:
        exported = eqx_lru.export.export(
            loaded.model,
            loaded.state,
            format=fmt,
            program="step" if step else "pair" if loaded.pair else "sequence",
            reads=reads,
            description=f"eqx_lru {name} from {loaded.checkpoint}",
        )
    except ExportError as e:  # the model cannot be exported so: say which run's core
        config = loaded.config
        flags = f"--core {config.core} ({config.form}) --format {fmt}" + (" --step" * step)
        raise ExportError(f"{flags}: {e}") from None
    exported.manifest.update(_run_metadata(loaded))
    folder = Path(dest) if dest is not None else Path(run) / "export"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ExportError(
            f"--dest {str(folder)!r} is not a writable folder ({e.strerror or e})."
        ) from None
    suffix = exported.format.suffix
    artifact = folder / (("step" if step else "model") + suffix)
    return eqx_lru.export.write(exported, artifact, overwrite=overwrite)
