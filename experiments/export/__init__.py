"""Export a trained LRA run out of JAX: a serialized StableHLO program or an ONNX model.

    python -m experiments.export --run OUT --format stablehlo|onnx [--step] [--dest DIR]

reads the best weights of a run of `python -m experiments.lra.train` (`OUT/best.eqx`, its
settings from `OUT/best.json`) and writes, into `DIR` (default `OUT/export/`), one artifact
and a JSON manifest beside it (`<artifact>.json`: the inputs and outputs with their
shapes and dtypes, the carry of the step program, the vocabulary size, the format and
the source checkpoint with its SHA-256).

**Which weights.** Exactly those the trainer's `--resume` and test evaluation trust,
found by the same code (`experiments.lra._checkpoint.trusted_best`): the newest complete
`last` checkpoint (`last.json`, else `last.prev.json`) records the SHA-256 and step of
its best weights, and the `best` pair with that digest is read (`best.*`, or
`best.prev.*` where a crash mid-save left it there; without a `last` record, the newest
complete `best` pair). The `.eqx` is verified against its digest, must hold finite
values, and must belong to the run (its run id and training settings those of
`OUT/config.json`). A missing, damaged or foreign checkpoint is refused with one line
naming the file; a damaged newest file is not silently replaced by an older one.

**Programs.** Both in inference mode (running batch-norm statistics, no dropout), for a
batch of examples (`batch` and `length` are symbolic: one artifact serves every size):

- the whole sequence (default): `(x, length) -> out`, the model's call `jax.vmap`ped over
  the batch: `x` int32 token ids `(batch, length)` (or float32 features `(batch, length,
  in_size)`), `length` the int32 valid lengths `(batch,)`, `out` as the model returns it
  (`(batch, classes)` with pooling);
- a Retrieval run (the two-tower `eqx_lru.LRURetrievalModel`): the whole pair, `(x,
  length) -> out`, `x` int32 `(batch, 2, length)` (both documents of a pair, each padded to
  the common `length`), `length` int32 `(batch, 2)` their valid lengths, `out` the class
  logits `(batch, classes)` (the manifest's `program` is `"pair"`). It has no `--step`
  (the head needs both documents whole);
- `--step`: one position of `batch` streams, `(x_t, *carry) -> (y_t, *carry)`, the model's
  `LRUModel.step` (causal models only): `x_t` int32 `(batch,)` (or float32 `(batch,
  in_size)`), the carry a flat list of arrays (every block's recurrent state; with mean
  pooling the running sum and count), zeros at the start of a stream; `y_t` the output for
  the stream so far.

**Formats.**

- `stablehlo`: `jax.export` with symbolic `batch` and `length`; the file is
  `Exported.serialize()`, read back with `jax.export.deserialize` and run with its `.call`
  — in any Python with JAX, without eqx_lru or this repository. The model's form is kept
  (complex states stay complex).
- `onnx`: the real form (a complex-form model is converted with `eqx_lru.to_real` first:
  the same function, real arithmetic), written by `eqx_lru/export/_onnx.py` (a jaxpr →
  ONNX translator; why not jax2onnx is said there) and run by onnxruntime. Constants are
  folded at export: batch norm becomes one scale and shift per channel. The whole-sequence
  ONNX model runs the step in an ONNX `Loop` over the positions (the recurrence, not the
  parallel scan):
  `(x, length, *carry) -> (out, *carry)`, starting from a carry (zeros for a new
  sequence, or the carry of an earlier call: chunked prefill) and returning the one after
  the last valid position; `out` is the output at position `length - 1` (with
  `pooling=None`, every position's, zero at pads). A Retrieval pair is `(x, length) ->
  out` as in StableHLO, no carry: each document runs the encoder's step in such a `Loop`
  from zeros, then the two-tower head.

The exported programs do not check their inputs: token ids must be in `[0, vocab_size)`
(out-of-range ids are clamped, as JAX does) and `1 <= length <= x.shape[1]` (`x.shape[2]`
for a pair); the manifest's `unchecked` lists the checks the library performs and the
exported program does not.

This command is a thin layer over the library's `eqx_lru.export` (which exports any model
or block built with the library): it finds and loads the trusted checkpoint of a run,
adds the run's task, model settings and source checkpoint to the manifest, and writes
`model.<suffix>` or `step.<suffix>`.

The scan method of the run (`--method`) is replaced by `"sequential"` (`lax.scan`, the
one method that takes a symbolic length); the function is the same.

Exit status: 0 written, 2 a user error (missing run folder or checkpoint, a bidirectional
model or a Retrieval run with `--step`, a model ONNX cannot express...: one `error:` line).
"""

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

