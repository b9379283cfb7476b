r"""The RG-LRU's per-position terms, its transitions $a_t$ and drives $g_t\, i_t x_t$, in
log space, for both eigenvalue signs (`eqx_lru.RGLRU`'s `eigenvalues=`); and the check of
its states.

With $\ell_t = c\, r_t\, \Delta t_t \log\sigma(\Lambda) \le 0$ (`jax.nn.log_sigmoid`, so
$\sigma(\Lambda)$ near 0 or 1 loses nothing):

- `"positive"` (Griffin's): $|a_t| = e^{\ell_t} \in (0, 1]$, and the normalisation
    $\sqrt{1 - |a_t|^2} = \sqrt{-\operatorname{expm1}(2\ell_t)}$.
- `"signed"`: $a_t = 2 e^{\ell_t} - 1 = 1 + 2\operatorname{expm1}(\ell_t) \in (-1, 1]$
    (negative eigenvalues, which a linear RNN needs for parity; Grazzi et al. 2025). The
    normalisation factors as $1 - a_t^2 = (1 - a_t)(1 + a_t) = (-2\operatorname{expm1}
    (\ell_t))(2 e^{\ell_t})$, so
    $$\sqrt{1 - a_t^2} = 2\, e^{\ell_t/2} \sqrt{-\operatorname{expm1}(\ell_t)},$$
    with no cancellation at either end: near $a_t = 1$ ($\ell_t \to 0$) `expm1` keeps
    $-\ell_t$'s digits, near $a_t = -1$ ($\ell_t \to -\infty$) $e^{\ell_t/2}$ does.

In floating point a gate $r_t$ that underflows to 0 gives $a_t = 1$ exactly (the identity,
gain 0) and, for `"signed"`, $e^{\ell_t}$ below the precision gives $a_t = -1$ exactly
(with a gain that is small but exact): $|a_t| \le 1$ always, so the state stays bounded.
With a phase (the complex counterpart) $a_t$ above is the signed modulus, times
$e^{i\theta r_t \Delta t_t}$.
"""

import functools

import jax
import jax.numpy as jnp
from jaxtyping import Array

from .._checks import check_state
from ._discretization import hold_weight, hold_weight_real

#: The largest derivative of the normalisation's square root (recurrentgemma's bound):
#: its backward pass reads $\max(x, 1/(4 \cdot 1000^2))$, so an $a_t$ within $2.5 \cdot
#: 10^{-7}$ of 1 cannot blow the gradient up.
SQRT_MAX_GRADIENT = 1000.0


@functools.partial(jax.custom_jvp, nondiff_argnums=(1,))
def bounded_sqrt(x: Array, max_gradient: float) -> Array:
    r"""$\sqrt x$, with a derivative at most `max_gradient` (computed at
    $\max(x, 1/(4 \cdot \text{max_gradient}^2))$). A custom JVP, linear in the tangent,
    so forward mode (`jax.jvp`, `jax.jacfwd`) and reverse mode (its transpose) both use
    the bounded derivative."""
    del max_gradient
    return jnp.sqrt(x)


@bounded_sqrt.defjvp
def _bounded_sqrt_jvp(max_gradient, primals, tangents):
    (x,), (dx,) = primals, tangents
    floor = jnp.asarray(1 / (4 * max_gradient**2), x.dtype)
    return jnp.sqrt(x), dx / (2 * jnp.sqrt(jnp.maximum(x, floor)))


def modulus_and_gain(log_modulus: Array, unit: Array, signed: bool) -> tuple[Array, Array]:
    r"""(the modulus of $a_t$, signed for `signed`; the normalisation at the exponent
    `unit`), from $\ell_t$ = `log_modulus` (see the module docstring)."""
    if not signed:
        return jnp.exp(log_modulus), bounded_sqrt(-jnp.expm1(2 * unit), SQRT_MAX_GRADIENT)
    modulus = 1 + 2 * jnp.expm1(log_modulus)
    root: Array = bounded_sqrt(-jnp.expm1(unit), SQRT_MAX_GRADIENT)
    return modulus, 2 * jnp.exp(unit / 2) * root


