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
import csv
import dataclasses
import functools
import math
import time
from collections.abc import Sequence
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import matplotlib.ticker
import numpy as np
import optax

import eqx_lru
from eqx_lru.ablation import ABLATION_CORES, AbstractDenseRNN

from ..lra.synthetic import generate_listops
from ..lra.tasks import LISTOPS
from ._common import DEFAULT_OUT, plt, save_figure, save_json

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


# ListOps tokens, as `experiments.lra.data` reads them: parentheses dropped, "]" -> "X".
LISTOPS_VOCAB = ("<pad>", *map(str, range(10)), "[MIN", "[MAX", "[MED", "[SM", "X")
NUM_CLASSES = 10  # both tasks
RECALL_CHANNELS = 10
AXIS_NAME = "batch"
TASKS = ("recall", LISTOPS)  # the ladder's own recall, and the LRA registry's ListOps


@dataclasses.dataclass(frozen=True)
class Settings:
    """Everything that determines a ladder run (saved in `ladder.json`)."""

    task: str
    rungs: tuple[str, ...]
    seeds: tuple[int, ...]
    data_seed: int
    n_train: int
    n_test: int
    length: int  # recall: the sequence length
    min_length: int  # listops: lengths strictly between these
    max_length: int
    depth: int
    d_model: int
    d_state: int
    steps: int
    batch_size: int
    lr: float
    lr_factor: float
    weight_decay: float
    warmup_fraction: float
    log_every: int


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


# --------------------------------------------------------------------------- data


def recall_arrays(settings: Settings) -> dict[str, dict[str, np.ndarray]]:
    """Delayed recall: `v` `(n, 10)` standard normal (the input at step 0; every later step
    is zero) and `y = argmax(v)`, for `train` and `test`."""
    rng = np.random.default_rng([settings.data_seed, 1])
    out = {}
    for split, n in (("train", settings.n_train), ("test", settings.n_test)):
        v = rng.standard_normal((n, RECALL_CHANNELS)).astype(np.float32)
        out[split] = dict(v=v, y=np.argmax(v, axis=-1).astype(np.int32))
    return out


def listops_arrays(settings: Settings) -> dict[str, dict[str, np.ndarray]]:
    """Generated ListOps, split into `train` and `test` (no expression in both): `x` tokens
    `(n, max_length - 1)` int32 right-padded with 0, `length` valid lengths, `y` labels."""
    examples = generate_listops(
        settings.n_train + settings.n_test,
        seed=settings.data_seed,
        min_length=settings.min_length,
        max_length=settings.max_length,
    )
    index = {token: i for i, token in enumerate(LISTOPS_VOCAB)}
    x = np.zeros((len(examples), settings.max_length - 1), np.int32)  # lengths < max_length
    lengths = np.zeros(len(examples), np.int32)
    for i, (expr, _) in enumerate(examples):
        tokens = expr.replace("]", "X").replace("(", "").replace(")", "").split()
        x[i, : len(tokens)] = [index[t] for t in tokens]
        lengths[i] = len(tokens)
    y = np.array([label for _, label in examples], np.int32)
    n = settings.n_train
    return {
        "train": dict(x=x[:n], length=lengths[:n], y=y[:n]),
        "test": dict(x=x[n:], length=lengths[n:], y=y[n:]),
    }


def task_arrays(settings: Settings) -> dict[str, dict[str, np.ndarray]]:
    return (recall_arrays if settings.task == "recall" else listops_arrays)(settings)


def model_inputs(task: str, length: int, arrays: dict, index):
    """The model inputs `(x, valid lengths or None, labels)` of rows `index` (any shape,
    batch last), traceable. Recall sequences are built here: only step 0 is stored."""
    y = arrays["y"][index]
    if task == "recall":
        v = arrays["v"][index]
        x = jnp.zeros((*v.shape[:-1], length, v.shape[-1]), v.dtype).at[..., 0, :].set(v)
        return x, None, y
    return arrays["x"][index], arrays["length"][index], y


# --------------------------------------------------------------------------- optimiser


def ladder_param_labels(params) -> object:
    """`eqx_lru.lru_param_labels`: every core of the ladder declares its recurrent fields
    ("A and B", §D.2), so each rung gets the reduced learning rate and no weight decay."""
    return eqx_lru.lru_param_labels(params)