import eqx_lru
from eqx_lru.export import FORMATS as _LIBRARY_FORMATS
from eqx_lru.export import ExportError, Features, Tokens, prepare

__all__ = [
    "ExportError",
    "FORMATS",
    "Run",
    "load_run",
    "prepare",
    "export_run",
    "main",
]

FORMATS = tuple(_LIBRARY_FORMATS)

# --------------------------------------------------------------------------- loading


@dataclasses.dataclass
class Run:
    """A trained model read back from a run folder."""

    model: eqx.Module
    state: eqx.nn.State
    cfg: dict[str, Any]
    meta: dict[str, Any]  # best.json
    checkpoint: Path
    in_size: int  # vocabulary size (token tasks) or input features
    tokens: bool
    pair: bool = False  # a Retrieval run: the two-tower `eqx_lru.LRURetrievalModel`


def _sequence_model(model: eqx.Module) -> eqx.Module:
    """The `LRUModel` that reads one sequence: `model` itself, or the encoder a two-tower
    `LRURetrievalModel` shares between the documents of a pair."""
    return model.encoder if isinstance(model, eqx_lru.LRURetrievalModel) else model


def load_run(run: str | Path) -> Run:
    """The best weights of a trainer run, `(model, bn_state)` read from the checkpoint the
    trainer trusts (`_trusted_best`: `run/best.eqx`, or `run/best.prev.eqx` after a crash
    mid-save; checksum verified) with the trainer's own code (`steps.build_model`,
    `_checkpoint.load_pair`), its scan method replaced by `"sequential"`.

    The vocabulary of a token task is the one of the run's data, which the model's
    embedding stores: its size is read from the checkpoint, so the data need not be at
    hand.
    """
    from experiments.lra import _checkpoint as ckpt
    from experiments.lra import steps

    run = Path(run)
    if not run.is_dir():
        raise ExportError(
            f"--run {str(run)!r} is not a folder; give the --out folder of a "
            "`python -m experiments.lra.train` run."
        )
    try:
        pair, expected = _trusted_best(run)
        meta = ckpt.read_json(pair.json_path, required=("step", "config"))
    except ckpt.CheckpointError as e:
        raise ExportError(str(e)) from None
    if not isinstance(meta["config"], dict):
        raise ExportError(
            f"{pair.json_path} is corrupt: its 'config' is not a JSON object. Restore it from "
            "a backup, or re-train."
        )
    cfg = dict(meta["config"])
    cfg.update(method="sequential", sequence_parallel=None, remat=False)
    spec = steps.task_spec(cfg["task"])
    try:
        like = steps.build_model(cfg, spec, jax.random.PRNGKey(0))
        tokens = isinstance(_sequence_model(like[0]).encoder, eqx.nn.Embedding)
        if tokens:  # the run's vocabulary: the size of the stored embedding
            embedding = _sequence_model(like[0]).encoder
            vocab = _stored_rows(pair.eqx_path, like, embedding.weight)
            spec = dataclasses.replace(spec, vocab_size=vocab)
            like = steps.build_model(cfg, spec, jax.random.PRNGKey(0))
        (model, state), meta = ckpt.load_pair(
            pair.json_path, pair.eqx_path, like, finite=True, required=("config",)
        )
    except ckpt.CheckpointError as e:
        raise ExportError(str(e)) from None
    if expected is not None and meta.get("step") != expected.get("step"):
        raise ExportError(
            f"{pair.json_path} holds the weights of step {meta.get('step')}, but the run's "
            f"checkpoint expects those of step {expected.get('step')}. Restore the run's own "
            "best.eqx and best.json, or re-train."
        )
    model = jax.tree_util.tree_map(jnp.asarray, model)
    state = jax.tree_util.tree_map(jnp.asarray, state)
    in_size = spec.vocab_size if tokens else int(spec.in_channels)
    two_tower = isinstance(model, eqx_lru.LRURetrievalModel)
    return Run(model, state, cfg, meta, pair.eqx_path, in_size, tokens, two_tower)


