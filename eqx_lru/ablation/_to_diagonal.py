r"""§3.2.1: a linear dense RNN as the exactly equivalent complex diagonal RNN."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ._dense import AbstractDenseRNN, LinearDenseRNN
from ._diagonal import DiagonalRNN
from ._parameterisation import RealImag


def to_diagonal(core: AbstractDenseRNN) -> DiagonalRNN:
    r"""The complex diagonal RNN computing the same function as a linear dense RNN (§3.2.1).

    With the eigendecomposition $A = P \Lambda P^{-1}$, the state $\bar x_k = P^{-1} x_k$
    follows $\bar x_k = \Lambda \bar x_{k-1} + \bar B u_k$ with $\bar B = P^{-1} B$, and
    $y_k = C x_k + D u_k = \operatorname{Re}(\bar C \bar x_k) + D u_k$ with $\bar C = C P$
    (the product is real already, so taking the real part is exact). $\Lambda$ is stored
    directly as real and imaginary parts (`parameterisation="real_imag"`), with `d_state`
    complex modes: the conjugate eigenvalue pairs of a real $A$ make half of them redundant
    (the real Jordan form of §E.3 would halve it), but no information is lost.

    Computed on the host in float64 with NumPy (not traceable under `jit`); exact up to the
    conditioning of $P$ and the dtype of `core`, which the result keeps. $A$ must be
    diagonalisable — true for a Glorot $A$ with probability one.
    """
    if not isinstance(core, LinearDenseRNN):
        raise TypeError(
            f"`to_diagonal` needs a LinearDenseRNN (a linear recurrence); got "
            f"{type(core).__name__}. A nonlinear RNN has no diagonal equivalent."
        )
    A, B, C = (np.asarray(m, np.float64) for m in (core.A, core.B, core.C))
    eigenvalues, P = np.linalg.eig(A)
    cond = np.linalg.cond(P)
    if not np.isfinite(cond) or cond > 1e12:
        raise ValueError(
            f"`A` is (numerically) not diagonalisable: its eigenvector matrix has condition "
            f"number {cond:.3g}. Perturb `A` slightly (any matrix is diagonalisable up to an "
            "arbitrarily small perturbation, §3.2.1)."
        )
    B_bar, C_bar = np.linalg.solve(P, B), C @ P
    dtype = core.D.dtype
    template = DiagonalRNN(
        core.d_model,
        core.d_state,
        parameterisation="real_imag",
        method=core.method,
        dtype=dtype,
        key=jax.random.key(0),
    )
    real = [part(m) for m in (eigenvalues, B_bar, C_bar) for part in (np.real, np.imag)]
    lam_re, lam_im, B_re, B_im, C_re, C_im = (jnp.asarray(v, dtype) for v in real)
    return eqx.tree_at(
        lambda c: (c.lambda_, c.B_re, c.B_im, c.C_re, c.C_im, c.D),
        template,
        (RealImag(lam_re, lam_im), B_re, B_im, C_re, C_im, core.D),
    )
