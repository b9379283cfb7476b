"""Checks and small helpers shared by the baseline cores."""

import math
from typing import Any

import jax.numpy as jnp
from jaxtyping import Array

from .._init import check_size, float_dtype

try:  # the scan-method objects of the split scan (`eqx_lru.scan_method`), when present
    from .. import scan_method as _scan_method  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - depends on the scan version
    _scan_method = None

_METHOD_STRINGS = ("auto", "associative", "sequential")

__all__ = ["check_size", "float_dtype"]


def resolve_method(method: Any) -> Any:
    """`method` as `eqx_lru.linear_recurrence` takes it: a string shortcut or a method
    object, validated (resolved to an object where the scan provides `scan_method`)."""
    if _scan_method is not None:
        return _scan_method(method)
    if not isinstance(method, str) or method not in _METHOD_STRINGS:
        raise ValueError(f"`method` must be one of {_METHOD_STRINGS}, got {method!r}.")
    return method


def check_even_state(d_state: int, per: int = 1, what: str = "") -> None:
    """`d_state` counts real state dimensions of a conjugate-symmetric system: it must be a
    positive multiple of `2 * per` (each kept complex mode stands for a conjugate pair)."""
    check_size("d_state", d_state)
    if d_state % (2 * per):
        raise ValueError(
            f"`d_state` must be a multiple of {2 * per}{what}: it is the size N of the real "
            f"state, of which N/2 complex modes are kept (conjugate symmetry); got {d_state}."
        )


def check_steps(dt_min: float, dt_max: float) -> None:
    for name, value in (("dt_min", dt_min), ("dt_max", dt_max)):
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"`{name}` must be a finite step size > 0, got {value}.")
    if dt_min > dt_max:
        raise ValueError(f"`dt_min` must be <= `dt_max`, got {dt_min} > {dt_max}.")


def check_sequence(u: Array, d_model: int, dtype) -> None:
    if u.ndim != 2 or u.shape[1] != d_model or u.shape[0] == 0:
        raise ValueError(
            f"`u` must have shape (length, d_model) with length >= 1 and d_model={d_model}; "
            f"got shape {u.shape}. Batch with `jax.vmap`: a core acts on one sequence."
        )
    if u.dtype != dtype:
        raise ValueError(
            f"`u` must have the parameters' dtype {dtype}; got {u.dtype}. Cast the input "
            "(or build the core with `dtype=`)."
        )


def check_state(state: Array, expected: Array, name: str = "state") -> None:
    if state.shape != expected.shape or state.dtype != expected.dtype:
        raise ValueError(
            f"`{name}` must have shape {expected.shape} and dtype {expected.dtype} (see "
            f"`init_state()`); got shape {state.shape}, dtype {state.dtype}."
        )


def complex_dtype(real_dtype) -> jnp.dtype:
    return jnp.dtype(jnp.complex128 if real_dtype == jnp.float64 else jnp.complex64)


Pair = tuple[Array, Array]


def zoh_pairs(a_re: Array, a_im: Array, dt: Array) -> tuple[Pair, Pair]:
    r"""Zero-order hold of $\dot x = \lambda x + b u$ over one step $\Delta$ per mode, in
    real arithmetic on (real, imaginary) pairs: $\bar\lambda = e^{\lambda\Delta}$ and the
    input factor $(e^{\lambda\Delta} - 1)/\lambda$, with
    $\operatorname{Re}(e^{\lambda\Delta}) - 1 = \operatorname{expm1}(p)\cos q - 2\sin^2(q/2)$
    ($p + iq = \lambda\Delta$) to keep small steps accurate."""
    p, q = a_re * dt, a_im * dt
    lam_re, lam_im = jnp.exp(p) * jnp.cos(q), jnp.exp(p) * jnp.sin(q)
    x = jnp.expm1(p) * jnp.cos(q) - 2 * jnp.sin(q / 2) ** 2  # Re(e^{λΔ}) - 1
    den = a_re * a_re + a_im * a_im
    return (lam_re, lam_im), ((x * a_re + lam_im * a_im) / den, (lam_im * a_re - x * a_im) / den)


def cmul(x: tuple[Array, Array], y: tuple[Array, Array]) -> tuple[Array, Array]:
    """Complex product on (real, imaginary) pairs."""
    return x[0] * y[0] - x[1] * y[1], x[0] * y[1] + x[1] * y[0]


FORMS = ("complex", "real")


def check_form(form: str) -> None:
    if form not in FORMS:
        raise ValueError(
            f"`form` must be 'complex' (complex Diagonal scan) or 'real' (the same recurrence "
            f"as 2x2 rotation-scaling blocks, real arithmetic only); got {form!r}."
        )