def ladder_optimizer(settings: Settings) -> optax.GradientTransformation:
    """`eqx_lru.lru_optimizer`'s transformation (§D.2) with `ladder_param_labels`, so every
    rung's recurrent parameters get the reduced learning rate and no weight decay."""
    schedule = dict(total_steps=settings.steps, warmup_fraction=settings.warmup_fraction)
    base = eqx_lru.lru_schedule(settings.lr, **schedule)
    slow = eqx_lru.lru_schedule(settings.lr * settings.lr_factor, **schedule)
    return optax.multi_transform(
        {
            "recurrent": optax.adam(slow),
            "decay": optax.adamw(base, weight_decay=settings.weight_decay),
            "no_decay": optax.adam(base),
        },
        ladder_param_labels,
    )


# --------------------------------------------------------------------------- training


def spectral_radii(static, params) -> np.ndarray:
    r"""max |λ| of each seed's recurrence, over all its layers, shape `(seeds,)`: the
    eigenvalues of $A$ for the dense cores (for tanh/ReLU: of the linearisation at 0), the
    diagonal $\lambda$ otherwise. Computed on the host."""
    leaves = jax.tree_util.tree_leaves(params)
    radii = []
    for i in range(leaves[0].shape[0]):
        model = eqx.combine(jax.tree_util.tree_map(lambda x, i=i: x[i], params), static)
        per_layer = []
        for block in model.blocks:
            core = block.core
            if isinstance(core, AbstractDenseRNN):
                A = np.asarray(core.A, np.float64)
                modulus = np.abs(np.linalg.eigvals(A)) if np.isfinite(A).all() else [np.nan]
            else:
                modulus = np.abs(np.asarray(core.eigenvalues()))
            per_layer.append(np.max(modulus))  # NaN if any is NaN
        radii.append(max(per_layer) if np.isfinite(per_layer).all() else math.nan)
    return np.array(radii)


def cross_entropy(logits: jax.Array, labels: jax.Array) -> jax.Array:
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=-1))


def build_models(rung: str, settings: Settings, keys: jax.Array):
    """One `LRUModel` per key, stacked along a leading seed axis, and their states."""
    if settings.task == "recall":
        task_options = dict(in_size=RECALL_CHANNELS, encoder="linear", pooling="last")
    else:
        task_options = dict(in_size=len(LISTOPS_VOCAB), encoder="embedding", pooling="mean")

    block = functools.partial(
        eqx_lru.LRUBlock, core=ABLATION_CORES[rung], norm="batch", dropout=0.0, glu="full",
        axis_name=AXIS_NAME,
    )  # fmt: skip

    def build(key):
        return eqx.nn.make_with_state(eqx_lru.LRUModel)(
            out_size=NUM_CLASSES, d_model=settings.d_model, d_state=settings.d_state,
            depth=settings.depth, block=block, key=key, **task_options,
        )  # fmt: skip

    return eqx.filter_vmap(build)(keys)


@eqx.filter_jit
def _train_chunk(static, params, states, opt_states, keys, data, indices, *, task, length,
                 optimizer):  # fmt: skip
    """`indices.shape[0]` steps of `eqx_lru.train_step` for every seed (vmapped), in a scan.

    `indices`: `(steps, seeds, batch)` rows of the training set; `keys`: `(seeds,)`, each
    seed's key chain (every step splits off its key). Returns the updated
    `(params, states, opt_states, keys)` and the losses `(steps, seeds)`.
    """

    def one_seed(params, state, opt_state, key, index):
        key, step_key = jax.random.split(key)
        x, lengths, y = model_inputs(task, length, data, index)
        model, state, opt_state, loss = eqx_lru.train_step(
            eqx.combine(params, static), state, opt_state, x, y, length=lengths,
            key=step_key, optimizer=optimizer, loss_fn=cross_entropy, axis_name=AXIS_NAME,
        )  # fmt: skip
        return (eqx.filter(model, eqx.is_array), state, opt_state, key), loss

    def step(carry, index):
        return jax.vmap(one_seed)(*carry, index)

    carry, losses = jax.lax.scan(step, (params, states, opt_states, keys), indices)
    return *carry, losses


@eqx.filter_jit
def _correct(static, params, states, data, index, *, task, length):
    """How many of rows `index` every seed's model (inference mode) classifies correctly,
    `(seeds,)`; non-finite logits count as wrong."""
    x, lengths, y = model_inputs(task, length, data, index)

    def one_seed(params, state):
        logits = eqx_lru.predict(
            eqx.combine(params, static), state, x, length=lengths, axis_name=AXIS_NAME
        )
        ok = jnp.all(jnp.isfinite(logits), axis=-1) & (jnp.argmax(logits, axis=-1) == y)
        return jnp.sum(ok)

    return jax.vmap(one_seed)(params, states)


