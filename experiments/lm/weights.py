"""The trained model of a run folder (`load_model`): its settings from `config.json`, its
weights from the newest complete `last` checkpoint, verified as `--resume` verifies them
(checksum, finite values, this run's). Sampling and export read it."""

import dataclasses
import os
from pathlib import Path

import equinox as eqx
import jax
import numpy as np

import eqx_lru

from ..runs import checkpoint as ckpt
from ..runs.errors import UsageError
from . import config as _config
from .config import LMConfig
from .model import build_model, make_optimizer, stream_carry

__all__ = ["Loaded", "load_model"]


@dataclasses.dataclass(frozen=True)
class Loaded:
    """A run's trained model: `model`, its `state`, the run's settings `cfg`, the `step`
    of the weights, and the `checkpoint` file they come from with its `sha256`."""

    model: eqx_lru.LRUModel
    state: eqx.nn.State
    cfg: LMConfig
    step: int
    checkpoint: Path
    sha256: str | None


def load_model(run: str | os.PathLike) -> Loaded:
    """The trained model of the run in folder `run`, read consistently while its trainer
    may replace the checkpoint (`runs.snapshot.read_consistently`).

    **Raises:** `UsageError` naming the file if the folder holds no run, no complete
    checkpoint, or a damaged or foreign one.
    """
    from ..runs.snapshot import read_consistently

    def busy(attempts: int) -> UsageError:
        return UsageError(
            f"--run {str(run)!r}: its checkpoint changed during each of {attempts} reads; run "
            "the command again, or once the run has stopped."
        )

    names = ("config.json", "last.json", "last.eqx", "last.prev.json", "last.prev.eqx")
    return read_consistently(
        run, names, lambda: _load_model(Path(run)), errors=(UsageError, OSError), busy=busy
    )


def _load_model(run: Path) -> Loaded:
    path = run / "config.json"
    if not path.is_file():
        raise UsageError(
            f"--run {str(run)!r} holds no language-model run ({path.name} is missing); give "
            "the --out folder of `python -m experiments.lm train`."
        )
    try:
        cfg = _config.resumed_run(ckpt.read_json(path), {}, out=str(run))
        pair = ckpt.locate(run, "last")
        if pair is not None:
            ckpt.check_last(pair.meta, pair.json_path, fields=("step", "config", "run_id"))
    except (_config.ConfigError, ckpt.CheckpointError) as e:
        raise UsageError(str(e)) from None
    if pair is None:
        raise UsageError(
            f"--run {str(run)!r} holds no complete checkpoint yet (last.eqx with last.json): "
            "let the run reach its first checkpoint (--checkpoint-every), or --resume it."
        )
    model, state = build_model(cfg, jax.random.PRNGKey(0))
    params, static = eqx.partition(model, eqx.is_inexact_array)
    optim, _ = make_optimizer(cfg)
    like = (params, optim.init(params), stream_carry(model, cfg.streams), jax.random.PRNGKey(0))
    try:
        ckpt.check_bound(
            pair.meta,
            pair.json_path,
            run_id=cfg.run_id,
            settings=cfg.to_json(),
            keys=_config.TRAINING_KEYS,
        )
        (params, *_, step), _ = ckpt.load_pair(
            pair.json_path,
            pair.eqx_path,
            (*like, np.asarray(0, np.int64)),
            step_of=lambda t: t[-1],
            finite=True,
        )
    except ckpt.CheckpointError as e:
        raise UsageError(str(e)) from None
    params = jax.tree_util.tree_map(jax.numpy.asarray, params)
    model = eqx.combine(params, static)
    return Loaded(model, state, cfg, int(step), pair.eqx_path, pair.meta.get("sha256"))
