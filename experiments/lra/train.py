"""Train a deep LRU on one Long Range Arena task (paper §D, Table 9).

    python -m experiments.lra.train --task listops --data-root DATA --out runs/listops
    python -m experiments.lra.train --task listops --data-root DATA --out runs/listops --resume

Defaults come from `experiments/lra/configs.py` (Table 9); flags override them. The run
trains with the optimiser of §D.2 (`eqx_lru.lru_optimizer`), evaluates on val every
`--eval-every` steps (keeping the best weights in `OUT/best.eqx`), evaluates the
best-val weights on test at the end, and writes to `OUT/`:

| file | content |
|---|---|
| `config.json` | the resolved settings of the run |
| `metrics.jsonl` | one JSON record per line: train (every `--log-every` steps), val, test (see `_metrics.py`) |
| `curves.png` | loss and accuracy against step |
| `last.eqx` + `last.json` | the full training state every `--checkpoint-every` steps and on Ctrl-C |
| `best.eqx` + `best.json` | `(model, bn_state)` with the best val accuracy so far |
| `results.json` | test accuracy, best val accuracy and step, speed, wall time |

**Model.** Token tasks (ListOps, Text) embed tokens, pixel tasks (Image, Pathfinder, PathX)
encode the pixel channels linearly, Retrieval uses the two-tower `eqx_lru.LRURetrievalModel`;
Pathfinder and PathX are bidirectional (from the config) and PathX uses the "half" GLU
(§D.1). Mean pooling over valid positions, BatchNorm.

**Exact resume.** Everything that determines the future of the run is a function of
`(seed, step)` plus the checkpointed state:
- the checkpoint holds the model parameters, BatchNorm state, optimiser state (moments
  and step counts, which drive the schedule), the run's RNG key and the step;
- the batch of step `s` is batch `s mod E` of epoch `s div E` (`E` = train size //
  batch size) in `batch_indices(..., seed=seed, epoch=s div E, shuffle=True,
  drop_last=True)`, a pure function of `(seed, epoch, position)`;
- the dropout keys of step `s` are `split(fold_in(run_key, s), batch)`;
- the train records not yet written at a checkpoint (their per-step losses) are kept in
  `last.json`, and `metrics.jsonl` is cut back to the checkpoint's step on resume.
So `--resume` continues with the very same losses, bit for bit, as an uninterrupted run
(same hardware and device count), which `tests/test_lra_train.py` checks.

**Devices.** Data parallel over every visible device (`_parallel.py`): batch sharded on a
1-D mesh, state replicated, one jitted SPMD step. `--batch-size` must be a multiple of the
device count. Multi-host: see `--distributed`.

Ctrl-C (SIGINT) or SIGTERM: the current step finishes, `last.eqx` is written and the
process exits with status 130 (resume with `--resume`). A second Ctrl-C aborts at once
(the previous checkpoint is intact: checkpoints are written atomically).
"""

import argparse
import concurrent.futures
import dataclasses
import json
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import eqx_lru

from . import _checkpoint as ckpt
from . import _parallel as par
from ._metrics import MetricsLog, plot_curves, read_records
from .configs import get_config
from .data import TASKS, TaskData, batch_indices, load_task


__all__ = ["UsageError", "parse_args", "resolve_config", "build_model", "run", "main", "TRAINING_KEYS"]

AXIS_NAME = "batch"  # the jax.vmap axis batch norm reduces over


class UsageError(Exception):
    """A bad flag, missing data, or a clash with the run folder: the CLI prints the message
    (which says what to do) and exits with status 2, without a traceback."""

#: Settings that determine the trajectory of a run; `--resume` refuses to change them.
TRAINING_KEYS = (
    "task", "form", "depth", "d_model", "d_state", "steps", "batch_size", "lr", "lr_factor",
    "weight_decay", "dropout", "warmup_fraction", "bidirectional", "r_min", "r_max",
    "max_phase", "glu", "norm", "pooling", "seed", "max_examples", "method",
)
#: Settings that only change what is logged/saved when, or where data comes from.
OTHER_KEYS = (
    "data_root", "cache_dir", "eval_every", "checkpoint_every", "log_every", "eval_batch_size",
)