def _trusted_best(run: Path):
    """The `best` pair of `run` that the trainer's `--resume` and test evaluation trust,
    chosen by the rule they share (`_checkpoint.trusted_best`) from the record of the newest
    complete `last` checkpoint, both bound to the run (`_checkpoint.check_bound` against
    `OUT/config.json`; the run id, where that file is missing, the `last` record's).
    Returns `(pair, expected)`: `pair` intact, `expected` the `best` entry of the `last`
    record (its `step`), or None.

    **Raises:** `ExportError` (one line naming the file) when no such pair is there, or it
    belongs to another run; `CheckpointError` for a damaged JSON file, or a `last` record
    whose fields are malformed (`_checkpoint.check_last`, as the trainer's `--resume`).
    """
    from experiments.lra import _checkpoint as ckpt

    config = None
    if (run / "config.json").is_file():
        config = ckpt.read_json(run / "config.json", required=("task",))
    last = ckpt.locate(run, "last")
    if last is not None:  # the trainer's check of the record (types and shapes of its fields)
        ckpt.check_last(last.meta, last.json_path)
    own = (config or {}).get("run_id", last.meta.get("run_id") if last else None)
    record = last.meta if last is not None else {}
    expected, want = ckpt.recorded_best(record, last.json_path if last is not None else None)
    try:
        if last is not None:
            ckpt.check_bound(last.meta, last.json_path, run_id=own, settings=config)
        return ckpt.trusted_best(run, record, run_id=own, settings=config), expected
    except ckpt.NotBound as e:
        raise ExportError(
            f"--run: {e.path} does not belong to the run in {e.path.parent} "
            f"({e.what('the run')}); it was copied from another run, or config.json was "
            "edited. Restore the run's own files, or re-train."
        ) from None
    except ckpt.NoTrustedBest as e:
        if e.newest is None and not want:
            raise ExportError(
                f"--run {str(run)!r} has no best.eqx (with best.json), nor a complete "
                "best.prev.*: the trainer writes it at its first validation (--eval-every "
                "steps). Train longer, or point --run at a finished run."
            ) from None
        why = e.why(explain=True)
    if not want:
        raise ExportError(f"--run {str(run)!r}: {why}. Restore it from a backup, or re-train.")
    raise ExportError(
        f"--run {str(run)!r}: the best weights that {last.json_path.name} records are not "
        f"there: {why}; it expects the weights of step {expected.get('step')} (val accuracy "
        f"{expected.get('val_accuracy')}). Restore the run's own best.eqx and best.json, or "
        "re-train."
    )


def _stored_rows(path: Path, like, leaf) -> int:
    """The leading size, on disk, of the leaf of `like` that is `leaf` (the leaves of an
    `eqx.tree_serialise_leaves` file are `.npy` records in `like`'s leaf order)."""
    leaves = jax.tree_util.tree_leaves(like)
    position = next(i for i, x in enumerate(leaves) if x is leaf)
    with open(path, "rb") as f:
        for i, x in enumerate(leaves):
            if not eqx.is_array_like(x):
                continue
            stored = np.load(f)
            if i == position:
                return int(stored.shape[0])
    raise ExportError(f"{path} is truncated: it lacks the embedding. Restore it or re-train.")


# --------------------------------------------------------------------------- exporting