def rglru_terms(core, x: Array, dt: Array | None, starts: Array | None = None):
    r"""(transitions $a_t$, drives $g_t\, i_t x_t$) of `core` (an `RGLRU`) in its algebra's
    layout, one per position (or for one token), with the gain $g_t$ of the
    `discretization`: at the step, $\sqrt{1-|a_t|^{2\Delta t}}$ (variance-preserving); at
    $\Delta t = 1$, $\sqrt{1-|a_t|^2}$ (impulse), times $(a_t^{\Delta t} - 1)/(a_t - 1)$
    (zoh). Where `starts` (booleans, one per position) is true, $a_t = 0$ and the drive is
    $i_t x_t$ (a document's start)."""
    r, i = core.gates(x)
    scale = core.c * r if dt is None else core.c * r * dt[..., None]
    log_sigma = jax.nn.log_sigmoid(core.Lambda)
    log_modulus = scale * log_sigma
    held = dt is not None and core.discretization != "variance_preserving"
    unit = core.c * r * log_sigma if held else log_modulus  # log |a_t| at Δt = 1
    modulus, gain = modulus_and_gain(log_modulus, unit, core.eigenvalues == "signed")
    gain_im = None
    if held and core.discretization == "zoh":
        step = jnp.asarray(dt)[..., None]
        if core.theta is None:
            gain = gain * hold_weight_real(unit, step)
        else:
            w_re, w_im = hold_weight(unit, core.theta * r, step)
            gain, gain_im = gain * w_re, gain * w_im
    if starts is not None:
        start = starts[..., None]
        gain = jnp.where(start, jnp.ones_like(gain), gain)
        gain_im = None if gain_im is None else jnp.where(start, 0, gain_im)
        modulus = jnp.where(start, jnp.zeros_like(modulus), modulus)
    if core.theta is None:  # no phase
        return modulus, gain * (i * x)
    angle = core.theta * (r if dt is None else r * dt[..., None])
    half = core.Lambda.shape[0]
    re, im = gain * i * x[..., :half], gain * i * x[..., half:]
    if gain_im is not None:  # times the imaginary part of the complex gain
        re, im = re - gain_im * i * x[..., half:], im + gain_im * i * x[..., :half]
    a_re, a_im = modulus * jnp.cos(angle), modulus * jnp.sin(angle)
    if core.form == "complex":
        return jax.lax.complex(a_re, a_im), jax.lax.complex(re, im)
    return jnp.stack([a_re, a_im], axis=-2), jnp.stack([re, im], axis=-2)


def split_state(core, state) -> tuple[Array, Array | None]:
    """`(h, started)` of `core`'s (an `RGLRU`'s) state, `started` `None` for the
    normalised core, checked against `init_state()`'s layout."""
    name = f"RGLRU(phase={core.phase}, form={core.form!r})"
    if core.document_start == "normalised":
        state = jnp.asarray(state)
        check_state(state, core.init_state(), name)
        return state, None
    if not isinstance(state, (tuple, list)) or len(state) != 2:
        raise ValueError(
            "`initial_state`/`state` of RGLRU(document_start='unnormalised') is the pair "
            "(h, started) of `init_state()`, `step` or `run` (started: whether a "
            f"document has begun); got {type(state).__name__}."
        )
    h, started = jnp.asarray(state[0]), jnp.asarray(state[1])
    check_state(h, core.init_state()[0], name, " (the `h` of the pair (h, started))")
    if started.shape != () or started.dtype != jnp.bool_:
        raise ValueError(
            "The `started` of RGLRU(document_start='unnormalised')'s state (h, started) "
            f"must be one boolean; got {started.dtype} of shape {started.shape}."
        )
    return h, started
