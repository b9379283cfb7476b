r"""`GatedMLP`: the channel-mixing layer of Griffin and Hawk (De et al. 2024)."""

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, PRNGKeyArray

from .._checks import Size, _check_number, check_key, check_size
from .._cores._rglru_init import check_lecun_scale, lecun_linear


class GatedMLP(eqx.Module):
    r"""A GELU-gated MLP over features, one position at a time:

    $$\operatorname{MLP}(z) = W_d \big(\operatorname{GELU}(W_g z + b_g) \odot
    (W_v z + b_v)\big) + b_d,$$

    $W_g, W_v \in \mathbb R^{E \times H}$ (one `up` layer of $2E$ outputs, gate first),
    $W_d \in \mathbb R^{H \times E}$.

    **Initialisation.** `init="equinox"`: `eqx.nn.Linear`'s (uniform weights and biases).
    `init="recurrentgemma"`: zero biases, $W_g, W_v \sim \mathcal N(0, 1/(2H))$ (the
    fan-in recurrentgemma's initialiser computes for its stacked `(2, H, E)` kernel) and
    $W_d \sim \mathcal N(0, s/E)$, $s$ = `final_scale`.
    """

    up: eqx.nn.Linear
    down: eqx.nn.Linear

    def __init__(
        self,
        d_model: Size,
        width: Size,
        *,
        init: str = "equinox",
        final_scale: float = 1.0,
        dtype=None,
        key: PRNGKeyArray,
    ):
        """**Arguments:** `d_model` ($H$, features in and out), `width` ($E$, the hidden
        features), `init` and `final_scale` (see above), `dtype` of the weights, `key`."""
        d_model, width = check_size("d_model", d_model), check_size("mlp_width", width)
        check_key(key)
        if init not in ("equinox", "recurrentgemma"):
            raise ValueError(f"`init` must be 'equinox' or 'recurrentgemma', got {init!r}.")
        final_scale = _check_number("final_scale", final_scale)
        if not 0 < final_scale < float("inf"):
            raise ValueError(f"`final_scale` must be a positive finite number, got {final_scale}.")
        if init == "recurrentgemma":
            check_lecun_scale("final_scale", final_scale, width, dtype)
        up_key, down_key = jax.random.split(key)
        if init == "recurrentgemma":
            fan = 2 * d_model
            self.up = lecun_linear(d_model, 2 * width, fan_in=fan, dtype=dtype, key=up_key)
            self.down = lecun_linear(width, d_model, scale=final_scale, dtype=dtype, key=down_key)
        else:
            self.up = eqx.nn.Linear(d_model, 2 * width, dtype=dtype, key=up_key)
            self.down = eqx.nn.Linear(width, d_model, dtype=dtype, key=down_key)

    def __call__(self, z: Float[Array, " d_model"]) -> Float[Array, " d_model"]:
        """One position, `(d_model,)`; batch over positions with `jax.vmap`."""
        gate, value = jnp.split(self.up(z), 2)
        return self.down(jax.nn.gelu(gate) * value)
