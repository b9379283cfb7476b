r"""§3, Tables 1, 2, 3, 7, 8 in miniature: every rung of the ablation ladder on one CPU-sized task.

Each rung of `eqx_lru.ablation.ABLATION_CORES` (dense tanh / ReLU / linear RNN, complex diagonal
with $\lambda = a + ib$, $e^{-\nu + i\theta}$, $\exp(-e^{\nu_{\log}} + ie^{\theta_{\log}})$,
the same on a ring near the unit circle, and + $\gamma$ = the LRU) is the recurrent core of
the same deep model (`eqx_lru.LRUModel`: encoder, pre-norm residual blocks with batch norm,
GELU and GLU, pooling, linear head), trained by the same loop and optimiser (AdamW, 10%
warmup then cosine, lr × `lr_factor` and no weight decay on every rung's recurrent
parameters, §D.2), several seeds per rung. Only the blocks' `core=` changes between rungs.

Two tasks (`--task`):

- `recall` (default): delayed recall. A vector $v \sim \mathcal N(0, I_{10})$ is the input
    at step 0, followed by `length - 1` steps of silence (zeros); the class is
    $\arg\max_i v_i$, read from the **last** step (`pooling="last"`), so the answer has to
    travel through the recurrence over the whole sequence. Fresh vectors for the test set.
- `listops`: generated ListOps (LRA's generator, `experiments/lra/synthetic/listops.py`), token
    embedding and mean pooling, as the LRA model.

    python -m experiments.paper.ladder [--fast] [--out DIR] [--seeds 3] [--rungs a,b,...]
        [--task recall|listops] [--steps N] [--length L] ...

Writes `ladder.json` (settings, every seed's numbers, loss curves), `ladder.csv` (one row per
rung and seed), `ladder.md` (the table: mean ± standard error over seeds) and `ladder.png`
to `DIR` (default `experiments/paper/figures/`).

The seeds of one rung train together, stacked with `eqx.filter_vmap` (one compilation per
rung, and better use of the CPU than one small model at a time); the steps run inside
`jax.lax.scan` in chunks of `--log-every`, each chunk one call of one compiled program. Every
step is `eqx_lru.train_step`. Seed `s` sets the model initialisation, the batch order and the
dropout keys; the data set is the same for every rung and seed (`--data-seed`).
"""

import argparse
import dataclasses
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from eqx_lru.ablation import ABLATION_CORES

from ._ladder_report import (
    Rungs,
    fmt_mean_se,
    markdown_table,
    mean_se,
    plot,
    task_description,
    write_csv,
)
from ._ladder_setup import (
    DEFAULTS,
    LISTOPS,
    NUM_CLASSES,
    TASKS,
    Settings,
    task_arrays,
)
from ._ladder_train import ladder_optimizer, ladder_param_labels, train_rung
from .common import DEFAULT_OUT, save_json

# rung -> (label, paper section, tables, paper test accuracy in % as (mean, s.e.) on
# ListOps, PathFinder, PathX; None: "did not exceed random guessing" in the paper).
# Tables 1 / 6 (dense), 2 / 7 (diagonal, unit-disk init; ring: Table 8), 3 / 8 (LRU).
RUNGS = {
    "rnn_tanh": ("dense RNN, tanh", "§3.1", "1, 6", ((43.9, 0.1), None, None)),
    "rnn_relu": ("dense RNN, ReLU", "§3.1", "1, 6", ((37.6, 8.0), None, None)),
    "linear_dense": ("dense linear RNN", "§3.1", "1, 6, 7", ((50.4, 0.2), None, None)),
    "diag_realimag": ("diagonal, Λ = a + ib", "§3.2", "2, 7", ((58.8, 0.3), None, None)),
    "diag_exp": ("diagonal, Λ = exp(−ν + iθ)", "§3.3", "2, 7", ((60.5, 0.3), (65.4, 9.0), None)),
    "diag_stable_exp": ("diagonal, stable exp", "§3.3", "2, 7", ((59.4, 0.3), (93.5, 0.5), None)),
    "diag_stable_exp_ring": ("+ ring init", "§3.3", "2, 7, 8", ((59.4, 0.3), (94.4, 0.3), None)),
    "lru": ("+ γ normalisation (LRU)", "§3.4", "3, 8", ((60.2, 0.8), (95.1, 0.1), (94.2, 0.4))),
}
PAPER_TASKS = ("ListOps", "PathFinder", "PathX")
DENSE = ("rnn_tanh", "rnn_relu", "linear_dense")
NONLINEAR = ("rnn_tanh", "rnn_relu")
assert tuple(RUNGS) == tuple(ABLATION_CORES), "keep RUNGS in the registry's (the paper's) order"


#: The rungs as the table and figure need them.
TABLE = Rungs(
    order=tuple(RUNGS),
    paper={rung: row[3] for rung, row in RUNGS.items()},
    paper_tasks=PAPER_TASKS,
    dense=DENSE,
    nonlinear=NONLINEAR,
)

__all__ = [
    "ABLATION_CORES",
    "Settings",
    "ladder_optimizer",
    "ladder_param_labels",
    "main",
    "mean_se",
    "parse_args",
    "settings_from_args",
    "train_rung",
]


# --------------------------------------------------------------------------- command line


