"""Training the ablation ladder: every seed of a rung together (`eqx.filter_vmap`), the
steps in `jax.lax.scan` chunks, each step `eqx_lru.train_step` (`experiments/paper/ladder.py`)."""

import functools
import math
import time
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

import eqx_lru
from eqx_lru.ablation import ABLATION_CORES, AbstractDenseRNN

from ._ladder_setup import (
    AXIS_NAME,
    LISTOPS_VOCAB,
    NUM_CLASSES,
    RECALL_CHANNELS,
    Settings,
    model_inputs,
)

# --------------------------------------------------------------------------- optimiser


def ladder_param_labels(params) -> object:
    """`eqx_lru.lru_param_labels`: every core of the ladder declares its recurrent fields
    ("A and B", §D.2), so each rung gets the reduced learning rate and no weight decay."""
    return eqx_lru.lru_param_labels(params)


def ladder_optimizer(settings: Settings) -> optax.GradientTransformation:
    """`eqx_lru.lru_optimizer`'s transformation (§D.2) with `ladder_param_labels`, so every
    rung's recurrent parameters get the reduced learning rate and no weight decay."""
    steps, warmup = settings.steps, settings.warmup_fraction
    base = eqx_lru.lru_schedule(settings.lr, total_steps=steps, warmup_fraction=warmup)
    slow = eqx_lru.lru_schedule(
        settings.lr * settings.lr_factor, total_steps=steps, warmup_fraction=warmup
    )
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
    task_options: dict[str, Any]
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
        params, states, opt_states, keys = carry
        return jax.vmap(one_seed)(params, states, opt_states, keys, index)

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
    correct = np.zeros(len(settings.seeds))
    for i in range(0, n, batch):
        index = jnp.arange(i, min(i + batch, n))
        correct = correct + np.asarray(
            _correct(static, params, states, data, index, task=settings.task,
                     length=settings.length)
        )  # fmt: skip
    return correct / n


def _batch_order(settings: Settings) -> np.ndarray:
    """`(steps, seeds, batch)`: step s of seed i trains on rows `order[s, i]`."""
    n, b = settings.n_train, settings.batch_size
    epochs = math.ceil(settings.steps * b / n)
    return np.stack([
        np.concatenate([np.random.default_rng([seed, e]).permutation(n) for e in range(epochs)])
        [: settings.steps * b].reshape(settings.steps, b)
        for seed in settings.seeds
    ], axis=1)  # fmt: skip


def _train_steps(rung, settings, arrays, static, params, states, run_keys, *, log, start):
    """Every step, in chunks of `gcd(steps, log_every)`; returns the trained `params`,
    `states` and the losses `(steps, seeds)`."""
    optimizer = ladder_optimizer(settings)
    with jax.numpy_dtype_promotion("standard"):  # optax's Python floats vs int32 counts
        opt_states = eqx.filter_vmap(optimizer.init)(eqx.filter(params, eqx.is_inexact_array))
    order = _batch_order(settings)
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
    return params, states, np.concatenate(losses)


def train_rung(rung: str, settings: Settings, arrays: dict, *, log=print) -> dict:
    """Train every seed of `rung` (together) and evaluate; the rung's numbers for the JSON."""
    start = time.perf_counter()
    seeds = settings.seeds
    keys = jax.vmap(lambda seed: jax.random.split(jax.random.key(seed)))(jnp.array(seeds))
    models, states = build_models(rung, settings, keys[:, 0])
    params, static = eqx.partition(models, eqx.is_array)
    radius_init = spectral_radii(static, params)
    params, states, losses = _train_steps(
        rung, settings, arrays, static, params, states, keys[:, 1], log=log, start=start
    )
    train_time = time.perf_counter() - start
    test_acc = accuracy(static, params, states, settings, arrays["test"], settings.n_test)
    n_eval = min(settings.n_train, settings.n_test)
    train_acc = accuracy(static, params, states, settings, arrays["train"], n_eval)
    curve_every = max(1, settings.steps // 50)
    usable = settings.steps // curve_every * curve_every
    curves = losses[:usable].reshape(-1, curve_every, len(seeds)).mean(1)  # (points, seeds)
    return dict(
        seeds=list(seeds),
        test_accuracy=test_acc,
        train_accuracy=train_acc,
        train_accuracy_examples=n_eval,
        final_train_loss=losses[-max(1, settings.steps // 10) :].mean(0),
        diverged=~np.all(np.isfinite(losses), axis=0),
        first_loss=losses[0],
        spectral_radius_init=radius_init,
        spectral_radius_final=spectral_radii(static, params),
        loss_curve_steps=(np.arange(curves.shape[0]) + 1) * curve_every,
        loss_curve=curves.T,
        seconds=time.perf_counter() - start,
        train_seconds=train_time,
    )
