r"""Batch normalisation of padded sequences: statistics over the batch and the valid
positions only."""

import dataclasses
from collections.abc import Hashable, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
from beartype import beartype
from jaxtyping import Array, ArrayLike, Bool, Float, PRNGKeyArray, jaxtyped

from .._checks import Size, check_float, check_size
from .._padding import where_valid


class MaskedBatchNorm(eqx.Module):
    r"""Batch normalisation of sequences, with statistics over the batch *and* the valid
    positions only.

    Per channel, in training mode,

    $$\mu = \frac{\sum_{b}\sum_{t < \ell_b} x_{bt}}{\sum_b \ell_b},\qquad
    \sigma^2 = \frac{\sum_{b}\sum_{t < \ell_b} (x_{bt} - \mu)^2}{\sum_b \ell_b},\qquad
    y = \frac{x - \mu}{\sqrt{\sigma^2 + \varepsilon}}\, w + \beta,$$

    where $\ell_b$ is the valid length of example $b$ and the sums over $b$ are `psum`s
    over the `jax.vmap` axis `axis_name` — so padded positions never affect the statistics,
    and a batch of padded sequences is normalised exactly like the same sequences unpadded.
    The running statistics are exponential moving averages of $(\mu, \sigma^2)$ with
    `momentum`, bias-corrected by $1 - \text{momentum}^{\text{steps}}$ (so they are the
    plain average of the batches seen so far early in training; `steps` counts the
    training batches, saturating at $2^{31} - 1$); inference mode uses them
    and leaves the state unchanged.

    Like `eqx.nn.BatchNorm`: create with `eqx.nn.make_with_state`, call inside
    `jax.vmap(..., axis_name=axis_name)` in training mode, pass the returned state on.
    """

    weight: Float[Array, " input_size"]
    bias: Float[Array, " input_size"]
    state_index: eqx.nn.StateIndex
    inference: bool
    input_size: int = eqx.field(static=True)
    axis_name: Hashable | tuple[Hashable, ...] = eqx.field(static=True)
    eps: float = eqx.field(static=True)
    momentum: float = eqx.field(static=True)

    def __init__(
        self,
        input_size: Size,
        axis_name: Hashable | Sequence[Hashable] = "batch",
        *,
        eps: float = 1e-5,
        momentum: float = 0.9,
        inference: bool = False,
        dtype=None,
    ):
        """**Arguments:**

        - `input_size`: the number of channels (last axis of the input).
        - `axis_name`: the name (or names) of the `jax.vmap` batch axis to take statistics
            over in training mode.
        - `eps`: added to the variance.
        - `momentum`: decay of the running statistics, in $[0, 1)$.
        - `inference`: default mode; toggle with `eqx.nn.inference_mode` or the call's
            `inference=`.
        - `dtype`: of the weight, bias and running statistics (default: JAX's default float).
        """
        input_size = check_size("input_size", input_size)
        dtype = jnp.zeros((), dtype).dtype
        check_float("momentum", momentum, low=0, high=1, high_open=True, owner="MaskedBatchNorm")
        # Added to the variance in `dtype`: a positive eps that underflows there is zero.
        check_float("eps", eps, low=0, low_open=True, dtype=dtype, owner="MaskedBatchNorm")
        self.weight = jnp.ones(input_size, dtype)
        self.bias = jnp.zeros(input_size, dtype)
        # (steps, EMA of the mean, EMA of the variance), EMAs started at zero and
        # bias-corrected when read.
        self.state_index = eqx.nn.StateIndex(
            (jnp.array(0, jnp.int32), jnp.zeros(input_size, dtype), jnp.zeros(input_size, dtype))
        )
        self.inference = inference
        self.input_size = input_size
        self.axis_name = _axis_names(axis_name)
        self.eps = eps
        self.momentum = momentum

    def with_axis_name(self, axis_name: Hashable | Sequence[Hashable]) -> "MaskedBatchNorm":
        """The same norm (parameters, state index, options) reducing over `axis_name`
        instead: e.g. to add the pair axis of `LRURetrievalModel`."""
        new = object.__new__(type(self))
        for field in dataclasses.fields(self):
            object.__setattr__(new, field.name, getattr(self, field.name))
        object.__setattr__(new, "axis_name", _axis_names(axis_name))
        return new

    def running_stats(
        self, state: eqx.nn.State
    ) -> tuple[Float[Array, " input_size"], Float[Array, " input_size"]]:
        """The bias-corrected running `(mean, variance)`; `(0, 1)` before any training step."""
        steps, mean_ema, var_ema = state.get(self.state_index)
        dtype = mean_ema.dtype
        seen = steps > 0
        correction = 1 - jnp.asarray(self.momentum, dtype) ** steps.astype(dtype)
        correction = jnp.where(seen, correction, jnp.ones((), dtype))
        mean = jnp.where(seen, mean_ema / correction, jnp.zeros((), dtype))
        var = jnp.where(seen, var_ema / correction, jnp.ones((), dtype))
        return mean, var

    def _psum(self, x: Array) -> Array:
        try:
            return jax.lax.psum(x, self.axis_name)
        except NameError as e:
            raise NameError(
                "Batch norm in training mode takes statistics over the batch: call the "
                "model inside `jax.vmap(..., axis_name=...)` binding the axis name(s) "
                f"{self.axis_name!r} (with `out_axes=(0, None)` for `(output, state)`), or "
                "use inference mode, or `norm='layer'`."
            ) from e

    @jaxtyped(typechecker=beartype)
    def __call__(
        self,
        x: Float[ArrayLike, "length input_size"],
        state: eqx.nn.State,
        *,
        mask: Bool[Array, " length"] | None = None,
        key: PRNGKeyArray | None = None,
        inference: bool | None = None,
    ) -> tuple[Float[Array, "length input_size"], eqx.nn.State]:
        """**Arguments:**

        - `x`: one sequence, shape `(length, input_size)`.
        - `state`: the `eqx.nn.State` holding the running statistics.
        - `mask`: `True` at valid positions; `None` means all valid. Only valid positions
            enter the statistics. Outputs at masked positions are computed but meaningless.
        - `key`: ignored.
        - `inference`: overrides `self.inference` if not `None`.

        **Returns:** `(y, new_state)`; in inference mode `new_state` is `state`.
        """
        del key
        x = jnp.asarray(x)
        if inference is None:
            inference = self.inference
        if inference:
            mean, var = self.running_stats(state)
        else:
            if mask is None:
                count = jnp.asarray(x.shape[0], x.dtype)
            else:
                count = jnp.sum(mask, dtype=x.dtype)
            count = self._psum(count)
            mean = self._psum(jnp.sum(where_valid(mask, x), axis=0)) / count
            var = self._psum(jnp.sum(where_valid(mask, (x - mean) ** 2), axis=0)) / count
            steps, mean_ema, var_ema = state.get(self.state_index)
            m = jnp.asarray(self.momentum, mean_ema.dtype)
            new = (
                # Saturates at int32's largest, never wraps (the correction is 1 by then).
                steps + (steps < jnp.iinfo(steps.dtype).max).astype(steps.dtype),
                m * mean_ema + (1 - m) * jax.lax.stop_gradient(mean).astype(mean_ema.dtype),
                m * var_ema + (1 - m) * jax.lax.stop_gradient(var).astype(var_ema.dtype),
            )
            state = state.set(self.state_index, new)
        scale = self.weight * jax.lax.rsqrt(var.astype(x.dtype) + self.eps)
        return (x - mean.astype(x.dtype)) * scale + self.bias, state


def _axis_names(axis_name: Hashable | Sequence[Hashable]) -> Hashable | tuple[Hashable, ...]:
    """One axis name, or several as a tuple (hashable: it is a static field)."""
    if not isinstance(axis_name, str) and isinstance(axis_name, Sequence):
        return tuple(axis_name)
    return axis_name


def with_sequence_axis(norm, axis: Hashable | None):
    """`norm`, a `MaskedBatchNorm`, also reducing over `axis` (any other norm unchanged)."""
    if axis is None or not isinstance(norm, MaskedBatchNorm):
        return norm
    names = norm.axis_name if isinstance(norm.axis_name, tuple) else (norm.axis_name,)
    return norm if axis in names else norm.with_axis_name((*names, axis))
