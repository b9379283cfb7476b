"""Learning a long-range task end to end, in both forms, with the library's own model,
optimiser (§D.2), `train_step` and `predict`.

The task is long-delay recall (Hochreiter & Schmidhuber 1997, Experiment 2): a sequence of
256 tokens holds one cue token (one of 4 classes) somewhere in its first 16 positions and
random noise tokens everywhere else; the class of the cue must be read at the *last*
position, at least 240 steps later. Chance accuracy is 25%, chance cross-entropy
ln 4 ≈ 1.39. A model that cannot carry information across the whole sequence (a vanishing
recurrence, broken gradients through the scan, a wrong pooling index) stays at chance.

(The adding problem at this length was also tried: the LRU learns it, but needs thousands
of steps on CPU, too slow for the test suite.)
"""

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import eqx_lru

LENGTH, CLASSES, NOISE, CUE_WITHIN = 256, 4, 4, 16
STEPS, BATCH = 300, 32
FORMS = {"complex": eqx_lru.ComplexLRU, "real": eqx_lru.RealLRU}


def _recall_batch(rng, n):
    x = rng.integers(CLASSES, CLASSES + NOISE, (n, LENGTH))
    y = rng.integers(0, CLASSES, n)
    x[np.arange(n), rng.integers(0, CUE_WITHIN, n)] = y
    return jnp.asarray(x, jnp.int32), jnp.asarray(y, jnp.int32)


def _cross_entropy(logits, labels):
    return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits, labels))


@pytest.mark.slow
@pytest.mark.parametrize("form", ["complex", "real"])
def test_long_delay_recall(form):
    rng = np.random.default_rng(0)
    model_key, key = jax.random.split(jax.random.PRNGKey(0))
    model, state = eqx.nn.make_with_state(eqx_lru.LRUModel)(
        CLASSES + NOISE,
        CLASSES,
        16,
        16,
        2,
        encoder="embedding",
        pooling="last",
        key=model_key,
        block=functools.partial(
            eqx_lru.LRUBlock,
            core=functools.partial(FORMS[form], r_min=0.9, r_max=0.999, max_phase=0.1),
        ),
    )
    optim = eqx_lru.lru_optimizer(
        learning_rate=3e-3, total_steps=STEPS, lr_factor=1.0, weight_decay=0.05
    )
    opt_state = optim.init(eqx.filter(model, eqx.is_inexact_array))
    losses = []
    for _ in range(STEPS):
        x, y = _recall_batch(rng, BATCH)
        key, step_key = jax.random.split(key)
        model, state, opt_state, loss = eqx_lru.train_step(
            model,
            state,
            opt_state,
            x,
            y,
            key=step_key,
            optimizer=optim,
            loss_fn=_cross_entropy,
        )
        losses.append(float(loss))
    x_test, y_test = _recall_batch(np.random.default_rng(1), 512)
    logits = eqx_lru.predict(model, state, x_test)  # inference mode: running statistics
    accuracy = float(jnp.mean(jnp.argmax(logits, axis=-1) == y_test))
    test_loss = float(_cross_entropy(logits, y_test))
    assert np.mean(losses[:10]) > 1.2  # started at chance
    assert accuracy > 0.9, (accuracy, test_loss, losses[::25])
    assert test_loss < 0.4, (accuracy, test_loss)
