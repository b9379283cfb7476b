"""The command line of `python -m experiments.lra.train`: its flags, their checks, and
which run settings they cover (`TRAINING_KEYS`, `OTHER_KEYS`).

`parse_args(argv)` parses a CLI argument list; `experiments.lra.train` turns the result into
a run's settings (`resolve_config`) and runs it.
"""

import argparse
from collections.abc import Sequence

from .._flags import number
from . import tasks
from .steps import CORES, EXPERIMENT_KEYS

__all__ = ["TRAINING_KEYS", "OTHER_KEYS", "parse_args"]


#: Settings that determine the trajectory of a run; `--resume` refuses to change them.
TRAINING_KEYS = (*EXPERIMENT_KEYS, "seed", "max_examples", "method")
#: Settings that change what is logged/saved when, where data comes from, or how the
#: program runs (not what it computes, up to rounding: `remat`, `deterministic`).
OTHER_KEYS = (
    "data_root",
    "cache_dir",
    "eval_every",
    "checkpoint_every",
    "log_every",
    "eval_batch_size",
    "remat",
    "deterministic",
    "sequence_parallel",
)


# --------------------------------------------------------------------------- flags


_number = number  # the checked argparse type every experiments command uses


_POSITIVE_INT = _number(int, low=1)
_POSITIVE = _number(float, low=0, open_low=True)
_FRACTION = _number(float, low=0, high=1)
#: Every numeric setting, its check (also applied to saved and default settings).
_CHECKS = {
    "depth": _POSITIVE_INT,
    "d_model": _POSITIVE_INT,
    "d_state": _POSITIVE_INT,
    "steps": _POSITIVE_INT,
    "batch_size": _POSITIVE_INT,
    "eval_every": _POSITIVE_INT,
    "checkpoint_every": _POSITIVE_INT,
    "log_every": _POSITIVE_INT,
    "eval_batch_size": _POSITIVE_INT,
    "max_examples": _POSITIVE_INT,
    "sequence_parallel": _POSITIVE_INT,
    "seed": _number(int, low=0),
    "lr": _POSITIVE,
    "lr_factor": _POSITIVE,
    "weight_decay": _number(float, low=0),
    "warmup_fraction": _FRACTION,
    "dropout": _FRACTION,
}


def _parser() -> argparse.ArgumentParser:
    remat_tasks = [t.name for t in tasks.REGISTRY.values() if t.remat]  # the registry's
    p = argparse.ArgumentParser(
        prog="python -m experiments.lra.train",
        description="Train a deep LRU on a Long Range Arena task. Unset flags take the "
        "task's defaults (paper Table 9, experiments/lra/tasks.py) or, with --resume, the "
        "values saved in OUT/config.json.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--task", choices=tasks.names(), help="the LRA task (required unless --resume)")
    p.add_argument(
        "--data-root", help="folder containing the task's data (searched up to 4 levels deep)"
    )
    p.add_argument("--out", required=True, help="output folder: metrics, curves, checkpoints")
    p.add_argument("--resume", action="store_true", help="continue from OUT/last.eqx, exactly")
    p.add_argument(
        "--allow-data-change",
        action="store_true",
        help="with --resume: continue although the data differ from the checkpoint's",
    )
    g = p.add_argument_group("model (defaults: the task config)")
    g.add_argument(
        "--core", choices=CORES, help="recurrent core: the LRU or the S4D/S5 baselines [lru]"
    )
    g.add_argument("--form", choices=("complex", "real"), help="LRU form [complex]")
    g.add_argument("--depth", type=_CHECKS["depth"], help="number of blocks")
    g.add_argument("--d-model", type=_CHECKS["d_model"], help="H, features per position")
    g.add_argument("--d-state", type=_CHECKS["d_state"], help="N, complex modes per layer")
    g.add_argument("--dropout", type=_CHECKS["dropout"])
    g.add_argument("--bidirectional", action=argparse.BooleanOptionalAction, default=None)
    g.add_argument("--norm", choices=("batch", "layer"))
    g.add_argument(
        "--method",
        choices=("auto", "sequential", "associative"),
        help="scan method of the recurrent layers [auto: chosen per backend]",
    )
    g.add_argument(
        "--remat",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="recompute each block in the backward pass: a quarter of the memory "
        f"(experiments/lra/MEMORY.md) [on for {' and '.join(remat_tasks)}]",
    )
    g = p.add_argument_group("optimisation (defaults: the task config)")
    g.add_argument("--steps", type=_CHECKS["steps"], help="optimiser steps (the schedule's length)")
    g.add_argument(
        "--batch-size", type=_CHECKS["batch_size"], help="global batch size (all devices together)"
    )
    g.add_argument("--lr", type=_CHECKS["lr"], help="peak (base) learning rate")
    g.add_argument(
        "--lr-factor", type=_CHECKS["lr_factor"], help="recurrent parameters get lr x this"
    )
    g.add_argument("--weight-decay", type=_CHECKS["weight_decay"])
    g.add_argument("--warmup-fraction", type=_CHECKS["warmup_fraction"])
    g.add_argument("--seed", type=_CHECKS["seed"], help="model init, data order and dropout [0]")
    g = p.add_argument_group("run")
    g.add_argument(
        "--eval-every", type=_CHECKS["eval_every"], help="validate every N steps [one epoch]"
    )
    g.add_argument(
        "--checkpoint-every",
        type=_CHECKS["checkpoint_every"],
        help="write last.eqx every N steps [1000]",
    )
    g.add_argument("--log-every", type=_CHECKS["log_every"], help="train record every N steps [50]")
    g.add_argument("--eval-batch-size", type=_CHECKS["eval_batch_size"], help="[--batch-size]")
    g.add_argument(
        "--max-examples",
        type=_CHECKS["max_examples"],
        help="use at most N examples of each split (quick runs)",
    )
    g.add_argument(
        "--cache-dir", help="cache the built arrays here (recommended; needed for PathX)"
    )
    g.add_argument("--stop-at", type=_POSITIVE_INT, help="checkpoint and exit after this step")
    g.add_argument(
        "--time-limit",
        type=_POSITIVE,
        metavar="MINUTES",
        help="checkpoint and exit (status 0, resumable) before MINUTES have passed since the "
        "process started; a limit too short for one step is an error (status 1)",
    )
    g.add_argument(
        "--nondeterministic",
        dest="deterministic",
        action="store_const",
        const=False,
        default=None,
        help="allow XLA's faster nondeterministic GPU ops (resume is then not bit-exact on GPUs)",
    )
    g.add_argument(
        "--sequence-parallel",
        type=_CHECKS["sequence_parallel"],
        metavar="N",
        help="split every sequence over N devices (a data x sequence mesh of the visible "
        "devices, eqx_lru.SequenceParallel); the global batch is unchanged [1]",
    )
    g.add_argument(
        "--distributed",
        choices=("auto", "on", "off"),
        default="auto",
        help="multi-host: call jax.distributed.initialize() ('auto': when "
        "JAX_COORDINATOR_ADDRESS or a SLURM/Open MPI launch with >1 task is detected)",
    )
    g.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress bar (it is shown on a terminal only anyway)",
    )
    return p


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    return _parser().parse_args(argv)
