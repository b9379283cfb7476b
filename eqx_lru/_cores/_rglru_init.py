r"""Initialisation of the RG-LRU (Griffin, De et al. 2024), as pure functions of a key.

- $\Lambda$: $a = \sigma(\Lambda)$ uniform in area on the ring $r_\min \le a \le r_\max$
    ($a^2 \sim U[r_\min^2, r_\max^2]$), i.e. $\Lambda = \operatorname{logit}(a)$; Griffin
    and recurrentgemma use $[0.9, 0.999]$.
- $\theta$ (the phases of the complex variant): uniform on $[0, \text{max_phase}]$
    (recurrentgemma: $[0, 0.1\pi]$).
- The gates' block-diagonal weights: normal with variance $1/H$ ($H$ = `d_model`, the
    fan-in recurrentgemma's initialiser computes for its `(heads, H/heads, out/heads)`
    kernels), biases zero.
- Hawk's dense layers with `init="recurrentgemma"` (`lecun_linear`): normal weights of
    variance $\text{scale}/\text{fan_in}$, biases zero.
"""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, PRNGKeyArray

from .._checks import _check_number, float_dtype


def check_in_dtype(name: str, value: float, dtype, what: str = "") -> None:
    """A `ValueError` naming `name` unless the non-zero `value` (`what`: the quantity
    derived from the argument, if not the argument itself) is a finite normal number of
    `dtype` (default JAX's float): finite as a Python number, it would otherwise overflow
    to infinity or underflow to zero once stored."""
    info = jnp.finfo(float_dtype(dtype))
    if value != 0 and not float(info.tiny) <= abs(value) <= float(info.max):
        raise ValueError(
            f"`{name}` gives {what or name} = {value:.3g}, outside the finite normal "
            f"{info.dtype.name} numbers ({float(info.tiny):.3g} to {float(info.max):.3g} in "
            "magnitude): it would overflow to inf or underflow to 0 once used. Choose a "
            f"value within that range, or a wider `dtype`."
        )


def check_rglru_ring(r_min: float, r_max: float, max_phase: float, c: float, dtype=None) -> None:
    r"""A `ValueError` naming the argument unless `0 < r_min <= r_max < 1`, `max_phase >= 0`
    and `c > 0` (all finite), and all of them stay so in `dtype`: `r_max**2` below 1 and
    `r_min**2` a normal number there (the ring is sampled in $a^2$; $a$ = 0 or 1 would be
    $\Lambda = \mp\infty$), `max_phase` and `c` finite and normal."""
    for name, value in (("r_min", r_min), ("r_max", r_max), ("max_phase", max_phase), ("c", c)):
        if not math.isfinite(_check_number(name, value)):
            raise ValueError(f"`{name}` must be a finite number, got {value}.")
    if not 0 < r_min <= r_max < 1:
        raise ValueError(
            "The RG-LRU's ring needs 0 < r_min <= r_max < 1 (a = sigmoid(Lambda) lies strictly "
            f"inside the unit interval); got r_min={r_min}, r_max={r_max}."
        )
    if max_phase < 0:
        raise ValueError(f"`max_phase` must be >= 0, got {max_phase}.")
    if c <= 0:
        raise ValueError(f"`c` (the gate's exponent scale, 8 in Griffin) must be > 0, got {c}.")
    dtype = float_dtype(dtype)
    if not np.asarray(r_max**2, dtype) < 1:
        raise ValueError(
            f"`r_max`={r_max} rounds to a = 1 in {dtype.name} (r_max**2 is 1 there), which "
            "is Lambda = +inf; use a smaller r_max or a wider `dtype`."
        )
    check_in_dtype("r_min", r_min**2, dtype, "r_min**2 (the ring is sampled in a^2)")
    check_in_dtype("max_phase", max_phase, dtype)
    check_in_dtype("c", c, dtype)


def rglru_lambda_init(
    modes: int, *, r_min: float, r_max: float, dtype, key: PRNGKeyArray
) -> Float[Array, " modes"]:
    r"""$\Lambda = \operatorname{logit}(a)$ with $a^2 \sim U[r_\min^2, r_\max^2]$."""
    u = jax.random.uniform(key, (modes,), dtype)
    a = jnp.sqrt(u * (r_max**2 - r_min**2) + r_min**2)
    return jnp.log(a) - jnp.log1p(-a)


def block_diagonal_init(
    d_model: int, width: int, heads: int, *, dtype, key: PRNGKeyArray
) -> tuple[Float[Array, "heads block_in block_out"], Float[Array, "heads block_out"]]:
    r"""One gate's weights `(heads, d_model/heads, width/heads)`, normal of variance
    $1/H$, and its zero biases `(heads, width/heads)`."""
    shape = (heads, d_model // heads, width // heads)
    weight = jax.random.normal(key, shape, dtype) * math.sqrt(1.0 / d_model)
    return weight, jnp.zeros(shape[::2], dtype)


def check_lecun_scale(name: str, scale: float, fan_in: int, dtype) -> None:
    r"""A `ValueError` naming `name` unless recurrentgemma's weight spread
    $\sqrt{\text{scale}/\text{fan_in}}$ is a finite normal number of `dtype`."""
    check_in_dtype(
        name, math.sqrt(scale / fan_in), dtype, f"the weights' std sqrt({name}/{fan_in})"
    )


def lecun_linear(
    d_in: int, d_out: int, *, scale: float = 1.0, fan_in: int | None = None, dtype, key
) -> eqx.nn.Linear:
    r"""An `eqx.nn.Linear(d_in, d_out)` with recurrentgemma's dense initialisation: weights
    $\mathcal N(0, \text{scale}/\text{fan_in})$ (`fan_in` default `d_in`), biases zero."""
    shape_key, weight_key = jax.random.split(key)
    linear = eqx.nn.Linear(d_in, d_out, dtype=dtype, key=shape_key)
    std = math.sqrt(scale / (d_in if fan_in is None else fan_in))
    weight = std * jax.random.normal(weight_key, linear.weight.shape, linear.weight.dtype)
    bias = jnp.zeros(d_out, linear.weight.dtype)
    return eqx.tree_at(lambda m: (m.weight, m.bias), linear, (weight, bias))
