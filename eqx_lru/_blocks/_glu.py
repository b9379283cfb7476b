r"""The gated linear unit, the feature-mixing layer of the deep LRU (§D.1)."""

from typing import Literal

import equinox as eqx
import jax
import jax.numpy as jnp
from beartype import beartype
from jaxtyping import Array, ArrayLike, Float, PRNGKeyArray, jaxtyped

from .._checks import Size, check_fits, check_key, check_size, float_dtype


class GLU(eqx.Module):
    r"""Gated linear unit over features (Dauphin et al. 2017), as the mixing layer of §D.1.

    - `variant="full"`: $\operatorname{GLU}(y) = (W_1 y + b_1) \odot \sigma(W_2 y + b_2)$
        (all LRA tasks but PathX);
    - `variant="half"`: $\operatorname{GLU}(y) = y \odot \sigma(W y + b)$, "without one
        additional linear transform" (PathX; S5's `half_glu1`).
    """

    linear: eqx.nn.Linear
    variant: Literal["full", "half"] = eqx.field(static=True)

    def __init__(
        self,
        d_model: Size,
        variant: Literal["full", "half"] = "full",
        dtype=None,
        *,
        key: PRNGKeyArray,
    ):
        """**Arguments:** `d_model` features in and out; `variant` `"full"` or `"half"`;
        `dtype` of the weights; `key`."""
        d_model = check_size("d_model", d_model)
        check_key(key)
        if variant not in ("full", "half"):
            raise ValueError(f"`glu` must be 'full' or 'half', got {variant!r}.")
        out = 2 * d_model if variant == "full" else d_model
        dtype = float_dtype(dtype)
        check_fits(f"GLU(d_model={d_model})", dtype, (d_model + 1) * out)
        self.linear = eqx.nn.Linear(d_model, out, dtype=dtype, key=key)
        self.variant = variant

    @jaxtyped(typechecker=beartype)
    def __call__(
        self, y: Float[ArrayLike, " d_model"], *, key: PRNGKeyArray | None = None
    ) -> Float[Array, " d_model"]:
        """One position, shape `(d_model,)`; batch over positions with `jax.vmap`."""
        del key
        y = jnp.asarray(y)
        z = self.linear(y)
        if self.variant == "full":
            value, gate = jnp.split(z, 2)
            return value * jax.nn.sigmoid(gate)
        return y * jax.nn.sigmoid(z)
