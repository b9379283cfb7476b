"""The command line of `python -m experiments.paper.ladder`: argparse only, so that `--help`
and a bad flag are answered before the ladder's imports (JAX, the ablation cores)."""

import argparse
import sys
from collections.abc import Sequence

from experiments.lra.tasks import LISTOPS  # the LRA registry's name (no JAX import)
from experiments.runs.flags import (
    NATURAL,
    POSITIVE_INT,
    add_overwrite,
    number,
    output_folder,
    refuse_existing,
    text,
)

from .command import PAPER_FIGURES

__all__ = ["DEFAULTS", "LISTOPS", "RUNG_NAMES", "TASKS", "parse_args", "parse_early"]

TASKS = ("recall", LISTOPS)  # the ladder's own recall, and the LRA registry's ListOps
#: `eqx_lru.ablation.ABLATION_CORES`, in its (the paper's) order; `ladder.py` checks it.
RUNG_NAMES = (
    "rnn_tanh", "rnn_relu", "linear_dense", "diag_realimag", "diag_exp", "diag_stable_exp",
    "diag_stable_exp_ring", "lru",
)  # fmt: skip
#: What the ladder writes under --out.
OUTPUTS = ("ladder.json", "ladder.csv", "ladder.md", "ladder.png")

#: Defaults per task and mode; every entry can be overridden on the command line.
DEFAULTS = {
    ("recall", False): dict(
        n_train=20_000, n_test=2000, length=256, min_length=0, max_length=0, depth=2,
        d_model=32, d_state=32, steps=800, batch_size=32, lr=3e-3, log_every=100,
    ),
    ("recall", True): dict(
        n_train=64, n_test=32, length=12, min_length=0, max_length=0, depth=1, d_model=8,
        d_state=8, steps=4, batch_size=8, lr=3e-3, log_every=4,
    ),
    (LISTOPS, False): dict(
        n_train=8000, n_test=1000, length=0, min_length=100, max_length=300, depth=2,
        d_model=64, d_state=64, steps=1200, batch_size=32, lr=3e-3, log_every=100,
    ),
    (LISTOPS, True): dict(
        n_train=64, n_test=32, length=0, min_length=8, max_length=30, depth=1, d_model=8,
        d_state=8, steps=4, batch_size=8, lr=3e-3, log_every=4,
    ),
}  # fmt: skip

#: The sizes' flags: what each sets.
_SIZES = {
    "n_train": "training examples",
    "n_test": "test examples",
    "length": "recall: the sequence length",
    "min_length": "listops: keep lengths > this",
    "max_length": "listops: keep lengths < this",
    "depth": "blocks of the model",
    "d_model": "H, features per position",
    "d_state": "N, the state size of each core",
    "steps": "optimiser steps",
    "batch_size": "batch size",
    "lr": "peak learning rate",
    "log_every": "steps per compiled chunk (and per logged loss)",
}


def _rung_list(value: str) -> tuple[str, ...]:
    rungs = tuple(r.strip() for r in text(value).split(",") if r.strip())
    unknown = [r for r in rungs if r not in RUNG_NAMES]
    if unknown or not rungs:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated rungs among {', '.join(RUNG_NAMES)}, got {value!r}"
        )
    return rungs


def _parser(description: str = "") -> argparse.ArgumentParser:
    positive_float = number(float, low=0, open_low=True)
    p = argparse.ArgumentParser(prog="python -m experiments.paper.ladder", description=description)
    p.add_argument(
        "--fast",
        action="store_true",
        help="tiny sizes, 1 seed, a few steps (seconds; used by the tests) [off]",
    )
    p.add_argument(
        "--out",
        type=output_folder,
        default=PAPER_FIGURES,
        help="output folder [experiments/paper/figures]",
    )
    p.add_argument("--task", choices=TASKS, default="recall", help="the task [recall]")
    p.add_argument("--seeds", type=POSITIVE_INT, help="seeds per rung [3; --fast: 1]")
    p.add_argument(
        "--seed", type=NATURAL, default=0, help="first seed (seeds are seed, seed+1, …) [0]"
    )
    p.add_argument(
        "--rungs",
        type=_rung_list,
        help="comma-separated rungs of eqx_lru.ablation.ABLATION_CORES [all; --fast: rnn_tanh,lru]",
    )
    p.add_argument("--data-seed", type=NATURAL, default=0, help="seed of the generated data [0]")
    full, fast = DEFAULTS["recall", False], DEFAULTS["recall", True]
    for name, what in _SIZES.items():
        p.add_argument(
            f"--{name.replace('_', '-')}",
            type=positive_float if name == "lr" else POSITIVE_INT,
            help=f"{what} [recall: {full[name]}, --fast {fast[name]}; listops: "
            f"{DEFAULTS[LISTOPS, False][name]}, --fast "
            f"{DEFAULTS[LISTOPS, True][name]}]",
        )
    p.add_argument(
        "--lr-factor",
        type=positive_float,
        default=0.5,
        help="recurrent parameters get lr × this [0.5: Table 9, ListOps]",
    )
    p.add_argument(
        "--weight-decay",
        type=number(float, low=0),
        default=0.05,
        help="AdamW's weight decay (not on the recurrent parameters) [0.05]",
    )
    p.add_argument(
        "--warmup-fraction",
        type=number(float, low=0, high=1, open_high=False),
        default=0.1,
        help="fraction of the steps with a linear warmup [0.1]",
    )
    add_overwrite(p)
    return p  # fmt: skip


def parse_args(argv: Sequence[str] | None, description: str = "") -> argparse.Namespace:
    """The flags, checked; the ladder's files in --out already, without --overwrite, are
    refused (one `error:` line, status 2)."""
    parser = _parser(description)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    refuse_existing(parser, [args.out / name for name in OUTPUTS], overwrite=args.overwrite)
    return args


def parse_early(module: str, description: str) -> None:
    """Under `python -m`: parse `sys.argv` before the ladder's heavy imports."""
    if module == "__main__":
        parse_args(sys.argv[1:], description)
