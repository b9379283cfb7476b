r"""Reachable single-input multiple-output (SIMO) linear dynamical systems in modal form,
the primitive of LDStack (Martin & Cundy-style parallel scans; LDStack, NeurIPS 2020, §3).

A reachable SIMO LDS $s_{t+1} = A s_t + B x_t$ (scalar $x_t$) is, in the Frobenius companion
form of LDStack eq. (2), determined by the eigenvalues $\lambda \in \mathbb C^n$ of $A$
alone. The Vandermonde matrix $V_{ij} = \lambda_i^{j-1}$ diagonalises it
($A = V^{-1}\Lambda V$, $V B = \mathbf 1$), giving the modal form of eq. (3):

$$s'_{t+1} = \lambda \odot s'_t + \mathbf 1\, x_t, \qquad
y_t = \operatorname{Re}(C' s'_t) + D x_t + D_0,$$

with the complex relaxation $C' \in \mathbb C^{m \times n}$ of the output matrix and
$s'_0 = 0$. `companion_form` and `vandermonde` give the dense form back (NumPy, for
analysis and tests).
"""

import abc
import math
from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from beartype import beartype
from jaxtyping import Array, Complex, Float, PRNGKeyArray, jaxtyped

from .. import Diagonal, linear_recurrence
from ._common import check_size, float_dtype, resolve_method


