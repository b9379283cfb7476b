"""The recall task of the learning tests: a cue token (one of `CLASSES`) somewhere in the
first `cue_within` positions, noise tokens elsewhere, the class read at the last position
(chance 1 / `CLASSES`); and a model trained on it with the library's optimiser (§D.2),
`train_step` and `predict`."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

import eqx_lru

CLASSES, NOISE = 4, 4
VOCAB = CLASSES + NOISE


def recall_batch(rng, n: int, length: int, cue_within: int):
    """`n` sequences of `length` tokens and their classes."""
    x = rng.integers(CLASSES, CLASSES + NOISE, (n, length))
    y = rng.integers(0, CLASSES, n)
    x[np.arange(n), rng.integers(0, cue_within, n)] = y
    return jnp.asarray(x, jnp.int32), jnp.asarray(y, jnp.int32)


def _cross_entropy(logits, labels):
    return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits, labels))


def train_on_recall(model, state, key, *, length, cue_within, steps=150, batch=32):
    """`(losses, accuracy)`: `model` trained for `steps` batches (learning rate 1e-2, weight
    decay 0.05), its accuracy on 512 fresh sequences."""
    rng = np.random.default_rng(0)
    optim = eqx_lru.lru_optimizer(
        learning_rate=1e-2, total_steps=steps, lr_factor=1.0, weight_decay=0.05
    )
    opt_state = optim.init(eqx.filter(model, eqx.is_inexact_array))
    losses = []
    for _ in range(steps):
        x, y = recall_batch(rng, batch, length, cue_within)
        key, step_key = jax.random.split(key)
        model, state, opt_state, loss = eqx_lru.train_step(
            model, state, opt_state, x, y, key=step_key, optimizer=optim, loss_fn=_cross_entropy
        )
        losses.append(float(loss))
    x_test, y_test = recall_batch(np.random.default_rng(1), 512, length, cue_within)
    logits = eqx_lru.predict(model, state, x_test)
    return losses, float(jnp.mean(jnp.argmax(logits, axis=-1) == y_test))