# --------------------------------------------------------------------------- configuration


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m experiments.lra.train",
        description="Train a deep LRU on a Long Range Arena task. Unset flags take the "
        "task's defaults (paper Table 9, experiments/lra/configs.py) or, with --resume, the "
        "values saved in OUT/config.json.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--task", choices=TASKS, help="the LRA task (required unless --resume)")
    p.add_argument("--data-root", help="folder containing the task's data (searched up to 4 levels deep)")
    p.add_argument("--out", required=True, help="output folder: metrics, curves, checkpoints")
    p.add_argument("--resume", action="store_true", help="continue from OUT/last.eqx, exactly")
    g = p.add_argument_group("model (defaults: the task config)")
    g.add_argument("--form", choices=("complex", "real"), help="LRU form [complex]")
    g.add_argument("--depth", type=int, help="number of LRU blocks")
    g.add_argument("--d-model", type=int, help="H, features per position")
    g.add_argument("--d-state", type=int, help="N, complex modes per layer")
    g.add_argument("--dropout", type=float)
    g.add_argument("--bidirectional", action=argparse.BooleanOptionalAction, default=None)
    g.add_argument("--norm", choices=("batch", "layer"))
    g.add_argument("--method", choices=("auto", "sequential", "associative"),
                   help="scan method of the LRU layers [auto: sequential on CPU, associative elsewhere]")
    g = p.add_argument_group("optimisation (defaults: the task config)")
    g.add_argument("--steps", type=int, help="optimiser steps (the schedule's length)")
    g.add_argument("--batch-size", type=int, help="global batch size (all devices together)")
    g.add_argument("--lr", type=float, help="peak (base) learning rate")
    g.add_argument("--lr-factor", type=float, help="recurrent parameters get lr x this")
    g.add_argument("--weight-decay", type=float)
    g.add_argument("--warmup-fraction", type=float)
    g.add_argument("--seed", type=int, help="model init, data order and dropout [0]")
    g = p.add_argument_group("run")
    g.add_argument("--eval-every", type=int, help="validate every N steps [one epoch]")
    g.add_argument("--checkpoint-every", type=int, help="write last.eqx every N steps [1000]")
    g.add_argument("--log-every", type=int, help="train record every N steps [50]")
    g.add_argument("--eval-batch-size", type=int, help="[--batch-size]")
    g.add_argument("--max-examples", type=int, help="use at most N examples of each split (quick runs)")
    g.add_argument("--cache-dir", help="cache the built arrays here (recommended; needed for PathX)")
    g.add_argument("--stop-at", type=int, help="checkpoint and exit after this step (e.g. for time-limited jobs)")
    g.add_argument("--distributed", choices=("auto", "on", "off"), default="auto",
                   help="multi-host: call jax.distributed.initialize() ('auto': when "
                   "JAX_COORDINATOR_ADDRESS or a SLURM/Open MPI launch with >1 task is detected)")
    g.add_argument("--no-progress", action="store_true",
                   help="no progress bar (it is shown on a terminal only anyway)")
    return p


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    return _parser().parse_args(argv)


def _task_defaults(task: str) -> dict[str, Any]:
    c = get_config(task)
    return {
        "task": task, "form": "complex", "depth": c.depth, "d_model": c.d_model,
        "d_state": c.d_state, "steps": c.steps, "batch_size": c.batch_size, "lr": c.base_lr,
        "lr_factor": c.lr_factor, "weight_decay": c.weight_decay, "dropout": c.dropout,
        "warmup_fraction": c.warmup_fraction, "bidirectional": c.bidirectional,
        "r_min": c.r_min, "r_max": c.r_max, "max_phase": c.max_phase,
        # §D.1: PathX uses the GLU "without one additional linear transform".
        "glu": getattr(c, "glu", "half" if task == "pathx" else "full"),
        "norm": c.norm, "pooling": c.pooling, "seed": 0, "max_examples": None,
        "method": "auto", "data_root": None, "cache_dir": None,
        "eval_every": c.eval_every, "checkpoint_every": 1000, "log_every": 50,
        "eval_batch_size": None,
    }