def _parser() -> argparse.ArgumentParser:
    from experiments.runs.flags import NATURAL, POSITIVE_INT, number

    checked = {int: POSITIVE_INT, float: number(float, low=0, open_low=True)}
    p = argparse.ArgumentParser(
        prog="python -m experiments.paper.ladder", description=(__doc__ or "").splitlines()[0]
    )
    p.add_argument("--fast", action="store_true",
                   help="tiny sizes, 1 seed, a few steps (seconds; used by the tests)")  # fmt: skip
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output directory")
    p.add_argument("--task", choices=TASKS, default="recall")
    p.add_argument("--seeds", type=POSITIVE_INT, help="seeds per rung [3; --fast: 1]")
    p.add_argument("--seed", type=NATURAL, default=0, help="first seed (seeds are seed, seed+1, …)")
    p.add_argument("--rungs", help="comma-separated rungs of eqx_lru.ablation.ABLATION_CORES "
                   "[all; --fast: rnn_tanh,lru]")  # fmt: skip
    p.add_argument("--data-seed", type=NATURAL, default=0, help="seed of the generated data")
    full, fast = DEFAULTS["recall", False], DEFAULTS["recall", True]
    for name, kind in (
        ("n_train", int), ("n_test", int), ("length", int), ("min_length", int),
        ("max_length", int), ("depth", int), ("d_model", int), ("d_state", int),
        ("steps", int), ("batch_size", int), ("lr", float), ("log_every", int),
    ):  # fmt: skip
        p.add_argument(f"--{name.replace('_', '-')}", type=checked[kind],
                       help=f"[recall: {full[name]}, --fast {fast[name]}; listops: "
                       f"{DEFAULTS[LISTOPS, False][name]}, --fast "
                       f"{DEFAULTS[LISTOPS, True][name]}]")  # fmt: skip
    p.add_argument("--lr-factor", type=checked[float], default=0.5,
                   help="recurrent parameters get lr × this [0.5: Table 9, ListOps]")  # fmt: skip
    p.add_argument("--weight-decay", type=number(float, low=0), default=0.05)
    p.add_argument("--warmup-fraction", type=number(float, low=0, high=1), default=0.1)
    return p


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    return _parser().parse_args(argv)


def settings_from_args(args: argparse.Namespace) -> Settings:
    defaults = DEFAULTS[args.task, args.fast]
    sizes: dict[str, Any] = {
        k: v if getattr(args, k) is None else getattr(args, k) for k, v in defaults.items()
    }
    if args.rungs is None:
        rungs = ("rnn_tanh", "lru") if args.fast else tuple(ABLATION_CORES)
    else:
        rungs = tuple(r.strip() for r in args.rungs.split(",") if r.strip())
    unknown = [r for r in rungs if r not in ABLATION_CORES]
    if unknown or not rungs:
        raise SystemExit(
            f"--rungs: unknown rung(s) {unknown}; choose from {', '.join(ABLATION_CORES)}."
        )
    n_seeds = 1 if args.fast and args.seeds is None else (args.seeds or 3)
    positive = dict(seeds=n_seeds, **{k: v for k, v in sizes.items() if k != "lr"})
    if args.task == "recall":
        positive = {k: v for k, v in positive.items() if k not in ("min_length", "max_length")}
    else:
        positive.pop("length")
    bad = {k: v for k, v in positive.items() if not v >= 1}
    if bad or not sizes["lr"] > 0:
        raise SystemExit(f"Sizes, steps and --lr must be positive; got {bad or sizes['lr']}.")
    return Settings(
        task=args.task, rungs=rungs, seeds=tuple(range(args.seed, args.seed + n_seeds)),
        data_seed=args.data_seed, lr_factor=args.lr_factor, weight_decay=args.weight_decay,
        warmup_fraction=args.warmup_fraction, **sizes,
    )  # fmt: skip


def main(argv: Sequence[str] | None = None) -> dict:
    args = parse_args(argv)
    settings = settings_from_args(args)
    args.out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    arrays = task_arrays(settings)
    counts = np.bincount(arrays["test"]["y"], minlength=NUM_CLASSES)
    results: dict[str, Any] = dict(
        task=settings.task,
        settings=dataclasses.asdict(settings),
        majority_test_accuracy=counts.max() / counts.sum(),
        mean_train_length=(
            settings.length if settings.task == "recall" else arrays["train"]["length"].mean()
        ),
        rungs=[],
    )
    print(f"{task_description(results)}; data in {time.perf_counter() - start:.1f} s",
          flush=True)  # fmt: skip
    for rung in settings.rungs:
        label, section, tables, _ = RUNGS[rung]
        trained = train_rung(rung, settings, arrays, log=lambda m: print(m, flush=True))
        record = dict(rung=rung, label=label, section=section, tables=tables, **trained)
        results["rungs"].append(record)
        accuracy_text = fmt_mean_se(*mean_se(record["test_accuracy"]), 100)
        print(f"{rung:<21} test acc {accuracy_text}%  ({record['seconds']:.0f} s for "
              f"{len(settings.seeds)} seed(s))", flush=True)  # fmt: skip
    results["seconds"] = time.perf_counter() - start
    results["summary"] = {
        r["rung"]: dict(
            test_accuracy=mean_se(r["test_accuracy"]),
            final_train_loss=mean_se(r["final_train_loss"]),
            train_accuracy=mean_se(r["train_accuracy"]),
            diverged=int(np.sum(r["diverged"])),
            **{
                f"paper_{t.lower()}": p
                for t, p in zip(PAPER_TASKS, RUNGS[r["rung"]][3], strict=True)
            },
        )
        for r in results["rungs"]
    }
    table = markdown_table(results, TABLE)
    (args.out / "ladder.md").write_text(table)
    write_csv(results, args.out / "ladder.csv")
    results["png"] = plot(results, args.out, TABLE).name
    save_json(results, args.out, "ladder")
    print(table)
    print(f"total {results['seconds']:.0f} s")
    return results


if __name__ == "__main__":
    main()
