"""A trainer run read back for export: the best weights the trainer trusts and the run's
settings (a `RunConfig`). How the checkpoint is chosen:
[exporting a model](../../docs/guides/export.md#trainer-runs-and-other-formats)."""

import dataclasses
from pathlib import Path
from typing import Any, cast

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

import eqx_lru
from eqx_lru.export import ExportError

__all__ = ["Run", "load_run"]


@dataclasses.dataclass
class Run:
    """A trained model read back from a run folder."""

    model: eqx.Module
    state: eqx.nn.State
    config: Any  # the run's `experiments.lra.config.RunConfig`, scanning sequentially
    meta: dict[str, Any]  # best.json
    checkpoint: Path
    in_size: int  # vocabulary size (token tasks) or input features
    tokens: bool
    pair: bool = False  # a Retrieval run: the two-tower `eqx_lru.LRURetrievalModel`


def _sequence_model(model: eqx.Module) -> eqx_lru.LRUModel:
    """The `LRUModel` that reads one sequence: `model` itself, or the encoder a two-tower
    `LRURetrievalModel` shares between the documents of a pair."""
    if isinstance(model, eqx_lru.LRURetrievalModel):
        return model.encoder
    return cast(eqx_lru.LRUModel, model)  # what `steps.build_model` builds for one sequence


def _config(settings: dict[str, Any], path: Path):
    """The `RunConfig` that `best.json` (read from `path`) records (its `settings`), made to
    scan sequentially (`lax.scan`: the one method that takes a symbolic length; the same
    function) on one device, without remat."""
    from experiments.lra import cores
    from experiments.lra.config import ConfigError, RunConfig

    try:
        config = RunConfig.from_json(settings, where=str(path))
        scans = cores.get_core(config.core).scan
        return config.replace(
            method="sequential" if scans else None, sequence_parallel=None, remat=False
        )
    except (ConfigError, ValueError) as e:
        raise ExportError(str(e)) from None


#: The files of a run that `load_run` reads; a trainer replaces each atomically.
_READ = (
    "last.json",
    "last.prev.json",
    "best.json",
    "best.eqx",
    "best.prev.json",
    "best.prev.eqx",
    "config.json",
)


def load_run(run: str | Path) -> Run:
    """`_load_run` read consistently (`runs.snapshot.read_consistently`): a trainer may
    replace `best.*` and then `last.*` while they are read."""
    from experiments.runs.snapshot import read_consistently

    def busy(attempts: int) -> ExportError:
        return ExportError(
            f"--run {str(run)!r}: its checkpoints changed during each of {attempts} reads (a "
            "trainer is writing them faster than they can be read); export again, or once "
            "the run has stopped."
        )

    return read_consistently(
        run, _READ, lambda: _load_run(run), errors=(ExportError, OSError), busy=busy
    )


def _load_run(run: str | Path) -> Run:
    """The best weights of a trainer run, `(model, bn_state)` read from the checkpoint the
    trainer trusts (`_trusted_best`: `run/best.eqx`, or `run/best.prev.eqx` after a crash
    mid-save; checksum verified) with the trainer's own code (`steps.build_model`,
    `runs.checkpoint.load_pair`), its scan method replaced by `"sequential"`.

    The vocabulary of a token task is the one of the run's data, which the model's
    embedding stores: its size is read from the checkpoint, so the data need not be at
    hand.
    """
    from experiments.lra import steps
    from experiments.runs import checkpoint as ckpt

    run = Path(run)
    if not run.is_dir():
        raise ExportError(
            f"--run {str(run)!r} is not a folder; give the --out folder of a "
            "`python -m experiments.lra.train` run."
        )
    try:
        pair, expected = _trusted_best(run)
        meta = ckpt.read_json(pair.json_path, required=("step", "config"))
        settings = ckpt.Record.from_json(meta, where=pair.json_path).config
    except ckpt.CheckpointError as e:
        raise ExportError(str(e)) from None
    assert settings is not None  # required above
    config = _config(settings, pair.json_path)
    spec = steps.task_spec(config.task)
    try:
        like = steps.build_model(config, spec, jax.random.PRNGKey(0))
        tokens = isinstance(_sequence_model(like[0]).encoder, eqx.nn.Embedding)
        if tokens:  # the run's vocabulary: the size of the stored embedding
            embedding = _sequence_model(like[0]).encoder
            vocab = _stored_rows(pair.eqx_path, like, embedding.weight)
            spec = dataclasses.replace(spec, vocab_size=vocab)
            like = steps.build_model(config, spec, jax.random.PRNGKey(0))
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
    if tokens:
        assert spec.vocab_size is not None  # set above from the stored embedding
        in_size = spec.vocab_size
    else:
        assert spec.in_channels is not None  # a pixel task (`tasks.Task`'s check)
        in_size = int(spec.in_channels)
    two_tower = isinstance(model, eqx_lru.LRURetrievalModel)
    return Run(model, state, config, meta, pair.eqx_path, in_size, tokens, two_tower)


def _trusted_best(run: Path):
    """The `best` pair of `run` that the trainer's `--resume` and test evaluation trust,
    chosen by the rule they share (`runs.checkpoint.trusted_best`) from the record of the
    newest complete `last` checkpoint, both bound to the run (`runs.checkpoint.check_bound`
    with the LRA trainer's `TRAINING_KEYS`, against `OUT/config.json`; the run id, where
    that file is missing, the `last` record's).
    Returns `(pair, expected)`: `pair` intact, `expected` the `best` entry of the `last`
    record (its `step`), or None.

    **Raises:** `ExportError` (one line naming the file) when no such pair is there, or it
    belongs to another run; `CheckpointError` for a damaged JSON file, or a `last` record
    whose fields are malformed (`runs.checkpoint.check_last`, as the trainer's `--resume`).
    """
    from experiments.lra.config import TRAINING_KEYS
    from experiments.runs import checkpoint as ckpt

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
            ckpt.check_bound(
                last.meta, last.json_path, run_id=own, settings=config, keys=TRAINING_KEYS
            )
        pair = ckpt.trusted_best(run, record, run_id=own, settings=config, keys=TRAINING_KEYS)
        return pair, expected
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
    assert last is not None and expected is not None  # a best is wanted: `last` records it
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