def accuracy(static, params, states, settings, data, n: int, *, batch: int = 250) -> np.ndarray:
    """Accuracy of every seed's model on the first `n` rows of `data`, `(seeds,)`."""
    data = jax.tree_util.tree_map(jnp.asarray, data)
    correct = 0
    for i in range(0, n, batch):
        index = jnp.arange(i, min(i + batch, n))
        correct = correct + np.asarray(
            _correct(static, params, states, data, index, task=settings.task,
                     length=settings.length)
        )  # fmt: skip
    return correct / n


def train_rung(rung: str, settings: Settings, arrays: dict, *, log=print) -> dict:
    """Train every seed of `rung` (together) and evaluate; the rung's record for the JSON."""
    start = time.perf_counter()
    seeds = settings.seeds
    keys = jax.vmap(lambda seed: jax.random.split(jax.random.key(seed)))(jnp.array(seeds))
    model_keys, run_keys = keys[:, 0], keys[:, 1]
    models, states = build_models(rung, settings, model_keys)
    params, static = eqx.partition(models, eqx.is_array)
    radius_init = spectral_radii(static, params)
    optimizer = ladder_optimizer(settings)
    with jax.numpy_dtype_promotion("standard"):  # optax's Python floats vs int32 counts
        opt_states = eqx.filter_vmap(optimizer.init)(eqx.filter(models, eqx.is_inexact_array))
    # Step s of seed i trains on rows `order[s, i]`.
    n, b = settings.n_train, settings.batch_size
    epochs = math.ceil(settings.steps * b / n)
    order = np.stack([
        np.concatenate([np.random.default_rng([seed, e]).permutation(n) for e in range(epochs)])
        [: settings.steps * b].reshape(settings.steps, b)
        for seed in seeds
    ], axis=1)  # fmt: skip
    train = jax.tree_util.tree_map(jnp.asarray, arrays["train"])
    chunk = math.gcd(settings.steps, settings.log_every)
    losses = []
    for s in range(0, settings.steps, chunk):
        params, states, opt_states, run_keys, chunk_losses = _train_chunk(
            static, params, states, opt_states, run_keys, train,
            jnp.asarray(order[s : s + chunk]), task=settings.task, length=settings.length,
            optimizer=optimizer,
        )  # fmt: skip
        losses.append(np.asarray(chunk_losses))
        done = s + chunk
        if done % settings.log_every == 0 or done == settings.steps:
            recent = np.concatenate(losses)[-settings.log_every :].mean(0)
            log(f"  {rung:<21} step {done:>5}/{settings.steps}  train loss per seed "
                + " ".join(f"{v:.3f}" for v in recent)
                + f"  ({time.perf_counter() - start:.0f} s)")  # fmt: skip
    losses = np.concatenate(losses)  # (steps, seeds)
    train_time = time.perf_counter() - start
    test_acc = accuracy(static, params, states, settings, arrays["test"], settings.n_test)
    n_eval = min(settings.n_train, settings.n_test)
    train_acc = accuracy(static, params, states, settings, arrays["train"], n_eval)
    tail = max(1, settings.steps // 10)
    final_loss = losses[-tail:].mean(0)
    diverged = ~np.all(np.isfinite(losses), axis=0)
    curve_every = max(1, settings.steps // 50)
    usable = settings.steps // curve_every * curve_every
    curves = losses[:usable].reshape(-1, curve_every, len(seeds)).mean(1)  # (points, seeds)
    return dict(
        rung=rung,
        label=RUNGS[rung][0],
        section=RUNGS[rung][1],
        tables=RUNGS[rung][2],
        seeds=list(seeds),
        test_accuracy=test_acc,
        train_accuracy=train_acc,
        train_accuracy_examples=n_eval,
        final_train_loss=final_loss,
        diverged=diverged,
        first_loss=losses[0],
        spectral_radius_init=radius_init,
        spectral_radius_final=spectral_radii(static, params),
        loss_curve_steps=(np.arange(curves.shape[0]) + 1) * curve_every,
        loss_curve=curves.T,
        seconds=time.perf_counter() - start,
        train_seconds=train_time,
    )


# --------------------------------------------------------------------------- reporting


def mean_se(values) -> tuple[float, float]:
    """Mean and standard error (sample std / √n; NaN for one value) of the finite values;
    NaN if none is finite."""
    v = np.asarray(values, np.float64)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return math.nan, math.nan
    se = v.std(ddof=1) / math.sqrt(v.size) if v.size > 1 else math.nan
    return float(v.mean()), float(se)


def _fmt(mean: float, se: float, scale: float = 1.0, digits: int = 1) -> str:
    if not math.isfinite(mean):
        return "—"
    text = f"{mean * scale:.{digits}f}"
    return text + (f" ± {se * scale:.{digits}f}" if math.isfinite(se) else "")


def task_description(results: dict) -> str:
    s = results["settings"]
    if s["task"] == "recall":
        data = (
            f"Delayed recall: v ~ N(0, I₁₀) at step 0, then {s['length'] - 1} steps of zeros; "
            f"class argmax v read from the last step ({s['n_train']} train / {s['n_test']} "
            "test vectors)"
        )
    else:
        data = (
            f"Generated ListOps ({s['min_length'] + 1}–{s['max_length'] - 1} tokens, mean "
            f"{results['mean_train_length']:.0f}; {s['n_train']} train / {s['n_test']} test "
            "expressions)"
        )
    return (
        f"{data}; depth {s['depth']}, H = {s['d_model']}, N = {s['d_state']}, {s['steps']} "
        f"steps of batch {s['batch_size']}, lr {s['lr']:g} (recurrent × {s['lr_factor']:g})"
    )


def _paper(result) -> str:
    return "✗" if result is None else f"{result[0]} ({result[1]})"


def markdown_table(results: dict) -> str:
    s = results["settings"]
    lines = [
        f"{task_description(results)}; mean ± s.e. over {len(s['seeds'])} seed(s). "
        f"Majority class: {100 * results['majority_test_accuracy']:.1f}% of the test set.",
        "",
        "| rung | core | paper | test acc (%) | final train loss | train acc (%) | diverged "
        "| max \\|λ\\| init → end | paper: " + " / ".join(PAPER_TASKS) + " (%) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results["rungs"]:
        paper = " / ".join(_paper(p) for p in RUNGS[r["rung"]][3])
        lines.append(
            f"| `{r['rung']}` | {r['label']} | {r['section']}, Tab. {r['tables']} "
            f"| {_fmt(*mean_se(r['test_accuracy']), 100)} "
            f"| {_fmt(*mean_se(r['final_train_loss']), digits=3)} "
            f"| {_fmt(*mean_se(r['train_accuracy']), 100)} "
            f"| {int(np.sum(r['diverged']))}/{len(r['seeds'])} "
            f"| {_fmt(*mean_se(r['spectral_radius_init']), digits=3)} → "
            f"{_fmt(*mean_se(r['spectral_radius_final']), digits=3)} | {paper} |"
        )
    lines += [
        "",
        "Test accuracy after the last step (no early stopping). Final train loss: mean over "
        "the last 10% of steps; a seed whose loss became non-finite is *diverged*, left out "
        "of the loss, and its non-finite predictions count as wrong. Train accuracy on "
        f"{results['rungs'][0]['train_accuracy_examples']} training examples. max |λ|: the "
        "largest eigenvalue modulus over the layers (dense cores: of A, for tanh/ReLU the "
        "linearisation at 0), mean ± s.e. over the seeds where it is finite. Paper: full-size "
        "LRA (depth 6, H = 128–192, N = 256, 80k–500k steps), Tables 1/6 (dense), 2/7 "
        "(diagonal; unit-disk init), 8 (ring init), 3/8 (LRU); ✗ = not above chance.",
    ]
    return "\n".join(lines) + "\n"


def write_csv(results: dict, path: Path) -> None:
    names = ("test_accuracy", "train_accuracy", "final_train_loss", "diverged",
             "spectral_radius_init", "spectral_radius_final")  # fmt: skip
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["rung", "seed", *names])
        for r in results["rungs"]:
            for i, seed in enumerate(r["seeds"]):
                values = [float(r[name][i]) for name in names]
                writer.writerow([r["rung"], seed, *(f"{v:.4g}" for v in values)])


def plot(results: dict, out: Path) -> Path:
    rungs, s = results["rungs"], results["settings"]
    fig, axes = plt.subplots(1, 3, figsize=(16, 5), gridspec_kw=dict(width_ratios=[1.2, 1, 1]))
    colors = dict(zip(RUNGS, plt.cm.viridis(np.linspace(0, 0.92, len(RUNGS))), strict=True))
    ax = axes[0]
    for x, r in enumerate(rungs):
        mean, se = mean_se(r["test_accuracy"])
        ax.bar(x, 100 * mean, yerr=100 * se if math.isfinite(se) else None, capsize=4,
               color=colors[r["rung"]], alpha=0.85)  # fmt: skip
        acc = 100 * np.asarray(r["test_accuracy"])
        jitter = np.linspace(-0.15, 0.15, len(acc)) if len(acc) > 1 else np.zeros(1)
        ax.plot(x + jitter, acc, "o", color="k", ms=3.5, mfc="white", zorder=3,
                label="each seed" if x == 0 else None)  # fmt: skip
        if any(r["diverged"]):
            top = 100 * (np.nan_to_num(mean) + (se if math.isfinite(se) else 0))
            ax.text(x, max(top, np.nanmax(acc)) + 2, f"{int(np.sum(r['diverged']))} diverged",
                    ha="center", va="bottom", fontsize=7, color="tab:red")  # fmt: skip
        if s["task"] == LISTOPS:
            ax.plot(x, RUNGS[r["rung"]][3][0][0], "_", color="tab:red", ms=22, mew=2, zorder=4,
                    label="paper (full-size LRA ListOps)" if x == 0 else None)  # fmt: skip
    ax.axhline(100 * results["majority_test_accuracy"], color="gray", ls="--", lw=1,
               label="majority class")  # fmt: skip
    ax.set_xticks(range(len(rungs)), [r["rung"] for r in rungs], rotation=30, ha="right",
                  fontsize=8)  # fmt: skip
    ax.set_ylim(0, 105 if s["task"] == "recall" else None)
    ax.set_ylabel("test accuracy (%)")
    ax.set_title(f"test accuracy, mean ± s.e. over {len(s['seeds'])} seed(s)", fontsize=9)
    ax.legend(fontsize=7, loc="upper left")
    ax.grid(axis="y", alpha=0.3)

    ax = axes[1]
    chance = math.log(NUM_CLASSES)
    for r in rungs:
        curve = np.asarray(r["loss_curve"], np.float64)  # (seeds, points)
        curve = curve[np.isfinite(curve).all(axis=1)]
        if len(curve):
            ax.plot(r["loss_curve_steps"], curve.mean(0), color=colors[r["rung"]], lw=1.3,
                    ls="--" if r["rung"] in DENSE else "-", label=r["rung"])  # fmt: skip
    ax.axhline(chance, color="gray", ls="--", lw=1)
    ax.set_ylim(0, 1.25 * chance)
    ax.set_xlabel("step")
    ax.set_ylabel("train loss")
    ax.set_title(
        "training loss, mean over the seeds that did not diverge\n"
        f"(dashed: log {NUM_CLASSES}, chance; spikes above the top are cut)",
        fontsize=9,
    )  # fmt: skip
    ax.legend(fontsize=7, ncol=2)
    ax.grid(alpha=0.3)

    ax = axes[2]
    for r in rungs:
        if r["rung"] in NONLINEAR:
            continue
        gap = 1 - np.asarray(r["spectral_radius_init"], np.float64)
        shown = gap > 0
        ax.plot(gap[shown], 100 * np.asarray(r["test_accuracy"])[shown], "o",
                color=colors[r["rung"]], ms=5, label=r["rung"])  # fmt: skip
    ax.set_xscale("log")
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel("1 − max |λ| at initialisation (dense: ρ(A) ≥ 1 not shown)")
    ax.set_ylabel("test accuracy (%)")
    ax.set_title("linear rungs: slowest mode at initialisation vs. result (every seed)",
                 fontsize=9)  # fmt: skip
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.suptitle(f"The ablation ladder (§3, Tables 1, 2, 7, 8) in miniature\n"
                 f"{task_description(results)}", fontsize=9)  # fmt: skip
    fig.tight_layout()
    return save_figure(fig, out, "ladder")


# --------------------------------------------------------------------------- command line


def _parser() -> argparse.ArgumentParser:
    from experiments._flags import NATURAL, POSITIVE_INT, number

    checked = {int: POSITIVE_INT, float: number(float, low=0, open_low=True)}
    p = argparse.ArgumentParser(
        prog="python -m experiments.paper.ladder", description=__doc__.splitlines()[0]
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
    sizes = {k: v if getattr(args, k) is None else getattr(args, k) for k, v in defaults.items()}
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
    results = dict(
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
        record = train_rung(rung, settings, arrays, log=lambda m: print(m, flush=True))
        results["rungs"].append(record)
        accuracy_text = _fmt(*mean_se(record["test_accuracy"]), 100)
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
    table = markdown_table(results)
    (args.out / "ladder.md").write_text(table)
    write_csv(results, args.out / "ladder.csv")
    results["png"] = plot(results, args.out).name
    save_json(results, args.out, "ladder")
    print(table)
    print(f"total {results['seconds']:.0f} s")
    return results


if __name__ == "__main__":
    main()
