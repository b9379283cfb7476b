r"""A batched training step and batched inference for stateful, one-example-per-call models.

The same code as the README's "Compose LRUBlock in functional JAX" section, packaged: any
model called as `model(x, state, *, length=None, key=None, inference=None) -> (out, state)`
(`LRUModel`, `LRURetrievalModel`, your own composition of `LRUBlock`s) works; with `dt=`,
the model is also called with `dt=` (the time steps of each example, as every model call
takes them).
"""

from collections.abc import Callable, Hashable
from typing import Any

import equinox as eqx
import jax
from jaxtyping import Array, Float, Int, PRNGKeyArray, PyTree


def _batched(model, state, axis_name, inference, dt):
    """`model` over the batch: `(x, length, keys) -> (outputs, state)`, each example with
    its row of `dt` when `dt` is given (`dt=` is passed only then, so models that take no
    time steps still work)."""

    def one(x, length, key, dt):
        steps = {} if dt is None else {"dt": dt}
        return model(x, state, length=length, key=key, inference=inference, **steps)

    batched = jax.vmap(one, axis_name=axis_name, out_axes=(0, None))
    return lambda x, length, keys: batched(x, length, keys, dt)


@eqx.filter_jit
def train_step(
    model: PyTree,
    state: eqx.nn.State,
    opt_state: PyTree,
    x: Array,
    y: PyTree,
    *,
    length: Int[Array, " batch"] | None = None,
    dt: Float[Array, " batch"] | Float[Array, "batch length"] | None = None,
    key: PRNGKeyArray,
    optimizer: Any,
    loss_fn: Callable[[Array, PyTree], Float[Array, ""]],
    axis_name: Hashable = "batch",
) -> tuple[PyTree, eqx.nn.State, PyTree, Float[Array, ""]]:
    r"""One optimiser step on one batch, in training mode (batch statistics, dropout).

    Differentiates `loss_fn(outputs, y)` where `outputs` stacks `model(x[b], state,
    length=length[b], key=keys[b])` over the batch (`jax.vmap` with `axis_name`, so batch
    norm sees the whole batch); `keys = jax.random.split(key, batch)`, one fresh dropout key
    per example. Jitted with `eqx.filter_jit`; `optimizer` and `loss_fn` are static, so
    create them once, not per step.

    **Arguments:**

    - `model`, `state`, `opt_state`: the model, its `eqx.nn.State`, and
        `optimizer.init(eqx.filter(model, eqx.is_inexact_array))`.
    - `x`: the inputs, batch first.
    - `y`: the targets, passed to `loss_fn` as is.
    - `length`: valid lengths, shape `(batch,)`, or `None`.
    - `dt`: the time steps, one per example `(batch,)` or per position
        `(batch, length)`, passed to the model as `dt=` (see the time-steps concepts
        page), or `None` (every step 1; the model is called without `dt`).
    - `key`: a fresh key per step (split it off your loop key; never reuse it).
    - `optimizer`: an `optax.GradientTransformation`, e.g. `eqx_lru.lru_optimizer(...)`.
    - `loss_fn`: `loss_fn(outputs, y) -> scalar`, e.g. the mean cross-entropy.
    - `axis_name`: the batch-norm axis name of the model.

    **Returns:** `(model, state, opt_state, loss)`, all updated; `loss` is before the update.
    """
    keys = jax.random.split(key, x.shape[0])

    def loss(model):
        outputs, new_state = _batched(model, state, axis_name, False, dt)(x, length, keys)
        return loss_fn(outputs, y), new_state

    (value, state), grads = eqx.filter_value_and_grad(loss, has_aux=True)(model)
    params = eqx.filter(model, eqx.is_inexact_array)
    # optax mixes Python floats with int32 step counts, which JAX's opt-in strict dtype
    # promotion rejects; trace the update with standard promotion so either setting works.
    with jax.numpy_dtype_promotion("standard"):
        updates, opt_state = optimizer.update(grads, opt_state, params)
    model = eqx.apply_updates(model, updates)
    return model, state, opt_state, value


@eqx.filter_jit
def predict(
    model: PyTree,
    state: eqx.nn.State,
    x: Array,
    *,
    length: Int[Array, " batch"] | None = None,
    dt: Float[Array, " batch"] | Float[Array, "batch length"] | None = None,
    axis_name: Hashable = "batch",
) -> PyTree:
    """Batched outputs in inference mode (running statistics, no dropout, state unchanged).

    **Arguments:** as `train_step`. **Returns:** the outputs stacked over the batch.
    """
    outputs, _ = _batched(model, state, axis_name, True, dt)(x, length, None)
    return outputs
