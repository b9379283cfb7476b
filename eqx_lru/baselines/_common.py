"""Checks and small helpers shared by the baseline cores."""

import jax.numpy as jnp
from jaxtyping import Array

from .._checks import check_size


def check_even_state(d_state: int, per: int = 1, what: str = "", *, owner: str) -> None:
    """`d_state` counts real state dimensions of a conjugate-symmetric system: it must be a
    positive multiple of `2 * per` (each kept complex mode stands for a conjugate pair);
    `owner` names the layer in the error."""
    check_size("d_state", d_state, f"{owner}: the real state size N, N/2 complex modes kept")
    if d_state % (2 * per):
        raise ValueError(
            f"`d_state` must be a multiple of {2 * per}{what}: it is the size N of the real "
            f"state, of which N/2 complex modes are kept (conjugate symmetry); got {d_state}."
        )


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
