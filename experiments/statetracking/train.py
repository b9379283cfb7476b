"""Train one state-tracking cell (task, core, seed) and test it at 4x the length:
`python -m experiments.statetracking.train --task parity --core block2 --seed 0 --steps 400
--out cell.json`.

The model: an `eqx_lru.LRUModel` with an embedding encoder, `depth` `LRUBlock`s (layer
norm) around the rung's core, and a per-position head; AdamW (`eqx_lru.lru_optimizer`:
no weight decay on the recurrent fields) on the cross-entropy of every position, with
fresh random sequences of `train_length` at every step. The test set
is `test_sequences` sequences of `4 * train_length` (another seed). The result is one JSON
line: accuracy over every test position, over the positions beyond the training length
(`extrapolated`), and at the training lengths (`in_length`), the settings, the wall time.
"""

import argparse
import functools
import json
import sys
import time
from pathlib import Path

from experiments.runs import flags as F

from . import rungs, tasks

# JAX, optax and eqx_lru are imported inside the functions: `--help` and a bad flag are
# answered before they load.

#: The settings of a cell, with their defaults (a few minutes on two CPU cores).
DEFAULTS = dict(
    train_length=64, test_factor=4, d_model=32, d_state=32, depth=1, batch=32,
    learning_rate=3e-3, weight_decay=0.01, label_smoothing=0.0, test_sequences=128,
)  # fmt: skip


def train(
    task: str, core: str, *, seed: int, steps: int, train_length: int = 64,
    test_factor: int = 4, d_model: int = 32, d_state: int = 32, depth: int = 1,
    batch: int = 32, learning_rate: float = 3e-3, weight_decay: float = 0.01,
    label_smoothing: float = 0.0, test_sequences: int = 128,
) -> dict:  # fmt: skip
    """Train the cell and return its result (see the module docstring)."""
    import equinox as eqx
    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax

    import eqx_lru

    spec = tasks.task(task)
    make = rungs.factory(core)
    start = time.perf_counter()
    model = eqx_lru.LRUModel(
        spec.vocab, spec.classes, d_model, d_state, depth, encoder="embedding", pooling=None,
        block=functools.partial(eqx_lru.LRUBlock, core=make, norm="layer"),
        key=jax.random.PRNGKey(seed),
    )  # fmt: skip
    state = eqx.nn.State(model)
    # The library's AdamW (paper §D.2): no weight decay on the cores' recurrent fields
    # (a decayed contraction logit would pull rho towards 1/2, and forget).
    optimiser = optax.chain(
        optax.clip_by_global_norm(1.0),
        eqx_lru.lru_optimizer(
            learning_rate=learning_rate, total_steps=steps, weight_decay=weight_decay,
            init_value=learning_rate / 100, end_value=learning_rate / 10,
        ),
    )  # fmt: skip
    params, static = eqx.partition(model, eqx.is_inexact_array)
    opt_state = optimiser.init(params)

    def logits(params, x):
        model = eqx.combine(params, static)
        return jax.vmap(lambda x: model(x, state, inference=True)[0])(x)

    @jax.jit
    def update(params, opt_state, x, y):
        def loss(params):
            out = logits(params, x)
            if not label_smoothing:
                return optax.softmax_cross_entropy_with_integer_labels(out, y).mean()
            target = optax.smooth_labels(jax.nn.one_hot(y, spec.classes), label_smoothing)
            return optax.softmax_cross_entropy(out, target).mean()

        value, grads = jax.value_and_grad(loss)(params)
        with jax.numpy_dtype_promotion("standard"):  # optax's Python floats vs int32 counts
            updates, opt_state = optimiser.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, value

    @jax.jit
    def correct(params, x, y):
        return jnp.argmax(logits(params, x), -1) == y

    rng = np.random.default_rng(seed)
    losses = []
    for _ in range(steps):
        x, y = tasks.generate(task, batch, train_length, seed=int(rng.integers(2**31)))
        params, opt_state, value = update(params, opt_state, x, y)
        losses.append(float(value))
    test_length = test_factor * train_length
    x, y = tasks.generate(task, test_sequences, test_length, seed=10_000 + seed)
    hits = np.asarray(correct(params, x, y))
    return dict(
        task=task, core=core, seed=seed, steps=steps, accuracy=float(hits.mean()),
        extrapolated=float(hits[:, train_length:].mean()),
        in_length=float(hits[:, :train_length].mean()),
        chance=1 / spec.classes, final_loss=float(np.mean(losses[-max(1, steps // 20):])),
        train_length=train_length, test_length=test_length, d_model=d_model,
        d_state=d_state, depth=depth, batch=batch, learning_rate=learning_rate,
        weight_decay=weight_decay, label_smoothing=label_smoothing,
        wall_s=round(time.perf_counter() - start, 1),
    )  # fmt: skip


def add_training_flags(p: argparse.ArgumentParser, *, defaults: dict) -> None:
    """`--learning-rate`, `--weight-decay` and `--label-smoothing`, with `defaults`' values
    (one cell's command and the table's share them)."""
    p.add_argument("--learning-rate", type=F.POSITIVE_FLOAT32,
                   default=defaults["learning_rate"],
                   help=f"AdamW's peak learning rate [{defaults['learning_rate']:g}]")  # fmt: skip
    p.add_argument("--weight-decay", type=F.NONNEGATIVE_FLOAT32,
                   default=defaults["weight_decay"],
                   help=f"AdamW's weight decay [{defaults['weight_decay']:g}]")  # fmt: skip
    p.add_argument("--label-smoothing", type=F.FRACTION, default=defaults["label_smoothing"],
                   help="the targets' label smoothing, in [0, 1) "
                   f"[{defaults['label_smoothing']:g}; 0: none]")  # fmt: skip


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m experiments.statetracking.train",
        description=(__doc__ or "").split("\n\n")[0],
    )
    p.add_argument("--task", choices=sorted(tasks.TASKS), default="parity",
                   help="the task [parity]")  # fmt: skip
    p.add_argument("--core", choices=list(rungs.RUNGS), default="block2",
                   help="the rung (core) [block2]")  # fmt: skip
    p.add_argument("--seed", type=F.SEED, default=0, help="model and data seed [0]")
    p.add_argument("--steps", type=F.STEPS, default=400, help="training steps [400]")
    p.add_argument("--train-length", type=F.number(int, low=1, high=4096, open_high=False),
                   default=DEFAULTS["train_length"],
                   help="training sequence length [64]")  # fmt: skip
    for name in ("d_model", "d_state", "depth", "batch", "test_sequences"):
        p.add_argument(F.flag(name), type=F.POSITIVE_INT, default=DEFAULTS[name],
                       help=f"{name.replace('_', ' ')} [{DEFAULTS[name]}]")  # fmt: skip
    add_training_flags(p, defaults=DEFAULTS)
    p.add_argument("--out", type=F.output_file, default=None,
                   help="append the result as one JSON line to this file (existing: refused "
                   "without --overwrite) [none: print only]")  # fmt: skip
    F.add_overwrite(p)
    return p


@F.report_os_errors
def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    F.refuse_existing(p, [args.out], overwrite=args.overwrite)
    if args.core not in rungs.available():
        p.error(f"argument --core: {args.core!r} is not available: {rungs.missing()[args.core]}")
    settings = {k: getattr(args, k) for k in DEFAULTS if k != "test_factor"}
    result = train(args.task, args.core, seed=args.seed, steps=args.steps, **settings)
    line = json.dumps(result)
    print(line)
    if args.out is not None:
        Path(args.out).write_text(line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