_NO_PAIR_STEP = (
    "--step: a Retrieval run (two-tower model) has no streaming step (its head needs both "
    "documents whole); export the whole-pair program: drop --step (--format stablehlo)."
)

_PAIR_NOTE = (
    "x[:, 0] and x[:, 1] are the two documents of each pair, each padded to the common "
    "length; length[:, 0] and length[:, 1] their valid lengths. "
)

_STEP_NOTE = " The step's carry starts at zeros; feed the returned next_carry back."
_MODEL_KEYS = ("core", "form", "depth", "d_model", "d_state", "pooling", "norm", "bidirectional")


def _run_metadata(run: Run, carry: bool) -> dict[str, Any]:
    """What the manifest says of the run beyond the library's fields: the task, the
    model's settings, the source checkpoint, and the notes of the trainer's programs."""
    cfg = run.cfg
    return {
        "task": cfg.get("task"),
        "model": {k: cfg.get(k) for k in (*_MODEL_KEYS, "glu")},
        "notes": (
            "Inference mode; batch norm folded. "
            + (_PAIR_NOTE if run.pair else "")
            + "Inputs are not checked: token ids in [0, vocab_size) (others are clamped), "
            + ("1 <= length <= x.shape[2]." if run.pair else "1 <= length <= x.shape[1].")
            + (_STEP_NOTE if carry else "")
        ),
        "source": {
            "checkpoint": str(run.checkpoint),
            "step": run.meta.get("step"),
            "val_accuracy": run.meta.get("val_accuracy"),
            "sha256": run.meta.get("sha256"),
        },
    }


def export_run(
    run: str | Path, fmt: str, *, step: bool = False, dest: str | Path | None = None
) -> Path:
    """Export the run in folder `run` (see the module docstring) with `eqx_lru.export`;
    returns the artifact's path (the manifest is the same path plus `.json`)."""
    if fmt not in FORMATS:
        raise ExportError(f"--format must be one of {', '.join(FORMATS)}; got {fmt!r}.")
    loaded = load_run(run)
    if loaded.pair and step:
        raise ExportError(_NO_PAIR_STEP)
    reads = Tokens(loaded.in_size) if loaded.tokens else Features(loaded.in_size)
    name = type(loaded.model).__name__  # LRUModel, or LRURetrievalModel
    exported = eqx_lru.export.export(
        loaded.model,
        loaded.state,
        format=fmt,
        program="step" if step else "pair" if loaded.pair else "sequence",
        reads=reads,
        description=f"eqx_lru {name} from {loaded.checkpoint}",
    )
    exported.manifest.update(_run_metadata(loaded, carry=bool(exported.program.carry)))
    folder = Path(dest) if dest is not None else Path(run) / "export"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ExportError(
            f"--dest {str(folder)!r} is not a writable folder ({e.strerror or e})."
        ) from None
    suffix = exported.format.suffix
    return eqx_lru.export.write(exported, folder / (("step" if step else "model") + suffix))


def _parser():
    import argparse

    from experiments._flags import output_folder

    parser = argparse.ArgumentParser(
        prog="python -m experiments.export",
        description="Export the best weights of an LRA trainer run to StableHLO or ONNX.",
    )
    parser.add_argument("--run", required=True, help="the run folder (the trainer's --out)")
    parser.add_argument("--format", required=True, choices=FORMATS, help="stablehlo or onnx")
    parser.add_argument(
        "--step",
        action="store_true",
        help="export one streaming step (state in, state out) instead of the whole sequence",
    )
    parser.add_argument(
        "--dest", type=output_folder, default=None, help="output folder (default RUN/export)"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """The CLI; returns the exit status (user errors: one `error:` line, status 2)."""
    from experiments._flags import report_os_errors

    return report_os_errors(_main)(argv)


def _main(argv: Sequence[str] | None = None) -> int:
    import sys

    try:
        args = _parser().parse_args(argv)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 2
    try:
        artifact = export_run(args.run, args.format, step=args.step, dest=args.dest)
    except ExportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {artifact} and {artifact.name}.json", file=sys.stderr)
    return 0