def resolve_config(args: argparse.Namespace) -> dict[str, Any]:
    """The run's settings: flags, else (with `--resume`) the saved config, else the task's.

    **Raises:** `UsageError` if `--resume` would change a setting in `TRAINING_KEYS`, or
    for invalid values.
    """
    out = Path(args.out)
    given = {k: getattr(args, k) for k in TRAINING_KEYS + OTHER_KEYS if getattr(args, k, None) is not None}
    saved = None
    if args.resume:
        path = out / "config.json"
        if not path.is_file():
            raise UsageError(
                f"--resume: {path} does not exist, so there is no run to continue in {out}. "
                "Drop --resume to start one."
            )
        saved = json.loads(path.read_text())
        changed = {
            k: (saved.get(k), v) for k, v in given.items()
            if k in TRAINING_KEYS and saved.get(k) != v
        }
        if changed:
            diff = "; ".join(f"{k}: {a!r} in the run, {b!r} now" for k, (a, b) in changed.items())
            raise UsageError(
                f"--resume continues the run in {out} exactly, so its settings cannot change "
                f"({diff}). Drop those flags, or start a new run with another --out."
            )
        cfg = {**saved, **given}
    else:
        if args.task is None:
            raise UsageError("--task is required (unless --resume picks it up from OUT/config.json).")
        cfg = {**_task_defaults(args.task), **given}
    if cfg.get("eval_batch_size") is None:
        cfg["eval_batch_size"] = cfg["batch_size"]
    if not cfg.get("data_root"):
        raise UsageError("--data-root is required: the folder holding the task's data.")
    for name in ("depth", "d_model", "d_state", "steps", "batch_size", "eval_every",
                 "checkpoint_every", "log_every", "eval_batch_size"):
        if not isinstance(cfg[name], int) or cfg[name] < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be a positive integer, got {cfg[name]!r}.")
    if cfg["max_examples"] is not None and cfg["max_examples"] < 1:
        raise UsageError(f"--max-examples must be >= 1, got {cfg['max_examples']}.")
    if cfg["lr"] <= 0 or cfg["lr_factor"] <= 0:
        raise UsageError(f"--lr and --lr-factor must be > 0, got {cfg['lr']} and {cfg['lr_factor']}.")
    if not 0 <= cfg["dropout"] < 1:
        raise UsageError(f"--dropout must be in [0, 1), got {cfg['dropout']}.")
    return cfg


# --------------------------------------------------------------------------- model and steps


def build_model(cfg: dict[str, Any], data: TaskData, key) -> tuple[eqx.Module, eqx.nn.State]:
    """The model of `cfg` for `data`, and its BatchNorm state."""
    ring = dict(r_min=cfg["r_min"], r_max=cfg["r_max"], max_phase=cfg["max_phase"])
    if cfg["method"] == "auto":
        form, ring_kwargs = cfg["form"], ring
    else:
        layer = {"complex": eqx_lru.ComplexLRU, "real": eqx_lru.RealLRU}[cfg["form"]]

        def form(d_model, d_state, *, key):
            return layer(d_model, d_state, **ring, method=cfg["method"], key=key)

        ring_kwargs = {}
    common = dict(
        d_model=cfg["d_model"], d_state=cfg["d_state"], depth=cfg["depth"], form=form,
        norm=cfg["norm"], bidirectional=cfg["bidirectional"], dropout=cfg["dropout"],
        glu=cfg["glu"], pooling=cfg["pooling"], axis_name=AXIS_NAME, key=key, **ring_kwargs,
    )
    if data.vocab is not None:
        in_size, encoder = len(data.vocab), "embedding"
    else:
        in_size, encoder = int(data.in_channels), "linear"
    cls = eqx_lru.LRURetrievalModel if data.task == "retrieval" else eqx_lru.LRUModel
    return eqx.nn.make_with_state(cls)(in_size, data.num_classes, encoder=encoder, **common)


