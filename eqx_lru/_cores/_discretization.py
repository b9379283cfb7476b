r"""What an input means when the time step is not 1: the `discretization=` of the cores
that take `dt=`.

A diagonal mode $\dot x = \mu x$ ($\lambda = e^{\mu}$, $\mu = \log|\lambda| + i\theta$)
advances by $\lambda^{\Delta t} = e^{\mu\Delta t}$ over a step $\Delta t$ under every
choice; they differ in the weight of the step's input, relative to its weight at
$\Delta t = 1$ (so every choice is the core without `dt` at $\Delta t \equiv 1$):

- `"impulse"`: weight 1. The input is an *event* at the end of the step that kicks the
    state by the same amount whatever the gap: $x_k = \lambda^{\Delta t_k} x_{k-1} +
    \gamma B u_k$.
- `"zoh"` (zero-order hold): the input is *held* over the step,
    $x(t_k) = e^{\mu\Delta t_k} x(t_{k-1}) + \int_0^{\Delta t_k} e^{\mu s}\,ds\;\beta u_k$,
    normalised to the core's weight at $\Delta t = 1$: the weight
    $$w(\Delta t) = \frac{\lambda^{\Delta t} - 1}{\lambda - 1} =
    \frac{\operatorname{expm1}(\mu\Delta t)}{\operatorname{expm1}(\mu)},$$
    complex for a complex mode ($w(1) = 1$; $w \to \Delta t$ as $\lambda \to 1$;
    $w \approx \mu\Delta t / (\lambda - 1)$ for a tiny step). Splitting a step in two with
    the same input held changes nothing: $\lambda^{s} w(t) + w(s) = w(s + t)$.
- `"variance_preserving"` (the RG-LRU's own, its default): the weight
    $\sqrt{1 - |\lambda|^{2\Delta t}} / \sqrt{1 - |\lambda|^2}$, the exact discretisation of an
    Ornstein–Uhlenbeck process (input as white noise): the state's variance under
    independent unit inputs is the same whatever the step.

`hold_weight` computes $w$ in real arithmetic, as the real and imaginary parts of a complex
number, so a complex core multiplies by $w$ and its real form by the 2×2 rotation-scaling
block $\begin{pmatrix}\operatorname{Re} w & -\operatorname{Im} w\\ \operatorname{Im} w &
\operatorname{Re} w\end{pmatrix}$ with the same numbers (`weigh_pairs`).
"""

from typing import Literal

import jax.numpy as jnp
from jaxtyping import Array, Float

#: `discretization=` of `ComplexLRU` and `RealLRU`.
Discretization = Literal["impulse", "zoh"]
#: `discretization=` of `RGLRU`.
RGLRUDiscretization = Literal["variance_preserving", "impulse", "zoh"]

_MEANINGS = {
    "impulse": "each input kicks the state by the same amount whatever the step",
    "zoh": "zero-order hold: each input is held over its step",
    "variance_preserving": "sqrt(1 - |a|^(2 dt)) input normalisation",
}


def check_discretization(discretization: object, choices: tuple[str, ...], core: str) -> str:
    """`discretization` itself if it is one of `choices`; otherwise one `ValueError` naming
    the argument, `core` and each choice with its meaning."""
    if isinstance(discretization, str) and discretization in choices:
        return discretization
    listed = "; ".join(f"{c!r} ({_MEANINGS[c]})" for c in choices)
    raise ValueError(
        f"{core}'s `discretization` must be one of: {listed}. Got {discretization!r}. It says "
        "what an input means when `dt` is not 1 (see the concepts page on time steps)."
    )


def expm1_pair(
    re: Float[Array, "*shape"], im: Float[Array, "*shape"]
) -> tuple[Float[Array, "*shape"], Float[Array, "*shape"]]:
    r"""$e^{a + ib} - 1$ as its real and imaginary parts, without cancellation near 0:
    $(\operatorname{expm1}(a)\cos b - 2\sin^2(b/2),\ e^a \sin b)$."""
    half = jnp.sin(im / 2)
    return jnp.expm1(re) * jnp.cos(im) - 2 * half * half, jnp.exp(re) * jnp.sin(im)


def hold_weight(
    log_re: Float[Array, "..."], log_im: Float[Array, "..."], dt: Float[Array, "..."]
) -> tuple[Float[Array, "..."], Float[Array, "..."]]:
    r"""The zero-order hold's input weight $w = \operatorname{expm1}(\mu\Delta t) /
    \operatorname{expm1}(\mu)$ of a complex mode $\mu$ = `log_re` + i `log_im`, for steps
    `dt` (broadcast against them), as `(Re w, Im w)`.

    Both parts of numerator and denominator are computed without cancellation
    (`expm1_pair`), and the quotient is scaled by the denominator's largest part, so it is
    accurate for $\lambda \to 1$ and for tiny steps. Where $\mu = 0$ exactly ($\lambda$
    rounds to 1) it is the limit, $\Delta t$; the gradients stay finite there. At
    $\Delta t = 1$ the numerator's operations are the denominator's, so $w = 1$ exactly."""
    num_re, num_im = expm1_pair(log_re * dt, log_im * dt)
    den_re, den_im = expm1_pair(log_re, log_im)
    scale = jnp.maximum(jnp.abs(den_re), jnp.abs(den_im))
    zero = scale == 0
    scale = jnp.where(zero, jnp.ones_like(scale), scale)
    num_re, num_im, den_re, den_im = num_re / scale, num_im / scale, den_re / scale, den_im / scale
    norm = den_re * den_re + den_im * den_im
    norm = jnp.where(zero, jnp.ones_like(norm), norm)
    w_re = (num_re * den_re + num_im * den_im) / norm
    w_im = (num_im * den_re - num_re * den_im) / norm
    return jnp.where(zero, dt, w_re), jnp.where(zero, jnp.zeros_like(w_im), w_im)


def hold_weight_real(log: Float[Array, "..."], dt: Float[Array, "..."]) -> Float[Array, "..."]:
    r"""`hold_weight` of a real mode $\mu$ = `log`: $\operatorname{expm1}(\mu\Delta t) /
    \operatorname{expm1}(\mu)$, $\Delta t$ where $\mu = 0$ (1 exactly at $\Delta t = 1$)."""
    den = jnp.expm1(log)
    zero = den == 0
    weight = jnp.expm1(log * dt) / jnp.where(zero, jnp.ones_like(den), den)
    return jnp.where(zero, dt, weight)


def weigh_pairs(
    pairs: Float[Array, "*length 2 n"], w_re: Float[Array, "*b n"], w_im: Float[Array, "*b n"]
) -> Float[Array, "*length 2 n"]:
    r"""$w \odot z$ for complex numbers $z$ stored as planar pairs `(..., 2, n)` (`[Re z;
    Im z]`): the rotation-scaling block of $w$ applied to each pair, in `w`'s dtype, returned
    in `pairs`' (a low-precision drive is weighted in the parameters' precision, then
    stored as before)."""
    z = pairs.astype(w_re.dtype)
    re, im = z[..., 0, :], z[..., 1, :]
    out = jnp.stack([w_re * re - w_im * im, w_re * im + w_im * re], axis=-2)
    return out.astype(pairs.dtype)
