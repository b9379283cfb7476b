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

from experiments.paper._ladder_cli import parse_early

_DESCRIPTION = (__doc__ or "").splitlines()[0]
# Under `python -m`: --help and a bad flag are answered now, before JAX loads.
parse_early(__name__, _DESCRIPTION)

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import time  # noqa: E402
from collections.abc import Sequence  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

from eqx_lru.ablation import ABLATION_CORES  # noqa: E402

from ._ladder_cli import RUNG_NAMES, parse_args  # noqa: E402
from ._ladder_cli import _parser as _parser  # noqa: E402, F401  (the flag tests walk it)
from ._ladder_report import (  # noqa: E402
    Rungs,
    fmt_mean_se,
    markdown_table,
    mean_se,
    plot,
    task_description,
    write_csv,
)
from ._ladder_setup import DEFAULTS, NUM_CLASSES, Settings, task_arrays  # noqa: E402
from ._ladder_train import ladder_optimizer, ladder_param_labels, train_rung  # noqa: E402
from .common import save_json  # noqa: E402

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
assert tuple(RUNGS) == tuple(ABLATION_CORES) == RUNG_NAMES, "keep the registry's (paper's) order"


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


def settings_from_args(args: argparse.Namespace) -> Settings:
    defaults = DEFAULTS[args.task, args.fast]
    sizes: dict[str, Any] = {
        k: v if getattr(args, k) is None else getattr(args, k) for k, v in defaults.items()
    }
    if args.rungs is None:
        rungs = ("rnn_tanh", "lru") if args.fast else tuple(ABLATION_CORES)
    else:
        rungs = tuple(args.rungs)  # checked by the parser
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
    args = parse_args(argv, _DESCRIPTION)
    settings = settings_from_args(args)
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