def _host_batch(data: TaskData, split, indices: np.ndarray, *, padded: bool) -> dict[str, np.ndarray]:
    """Model-ready host arrays: `x`, `label`, `length` (token tasks), `weight` (eval)."""
    raw = data.batch(split, indices)
    if data.task == "retrieval":
        out = {
            "x": np.stack([raw["inputs"], raw["inputs2"]], axis=1),
            "length": np.stack([raw["lengths"], raw["lengths2"]], axis=1),
        }
    else:
        out = {"x": raw["inputs"]}
        if data.vocab is not None:  # pixel tasks have no padding
            out["length"] = raw["lengths"]
    out["label"] = raw["labels"]
    if padded:
        out["weight"] = np.ones(len(indices), np.float32)
    return out


#: Jitted steps per model/optimiser configuration, so that several runs in one process
#: (the demo, the tests, a sweep) compile each program once.
_STEPS_CACHE: dict[tuple, tuple[Callable, Callable]] = {}
#: The settings the traced programs depend on (not the seed, nor the data size).
_PROGRAM_KEYS = tuple(k for k in TRAINING_KEYS if k not in ("seed", "max_examples"))


def _cached_steps(cfg, data: TaskData, static, optim, schedule, mesh):
    in_size = len(data.vocab) if data.vocab is not None else data.in_channels
    key = (
        tuple(cfg[k] for k in _PROGRAM_KEYS), data.task, in_size, data.num_classes,
        tuple(d.id for d in mesh.devices.flat),
    )
    if key not in _STEPS_CACHE:
        if len(_STEPS_CACHE) >= 8:
            _STEPS_CACHE.pop(next(iter(_STEPS_CACHE)))
        _STEPS_CACHE[key] = _make_steps(static, optim, schedule, mesh)
    return _STEPS_CACHE[key]


def _make_steps(static, optim, schedule, mesh):
    """The jitted train and eval steps, closed over the model's static part."""
    replicated = NamedSharding(mesh, P())
    sharded = NamedSharding(mesh, P(par.AXIS))

    def forward(params, bn_state, batch, keys, inference):
        model = eqx.combine(params, static)

        def one(x, length, key):
            return model(x, bn_state, length=length, key=key, inference=inference)

        length = batch.get("length")
        in_axes = (0, None if length is None else 0, None if keys is None else 0)
        return jax.vmap(one, axis_name=AXIS_NAME, in_axes=in_axes, out_axes=(0, None))(
            batch["x"], length, keys
        )

    def losses(logits, labels):
        logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
        nll = -jnp.take_along_axis(logp, labels[:, None], axis=-1)[:, 0]
        correct = (jnp.argmax(logits, axis=-1) == labels).astype(jnp.float32)
        return nll, correct

    def train_step(params, bn_state, opt_state, batch, run_key, step):
        keys = jax.random.split(jax.random.fold_in(run_key, step), batch["label"].shape[0])

        def loss_fn(params):
            logits, new_state = forward(params, bn_state, batch, keys, False)
            nll, correct = losses(logits, batch["label"])
            return jnp.mean(nll), (new_state, jnp.mean(correct))

        (loss, (new_state, acc)), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
        # optax mixes Python floats with int32 step counts, which JAX's opt-in strict dtype
        # promotion rejects; trace it with standard promotion so either setting works.
        with jax.numpy_dtype_promotion("standard"):
            updates, opt_state = optim.update(grads, opt_state, params)
            lr = jnp.asarray(schedule(step), jnp.float32)
        params = eqx.apply_updates(params, updates)
        return params, new_state, opt_state, jnp.stack([loss, acc, lr])

    def eval_step(params, bn_state, batch):
        logits, _ = forward(params, bn_state, batch, None, True)
        nll, correct = losses(logits, batch["label"])
        w = batch["weight"]
        return jnp.stack([jnp.sum(w * nll), jnp.sum(w * correct), jnp.sum(w)])

    train = jax.jit(
        train_step,
        in_shardings=(replicated, replicated, replicated, sharded, replicated, replicated),
        out_shardings=replicated,
    )
    evaluate = jax.jit(eval_step, in_shardings=(replicated, replicated, sharded), out_shardings=replicated)
    return train, evaluate