def companion_form(lam: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    r"""LDStack eq. (2): the companion $A$ (ones on the subdiagonal, last column
    $-a_0, \dots, -a_{n-1}$ with $t^n + \sum_i a_i t^i = \prod_j (t - \lambda_j)$) and
    $B = e_1$, float64 (the eigenvalues must be closed under conjugation)."""
    lam = np.asarray(lam, np.complex128)
    n = lam.shape[0]
    coefficients = np.poly(lam)  # [1, a_{n-1}, ..., a_0]
    if np.abs(coefficients.imag).max() > 1e-8 * max(1.0, np.abs(coefficients).max()):
        raise ValueError("`lam` must be closed under complex conjugation (a real LDS).")
    a = coefficients.real[::-1][:n]  # a_0, ..., a_{n-1}
    companion = np.zeros((n, n))
    companion[np.arange(1, n), np.arange(n - 1)] = 1.0
    companion[:, -1] = -a
    b = np.zeros(n)
    b[0] = 1.0
    return companion, b


def vandermonde(lam: np.ndarray) -> np.ndarray:
    r"""$V_{ij} = \lambda_i^{j-1}$: the modal state is $s' = V s$ (LDStack §2.2)."""
    lam = np.asarray(lam, np.complex128)
    return lam[:, None] ** np.arange(lam.shape[0])[None, :]


class AbstractSIMOLDS(eqx.Module):
    r"""A reachable SIMO LDS in modal form (see the module docstring). Subclasses define how
    real parameters give the eigenvalues (`eigenvalues()`); $B' = \mathbf 1$ is fixed.

    Called on one scalar sequence `x` `(length,)`, returns `(length, d_out)`.
    """

    C_re: eqx.AbstractVar[Array]
    C_im: eqx.AbstractVar[Array]
    D: eqx.AbstractVar[Array]
    D0: eqx.AbstractVar[Array]
    method: eqx.AbstractVar[Any]

    @abc.abstractmethod
    def eigenvalues(self) -> Complex[Array, " n"]:
        r"""$\lambda \in \mathbb C^n$, closed under conjugation."""

    @property
    def d_state(self) -> int:
        return self.C_re.shape[1]

    def states(self, x: Float[Array, " length"]) -> Complex[Array, "length n"]:
        r"""The modal states $s'_0 = 0, s'_1, \dots, s'_{T-1}$ (the state before each input)."""
        if x.ndim != 1 or x.shape[0] == 0:
            raise ValueError(f"`x` must be one scalar sequence of shape (length,); got {x.shape}.")
        if x.dtype != self.D.dtype:
            raise ValueError(f"`x` must have dtype {self.D.dtype}; got {x.dtype}.")
        lam = self.eigenvalues()
        drive = jax.lax.complex(x, jnp.zeros_like(x))[:, None] * jnp.ones_like(lam)
        after = linear_recurrence(lam, drive, algebra=Diagonal(), method=self.method)
        return jnp.concatenate([jnp.zeros_like(after[:1]), after[:-1]])

    @jaxtyped(typechecker=beartype)
    def __call__(
        self, x: Float[Array, " length"], *, key: PRNGKeyArray | None = None
    ) -> Float[Array, "length d_out"]:
        r"""$y_t = \operatorname{Re}(C' s'_t) + D x_t + D_0$ for one scalar input sequence."""
        del key
        s = self.states(x)
        return s.real @ self.C_re.T - s.imag @ self.C_im.T + x[:, None] * self.D + self.D0


def _outputs(d_state: int, d_out: int, dtype, key: PRNGKeyArray) -> dict[str, Array]:
    c_key, d_key = jax.random.split(key)
    c = jax.random.normal(c_key, (2, d_out, d_state), dtype) / math.sqrt(2 * d_state)
    return dict(
        C_re=c[0], C_im=c[1], D=jax.random.normal(d_key, (d_out,), dtype),
        D0=jnp.zeros((d_out,), dtype),
    )


class StandardSIMOLDS(AbstractSIMOLDS):
    r"""Standard parameterisation (LDStack Fig. 1, left): complex pairs
    $\alpha_j \pm i\beta_j$ and real eigenvalues $\alpha^{\mathbb R}_j$, $n$ real numbers in all.
    Initialised as the roots of $t^n + \sum_{i<n} a_i t^i$ with $a_i \sim \mathcal N(0, 1/n)$
    (their moduli cluster near 1). How many roots are real is fixed at initialisation.

    **Fields:** `alpha`, `beta` `(pairs,)`, `alpha_real` `(reals,)`, `C_re`, `C_im`
    `(d_out, n)` ($\mathcal N(0, 1/(2n))$ each), `D` `(d_out,)` $\sim\mathcal N(0,1)$, `D0`
    `(d_out,)` $= 0$. Eigenvalue order: $[\alpha + i\beta, \alpha - i\beta, \alpha^{\mathbb R}]$.
    """

    alpha: Float[Array, " pairs"]
    beta: Float[Array, " pairs"]
    alpha_real: Float[Array, " reals"]
    C_re: Float[Array, "d_out n"]
    C_im: Float[Array, "d_out n"]
    D: Float[Array, " d_out"]
    D0: Float[Array, " d_out"]
    method: Any = eqx.field(static=True)

    recurrent_fields: ClassVar[tuple[str, ...]] = ("alpha", "beta", "alpha_real")

    def __init__(self, d_state: int, d_out: int, *, method: Any = "auto", dtype=None,
                 key: PRNGKeyArray):
        """**Arguments:** `d_state` ($n$), `d_out` ($m$), `method`, `dtype`, `key`."""
        check_size("d_state", d_state)
        check_size("d_out", d_out)
        dtype = float_dtype(dtype)
        poly_key, out_key = jax.random.split(key)
        a = np.asarray(jax.random.normal(poly_key, (d_state,), jnp.float32), np.float64)
        roots = np.roots(np.concatenate([[1.0], a[::-1] / math.sqrt(d_state)]))
        upper = roots[roots.imag > 0]
        self.alpha = jnp.asarray(upper.real, dtype)
        self.beta = jnp.asarray(upper.imag, dtype)
        self.alpha_real = jnp.asarray(np.sort(roots[roots.imag == 0].real), dtype)
        for name, value in _outputs(d_state, d_out, dtype, out_key).items():
            setattr(self, name, value)
        self.method = resolve_method(method)

    def eigenvalues(self) -> Complex[Array, " n"]:
        re = jnp.concatenate([self.alpha, self.alpha, self.alpha_real])
        im = jnp.concatenate([self.beta, -self.beta, jnp.zeros_like(self.alpha_real)])
        return jax.lax.complex(re, im)


class UnitSIMOLDS(AbstractSIMOLDS):
    r"""Unit parameterisation (LDStack Fig. 1, right): $|\lambda| = 1$,
    $\lambda = [e^{i\theta}, e^{-i\theta}]$ with $\theta \sim U(-2\pi, 2\pi)^{n/2}$ ($n$ even).

    **Fields:** `theta` `(n/2,)` and the outputs as in `StandardSIMOLDS`.
    """

    theta: Float[Array, " half"]
    C_re: Float[Array, "d_out n"]
    C_im: Float[Array, "d_out n"]
    D: Float[Array, " d_out"]
    D0: Float[Array, " d_out"]
    method: Any = eqx.field(static=True)

    recurrent_fields: ClassVar[tuple[str, ...]] = ("theta",)

    def __init__(self, d_state: int, d_out: int, *, method: Any = "auto", dtype=None,
                 key: PRNGKeyArray):
        """**Arguments:** `d_state` ($n$, even), `d_out` ($m$), `method`, `dtype`, `key`."""
        check_size("d_state", d_state)
        check_size("d_out", d_out)
        if d_state % 2:
            raise ValueError(f"`d_state` must be even (conjugate pairs on the unit circle); "
                             f"got {d_state}.")
        dtype = float_dtype(dtype)
        theta_key, out_key = jax.random.split(key)
        self.theta = jax.random.uniform(theta_key, (d_state // 2,), dtype, -2 * math.pi,
                                        2 * math.pi)
        for name, value in _outputs(d_state, d_out, dtype, out_key).items():
            setattr(self, name, value)
        self.method = resolve_method(method)

    def eigenvalues(self) -> Complex[Array, " n"]:
        theta = jnp.concatenate([self.theta, -self.theta])
        return jax.lax.complex(jnp.cos(theta), jnp.sin(theta))


