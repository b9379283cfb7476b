"""`eqx_lru.train_step` and `eqx_lru.predict` take `dt=` like every model call (issue 38):
their outputs, loss and update equal the model called per example with its row of time
steps, and the time steps change them (so they are not dropped on the way)."""

from typing import cast

import builders
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import eqx_lru

BATCH, LENGTH = 3, 7


def _loss_fn(outputs, y):
    return jnp.mean((outputs - y) ** 2)


def _setup():
    model, state = builders.model("complex", pooling="mean", depth=1)
    x = jnp.asarray(builders.normal(BATCH, LENGTH, builders.IN, seed=1))
    y = jnp.asarray(builders.normal(BATCH, builders.OUT, seed=2))
    return model, state, x, y


_DT = {
    "per_example": builders.uniform(BATCH, low=0.3, high=2.0, seed=3),
    "per_position": builders.uniform(BATCH, LENGTH, low=0.3, high=2.0, seed=4),
}


@eqx.filter_jit
def _by_hand(model, state, x, dt, *, key=None, inference):
    keys = [None] * BATCH if key is None else list(jax.random.split(key, BATCH))
    outputs, new_state = jax.vmap(
        lambda x, dt, k: model(x, state, dt=dt, key=k, inference=inference),
        axis_name="batch",
        out_axes=(0, None),
    )(x, jnp.asarray(dt), None if key is None else jnp.stack(cast(list[jax.Array], keys)))
    return outputs, new_state


@pytest.mark.parametrize("kind", sorted(_DT))
def test_predict_and_train_step_pass_dt_to_the_model(kind):
    model, state, x, y = _setup()
    dt = jnp.asarray(_DT[kind])
    got = eqx_lru.predict(model, state, x, dt=dt)
    want, _ = _by_hand(model, state, x, dt, inference=True)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    assert not np.allclose(got, eqx_lru.predict(model, state, x), atol=1e-4), "dt ignored"

    optimizer = optax.sgd(0.1)
    opt_state = optimizer.init(eqx.filter(model, eqx.is_inexact_array))
    key = jax.random.PRNGKey(5)
    new_model, _, _, loss = eqx_lru.train_step(
        model, state, opt_state, x, y, dt=dt, key=key, optimizer=optimizer, loss_fn=_loss_fn
    )

    def loss_by_hand(model):
        outputs, _ = _by_hand(model, state, x, dt, key=key, inference=False)
        return _loss_fn(outputs, y)

    value, grads = eqx.filter_jit(eqx.filter_value_and_grad(loss_by_hand))(model)
    np.testing.assert_allclose(loss, value, rtol=1e-6)
    expected = eqx.apply_updates(model, jax.tree.map(lambda g: -0.1 * g, grads))
    for a, b in zip(
        jax.tree.leaves(eqx.filter(new_model, eqx.is_inexact_array)),
        jax.tree.leaves(eqx.filter(expected, eqx.is_inexact_array)),
        strict=True,
    ):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