# --------------------------------------------------------------------------- the run


@dataclasses.dataclass(frozen=True)
class _Carry:
    """The whole state of a run between two steps; replaced as one object.

    `pending` holds `(loss, accuracy, lr)` of the steps since the last train record; `best`
    the best validation result so far (`{"val_accuracy", "val_loss", "step"}` or None).
    """

    step: int
    params: Any
    bn_state: Any
    opt_state: Any
    run_key: Any
    pending: tuple = ()
    best: dict | None = None

    def tree(self):
        """What `last.eqx` holds."""
        return (self.params, self.bn_state, self.opt_state, self.run_key, np.asarray(self.step, np.int64))


class _Abort(BaseException):
    """A second Ctrl-C: leave at once (the checkpoint on disk stays valid)."""


class _Stop:
    """SIGINT/SIGTERM -> a flag the loop checks between steps."""

    def __init__(self):
        self.reason: str | None = None
        self._previous: dict[int, Any] = {}

    def _handle(self, signum, frame):
        if self.reason is not None:
            raise _Abort(f"second {signal.Signals(signum).name}")
        self.reason = signal.Signals(signum).name
        print(f"\n{self.reason}: finishing this step, then saving a checkpoint (again to "
              "abort; the last checkpoint on disk stays valid).", file=sys.stderr, flush=True)

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc):
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        return False


class _Speed:
    """Train steps per second, excluding compilation, evaluation and checkpointing.

    `rate` is over the whole process; `interval(step)` over the steps since its last call.
    """

    def __init__(self):
        self.seconds, self.steps = 0.0, 0
        self._interval = [0.0, 0]
        self._mark: tuple[float, int] | None = None

    def resume(self, step: int) -> None:
        self._mark = (time.perf_counter(), step)

    def pause(self, step: int) -> None:
        if self._mark is not None:
            seconds, steps = time.perf_counter() - self._mark[0], step - self._mark[1]
            self.seconds += seconds
            self.steps += steps
            self._interval[0] += seconds
            self._interval[1] += steps
            self._mark = None

    def interval(self, step: int) -> float | None:
        running = self.running
        self.pause(step)
        seconds, steps = self._interval
        self._interval = [0.0, 0]
        if running:
            self.resume(step)
        return steps / seconds if seconds > 0 and steps > 0 else None

    @property
    def running(self) -> bool:
        return self._mark is not None

    @property
    def rate(self) -> float | None:
        return self.steps / self.seconds if self.seconds > 0 and self.steps > 0 else None


def _log(msg: str, primary: bool) -> None:
    if primary:
        print(msg, file=sys.stderr, flush=True)


