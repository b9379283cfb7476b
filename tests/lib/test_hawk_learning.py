"""A Hawk model (`LRUModel` of two `HawkBlock`s, RG-LRU cores) learns recall with the
library's optimiser (§D.2), `train_step` and `predict`: a cue token (one of 4 classes) in
the first 8 of 32 positions, noise tokens elsewhere, the class read at the last position
(chance 25%)."""

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import eqx_lru

LENGTH, CLASSES, NOISE, CUE_WITHIN = 32, 4, 4, 8
STEPS, BATCH = 150, 32


def _recall_batch(rng, n):
    x = rng.integers(CLASSES, CLASSES + NOISE, (n, LENGTH))
    y = rng.integers(0, CLASSES, n)
    x[np.arange(n), rng.integers(0, CUE_WITHIN, n)] = y
    return jnp.asarray(x, jnp.int32), jnp.asarray(y, jnp.int32)


def _cross_entropy(logits, labels):
    return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits, labels))


@pytest.mark.slow
def test_hawk_recall():
    rng = np.random.default_rng(0)
    model_key, key = jax.random.split(jax.random.PRNGKey(0))
    core = functools.partial(eqx_lru.RGLRU, r_min=0.99, r_max=0.9999)
    model, state = eqx.nn.make_with_state(eqx_lru.LRUModel)(
        CLASSES + NOISE, CLASSES, 16, 16, 2, encoder="embedding", pooling="last",
        block=functools.partial(eqx_lru.HawkBlock, core=core), key=model_key,
    )  # fmt: skip
    optim = eqx_lru.lru_optimizer(
        learning_rate=1e-2, total_steps=STEPS, lr_factor=1.0, weight_decay=0.05
    )
    opt_state = optim.init(eqx.filter(model, eqx.is_inexact_array))
    losses = []
    for _ in range(STEPS):
        x, y = _recall_batch(rng, BATCH)
        key, step_key = jax.random.split(key)
        model, state, opt_state, loss = eqx_lru.train_step(
            model, state, opt_state, x, y, key=step_key, optimizer=optim, loss_fn=_cross_entropy
        )
        losses.append(float(loss))
    x_test, y_test = _recall_batch(np.random.default_rng(1), 512)
    logits = eqx_lru.predict(model, state, x_test)
    accuracy = float(jnp.mean(jnp.argmax(logits, axis=-1) == y_test))
    assert np.mean(losses[:10]) > 1.2  # started at chance
    assert accuracy > 0.9, (accuracy, losses[::25])