def run(
    args: argparse.Namespace | Sequence[str] | None = None,
    *,
    hook: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Train (or continue) one run; the body of the CLI.

    **Arguments:**

    - `args`: parsed arguments or a CLI argument list.
    - `hook`: called as `hook(step)` after each step and its logging, evaluation and
        checkpointing (tests raise `KeyboardInterrupt` or send SIGINT from it).

    **Returns:** a dict: `status` (`"finished"`, `"stopped"` by `--stop-at`, or
    `"interrupted"`), `step`, `steps_per_sec`, `best_val_accuracy`, `best_step`, and when
    finished `test_accuracy`, `test_loss`, `seconds`. Also written to `OUT/results.json`.

    **Raises:** `UsageError` for bad settings, a batch size that does not split over the
    devices, a missing data root or checkpoint, or an existing run without `--resume`.
    """
    if not isinstance(args, argparse.Namespace):
        args = parse_args(args)
    par.initialize_distributed(args.distributed)
    primary = jax.process_index() == 0
    cfg = resolve_config(args)
    out = Path(args.out)
    mesh = par.make_mesh()
    try:
        par.check_batch_size(cfg["batch_size"], mesh)
        par.check_batch_size(cfg["eval_batch_size"], mesh, what="--eval-batch-size")
    except ValueError as e:
        raise UsageError(str(e)) from None
    if args.resume and not ckpt.exists(out, "last"):
        raise UsageError(f"--resume: no checkpoint {out / 'last.eqx'} (with last.json) to continue from.")
    if not args.resume and ckpt.exists(out, "last"):
        raise UsageError(
            f"{out} already holds a run (last.eqx). Pass --resume to continue it, or choose "
            "another --out."
        )
    data_root = Path(cfg["data_root"]).expanduser()
    if not data_root.is_dir():
        raise UsageError(
            f"--data-root {str(data_root)!r} is not a folder. Point it at the folder holding "
            f"the {cfg['task']} data (see the README, 'Experiments: Long Range Arena'), or "
            "generate ListOps/Pathfinder data with `python -m experiments.lra.generate`."
        )
    began = time.perf_counter()
    try:
        data = load_task(cfg["task"], data_root, cache_dir=cfg["cache_dir"], max_examples=cfg["max_examples"])
    except FileNotFoundError as e:
        raise UsageError(str(e)) from e
    n_train, batch_size, total = len(data.train), cfg["batch_size"], cfg["steps"]
    steps_per_epoch = n_train // batch_size
    if steps_per_epoch == 0:
        raise UsageError(
            f"The {cfg['task']} train split has {n_train} examples, fewer than --batch-size "
            f"{batch_size}; lower --batch-size or raise --max-examples."
        )
    if primary:
        out.mkdir(parents=True, exist_ok=True)
        ckpt.write_atomic(out / "config.json", json.dumps(cfg, indent=1, sort_keys=True).encode())

    # The model, optimiser and initial state, always built the same way: a resumed run
    # uses them as the template its checkpoint is read into.
    init_key, run_key = jax.random.split(jax.random.PRNGKey(cfg["seed"]))
    model, bn_state = build_model(cfg, data, init_key)
    params, static = eqx.partition(model, eqx.is_inexact_array)
    optim = eqx_lru.lru_optimizer(
        learning_rate=cfg["lr"], total_steps=total, lr_factor=cfg["lr_factor"],
        weight_decay=cfg["weight_decay"], warmup_fraction=cfg["warmup_fraction"],
    )
    carry = _Carry(0, params, bn_state, optim.init(params), run_key)
    log = MetricsLog(out / "metrics.jsonl", enabled=primary)
    if args.resume:
        (p, s, o, k, step), meta = ckpt.load(out, "last", carry.tree(), step_of=lambda t: t[-1])
        carry = _Carry(int(step), p, s, o, k, tuple(map(tuple, meta["pending"])), meta["best"])
        _log(f"Resuming {out} at step {carry.step}/{total}.", primary)
    log.truncate(carry.step)
    carry = dataclasses.replace(
        carry, **{f: par.replicate(getattr(carry, f), mesh) for f in ("params", "bn_state", "opt_state", "run_key")}
    )
    schedule = eqx_lru.lru_schedule(cfg["lr"], total, warmup_fraction=cfg["warmup_fraction"])
    train_step, eval_step = _cached_steps(cfg, data, static, optim, schedule, mesh)
    rows, eval_rows = par.process_rows(batch_size), par.process_rows(cfg["eval_batch_size"])
    n_params = sum(x.size for x in jax.tree_util.tree_leaves(carry.params))
    _log(
        f"{cfg['task']}: {n_train}/{len(data.val)}/{len(data.test)} train/val/test examples, "
        f"length {data.seq_len}; {cfg['form']} LRU, depth {cfg['depth']}, H={cfg['d_model']}, "
        f"N={cfg['d_state']} ({n_params:,} parameters); {mesh.size} {mesh.devices.flat[0].platform} "
        f"device(s), batch {batch_size}; set up in {time.perf_counter() - began:.1f}s.",
        primary,
    )

    epoch_cache: dict[int, list[np.ndarray]] = {}

    def load_train(step: int) -> dict[str, jax.Array]:
        """The batch of `step`: a pure function of (seed, epoch, position)."""
        epoch, position = divmod(step, steps_per_epoch)
        if epoch not in epoch_cache:
            epoch_cache.clear()
            epoch_cache[epoch] = batch_indices(
                n_train, batch_size, seed=cfg["seed"], epoch=epoch, shuffle=True, drop_last=True
            )
        idx = epoch_cache[epoch][position][rows]
        return par.shard_batch(_host_batch(data, data.train, idx, padded=False), mesh, batch_size)

    def evaluate(params, bn_state, split) -> dict[str, Any]:
        """Loss and accuracy over a whole split (the last batch padded with weight 0)."""
        t0, bs, sums = time.perf_counter(), cfg["eval_batch_size"], None
        for idx in batch_indices(len(split), bs, seed=0, epoch=0, shuffle=False, drop_last=False):
            weight = (np.arange(bs) < len(idx)).astype(np.float32)
            idx = np.concatenate([idx, np.zeros(bs - len(idx), idx.dtype)])
            host = _host_batch(data, split, idx[eval_rows], padded=True)
            host["weight"] = weight[eval_rows]
            part = eval_step(params, bn_state, par.shard_batch(host, mesh, bs))
            sums = part if sums is None else sums + part
        nll, correct, count = (float(v) for v in ckpt.to_host(sums))
        return {"loss": nll / count, "accuracy": correct / count, "examples": int(count),
                "seconds": round(time.perf_counter() - t0, 3)}

    def save_last(c: _Carry) -> None:
        if primary:
            meta = {"step": c.step, "epoch": c.step // steps_per_epoch, "position": c.step % steps_per_epoch,
                    "best": c.best, "pending": [list(map(float, x)) for x in ckpt.to_host(c.pending)],
                    "config": cfg}
            ckpt.save(out, "last", c.tree(), meta)

    def say(msg: str) -> None:
        if bar is not None:
            bar.write(msg, file=sys.stderr)  # above the bar, not through it
        else:
            _log(msg, primary)

    def after_step(c: _Carry, bar, postfix: dict) -> _Carry:
        """Log, evaluate and checkpoint as due after step `c.step`; returns the new carry."""
        done = c.step
        if done % cfg["log_every"] == 0 or done == total:
            values = np.asarray(ckpt.to_host(list(c.pending)), np.float64)
            now_rate = speed.interval(done)
            log.write({"split": "train", "step": done, "epoch": (done - 1) // steps_per_epoch,
                       "loss": float(values[:, 0].mean()), "accuracy": float(values[:, 1].mean()),
                       "lr": float(values[-1, 2]), "steps_per_sec": now_rate})
            postfix.update(loss=f"{values[:, 0].mean():.3f}", acc=f"{values[:, 1].mean():.3f}")
            c = dataclasses.replace(c, pending=())
        if done % cfg["eval_every"] == 0 or done == total:
            jax.block_until_ready(c.params)
            speed.pause(done)
            val = evaluate(c.params, c.bn_state, data.val)
            log.write({"split": "val", "step": done, **val})
            if c.best is None or val["accuracy"] > c.best["val_accuracy"]:
                c = dataclasses.replace(c, best={"val_accuracy": val["accuracy"], "val_loss": val["loss"], "step": done})
                if primary:
                    ckpt.save(out, "best", (eqx.combine(c.params, static), c.bn_state), {**c.best, "config": cfg})
            postfix.update(val=f"{val['accuracy']:.3f}")
            rate = speed.rate
            say(f"step {done}/{total}: train loss {postfix.get('loss', '-')} acc {postfix.get('acc', '-')}; "
                f"val loss {val['loss']:.4f} acc {val['accuracy']:.4f} (best {c.best['val_accuracy']:.4f} "
                f"at step {c.best['step']}); {'-' if rate is None else f'{rate:.2f}'} steps/s")
        if done % cfg["checkpoint_every"] == 0 or done == stop_at:
            speed.pause(done)
            save_last(c)
        if bar is not None:
            bar.update(done - bar.n)
            bar.set_postfix(postfix, refresh=False)
        if not speed.running:
            speed.resume(done)
        return c

    speed = _Speed()
    stop_at = total if args.stop_at is None else min(max(args.stop_at, carry.step), total)
    status = "finished" if stop_at == total else "stopped"
    pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="lra-data")
    bar = None
    if primary and not args.no_progress and carry.step < stop_at:
        from tqdm import tqdm

        # disable=None: a bar on a terminal only, not in log files.
        bar = tqdm(total=total, initial=carry.step, unit="step", dynamic_ncols=True,
                   desc=f"{cfg['task']} {cfg['form']}", file=sys.stderr, disable=None)

    complete = carry  # the last carry whose step, logging, eval and checkpoint all finished
    try:
        with _Stop() as stopper:
            try:
                future = pool.submit(load_train, carry.step) if carry.step < stop_at else None
                postfix: dict[str, str] = {}
                while carry.step < stop_at:
                    if stopper.reason is not None:
                        raise KeyboardInterrupt
                    step = carry.step
                    batch = future.result()
                    future = pool.submit(load_train, step + 1) if step + 1 < stop_at else None
                    p, s, o, metrics = train_step(
                        carry.params, carry.bn_state, carry.opt_state, batch, carry.run_key,
                        jnp.asarray(step, jnp.int32),
                    )
                    carry = dataclasses.replace(carry, step=step + 1, params=p, bn_state=s, opt_state=o,
                                                pending=carry.pending + (metrics,))
                    if not speed.running:  # the first step of this process compiles: not timed
                        jax.block_until_ready(metrics)
                        speed.resume(carry.step)
                    carry = complete = after_step(carry, bar, postfix)
                    if hook is not None:
                        hook(carry.step)
            except KeyboardInterrupt:
                status = "interrupted"
                save_last(complete)
                carry = complete
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        log.close()
        if bar is not None:
            bar.close()
    speed.pause(carry.step)
    best = carry.best or {}
    results = {
        "status": status, "task": cfg["task"], "form": cfg["form"], "step": carry.step, "steps": total,
        "best_val_accuracy": best.get("val_accuracy"), "best_step": best.get("step"),
        "steps_per_sec": speed.rate, "devices": mesh.size, "platform": mesh.devices.flat[0].platform,
        "out": str(out),
    }
    if status != "finished":
        _log(f"Stopped at step {carry.step}/{total} ({status}); checkpoint {out / 'last.eqx'} saved. "
             "Continue with the same command plus --resume.", primary)
    else:
        results.update(_test(out, data, carry, static, mesh, evaluate, log))
        results["seconds"] = round(time.perf_counter() - began, 1)
        if primary:
            ckpt.write_atomic(out / "results.json", json.dumps(results, indent=1).encode())
        rate = speed.rate
        _log(f"{cfg['task']} ({cfg['form']}): test accuracy {100 * results['test_accuracy']:.2f}% "
             f"(best val {100 * best['val_accuracy']:.2f}% at step {best['step']}), "
             f"{'n/a' if rate is None else f'{rate:.2f}'} steps/s; outputs in {out}/", primary)
    log.close()
    if primary:
        plot_curves(read_records(out / "metrics.jsonl"), out / "curves.png",
                    title=f"{cfg['task']} · {cfg['form']} LRU · depth {cfg['depth']}, "
                          f"H={cfg['d_model']}, N={cfg['d_state']} · batch {batch_size}")
    return results


def _test(out, data, carry, static, mesh, evaluate, log) -> dict[str, Any]:
    """Evaluate the best-val weights, read back from `OUT/best.eqx`, on test."""
    template = (eqx.combine(carry.params, static), carry.bn_state)
    (model, bn_state), meta = ckpt.load(out, "best", template)
    params = par.replicate(eqx.filter(model, eqx.is_inexact_array), mesh)
    test = evaluate(params, par.replicate(bn_state, mesh), data.test)
    log.write({"split": "test", "step": carry.step, "checkpoint": "best", "checkpoint_step": meta["step"], **test})
    return {"test_accuracy": test["accuracy"], "test_loss": test["loss"], "test_examples": test["examples"]}


def main(argv: Sequence[str] | None = None) -> int:
    try:
        results = run(argv)
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except _Abort as e:
        print(f"Aborted ({e}).", file=sys.stderr)
        return 130
    return 130 if results["status"] == "interrupted" else 0


if __name__ == "__main__":
    raise SystemExit(main())
