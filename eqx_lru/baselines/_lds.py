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

**As recurrent cores.** The LDS cores follow `eqx_lru.AbstractRecurrentCore` with a
*scalar* input sequence `u` `(length,)` and outputs `(length, d_out)` (so they are not
`LRUBlock` cores, whose input and output are `(length, d_model)`; LDStack stacks them
itself). The contract's state after position $t$ is $s'_{t+1}$ (it has consumed $x_t$);
the output at $t$ reads the state before it, $s'_t$, and $x_t$ through $D$.
"""

import abc
import math
from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from beartype import beartype
from jaxtyping import Array, ArrayLike, Complex, Float, PRNGKeyArray, jaxtyped

from .._checks import (
    check_size,
    check_state,
    complex_dtype,
    complex_float_dtype,
)
from .._cores._core import AbstractStatesCore, check_takes_dt
from .._scan._algebra import Diagonal
from .._scan._methods import scan_method
from .._scan._recurrence import recurrence, segment_starts
from .._surface import checks_first


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


class AbstractSIMOLDS(AbstractStatesCore):
    r"""A reachable SIMO LDS in modal form (see the module docstring). Subclasses define how
    real parameters give the eigenvalues (`eigenvalues()`); $B' = \mathbf 1$ is fixed.

    Called on one scalar sequence `x` `(length,)`, returns `(length, d_out)`. The state is
    complex, `(n,)`.
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

    def init_state(self) -> Complex[Array, " n"]:
        r"""$s'_0 = 0$, complex `(n,)`."""
        return jnp.zeros(self.d_state, complex_dtype(self.D.dtype))

    def _check_input(self, x: Array, name: str, shape: tuple[int, ...]) -> None:
        if x.shape != shape or x.dtype != self.D.dtype:
            what = "one scalar sequence of shape (length,)" if name == "u" else "a scalar"
            raise ValueError(
                f"`{name}` must be {what} of dtype {self.D.dtype}; got {x.dtype} of shape "
                f"{x.shape}. Batch with `jax.vmap`."
            )

    def _readout(self, s: Array, x: Array) -> Array:
        return s.real @ self.C_re.T - s.imag @ self.C_im.T + x[..., None] * self.D + self.D0

    def _states(
        self, u, initial_state, reverse, segment_ids, dt=None
    ) -> Complex[Array, "length n"]:
        """The states after each input, $s'_{t+1}$ (forward)."""
        del dt  # no time steps (refused by the public methods)
        self._check_input(u, "u", u.shape[:1])
        if u.shape[0] == 0:
            raise ValueError("`u` has length 0; a sequence needs at least one position.")
        if initial_state is not None:
            initial_state = jnp.asarray(initial_state)
            check_state(initial_state, self.init_state(), type(self).__name__)
        lam = self.eigenvalues()
        drive = jax.lax.complex(u, jnp.zeros_like(u))[:, None] * jnp.ones_like(lam)
        return recurrence(
            lam, drive, algebra=Diagonal(), initial_state=initial_state, reverse=reverse,
            method=self.method, segment_ids=segment_ids,
        )  # fmt: skip

    def states(
        self, x: Array, *, initial_state: Array | None = None, reverse: bool = False
    ) -> Complex[Array, "length n"]:
        r"""The modal states $s'_0, s'_1, \dots, s'_{T-1}$ the outputs read (the state
        before each input; $s'_0$ = `initial_state`, zero by default). Reverse: the state
        after the later inputs."""
        x = jnp.asarray(x)
        after = self._states(x, initial_state, reverse, None)
        return self._before(after, initial_state, reverse, None)

    def _before(self, after, initial_state, reverse, segment_ids) -> Complex[Array, "length n"]:
        """The states before each input (zero at each segment start)."""
        first = self.init_state() if initial_state is None else jnp.asarray(initial_state)
        if reverse:
            before = jnp.concatenate([after[1:], first[None]])
        else:
            before = jnp.concatenate([first[None], after[:-1]])
        if segment_ids is not None:
            starts = segment_starts(segment_ids, reverse=reverse)[:, None]
            before = jnp.where(starts, jnp.zeros((), before.dtype), before)
        return before

    def _outputs(self, states, u, initial_state, reverse, segment_ids) -> Array:
        r"""$y_t = \operatorname{Re}(C' s'_t) + D x_t + D_0$, the inputs $x_t$ in `u`."""
        return self._readout(self._before(states, initial_state, reverse, segment_ids), u)

    @checks_first(check_takes_dt)
    @jaxtyped(typechecker=beartype)
    def step(
        self,
        state: Complex[ArrayLike, " n"],
        u_t: Float[ArrayLike, ""],
        *,
        dt: ArrayLike | None = None,
    ) -> tuple[Complex[Array, " n"], Float[Array, " d_out"]]:
        r"""One input: $y_t = \operatorname{Re}(C' s'_t) + D x_t + D_0$ and
        $s'_{t+1} = \lambda \odot s'_t + x_t$; returns `(s'_{t+1}, y_t)`. `dt`: `None` (an
        LDS takes no time steps, and refuses any other value)."""
        del dt  # refused when not `None` (`check_takes_dt`)
        state, x_t = jnp.asarray(state), jnp.asarray(u_t)
        self._check_input(x_t, "u_t", ())
        check_state(state, self.init_state(), type(self).__name__)
        y_t = self._readout(state, x_t)
        return self.eigenvalues() * state + jax.lax.complex(x_t, jnp.zeros_like(x_t)), y_t


def _outputs(d_state: int, d_out: int, dtype, key: PRNGKeyArray) -> dict[str, Array]:
    c_key, d_key = jax.random.split(key)
    c = jax.random.normal(c_key, (2, d_out, d_state), dtype) / math.sqrt(2 * d_state)
    return dict(
        C_re=c[0],
        C_im=c[1],
        D=jax.random.normal(d_key, (d_out,), dtype),
        D0=jnp.zeros((d_out,), dtype),
    )


def _check_reals(reals, d_state: int) -> int:
    """`reals` as an int: of `d_state`'s parity and in [0, d_state] (conjugate pairs)."""
    if isinstance(reals, bool) or not isinstance(reals, int | np.integer):
        raise TypeError(
            f"`reals` must be an integer (how many eigenvalues are real); got {reals!r}."
        )
    reals = int(reals)
    if not 0 <= reals <= d_state or (d_state - reals) % 2:
        raise ValueError(
            f"`reals` must be in [0, d_state] with d_state - reals even (the other "
            f"eigenvalues come in conjugate pairs); got reals={reals}, d_state={d_state}."
        )
    return reals


def _with_reals(roots: np.ndarray, reals: int) -> tuple[np.ndarray, np.ndarray]:
    """The upper roots of the conjugate pairs and the real roots (ascending) of a real
    polynomial's `roots`, with exactly `reals` real ones (see `StandardSIMOLDS`)."""
    upper = roots[np.imag(roots) > 0]
    real = np.sort(np.real(roots[np.imag(roots) == 0]))
    while real.shape[0] > reals:  # merge the two smallest into a pair
        r1, r2, real = real[0], real[1], real[2:]
        upper = np.append(upper, complex((r1 + r2) / 2, (r2 - r1) / 2))
    while real.shape[0] < reals:  # split the pair nearest the real axis
        nearest = int(np.argmin(np.imag(upper)))
        alpha, beta = np.real(upper[nearest]), np.imag(upper[nearest])
        upper = np.delete(upper, nearest)
        real = np.sort(np.append(real, [alpha - beta, alpha + beta]))
    return upper, real


class StandardSIMOLDS(AbstractSIMOLDS):
    r"""Standard parameterisation (LDStack Fig. 1, left): complex pairs
    $\alpha_j \pm i\beta_j$ and real eigenvalues $\alpha^{\mathbb R}_j$, $n$ real numbers in all.
    Initialised as the roots of $t^n + \sum_{i<n} a_i t^i$ with $a_i \sim \mathcal N(0, 1/n)$
    (their moduli cluster near 1). How many roots are real is the argument `reals`
    (default $n \bmod 2$), so that the parameter shapes depend on the arguments, never on
    the key (a checkpoint loads into a module built from any key): surplus real roots
    $r_1 \le r_2$, taken in ascending pairs, become the pair
    $\tfrac{r_1 + r_2}{2} \pm i\,\tfrac{r_2 - r_1}{2}$; when real roots are missing, the
    pairs nearest the real axis split into $\alpha \pm \beta$.

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

    def __init__(
        self,
        d_state: int,
        d_out: int,
        *,
        reals: Any = None,  # checked by _check_reals, in the library's words
        method: Any = "auto",
        dtype=None,
        key: PRNGKeyArray,
    ):
        r"""**Arguments:** `d_state` ($n$), `d_out` ($m$), `reals` (how many eigenvalues are
        real: $n \bmod 2$ by default; of $n$'s parity, at most $n$), `method`, `dtype`,
        `key`."""
        d_state = check_size("d_state", d_state, "an LDS: the state size n")
        check_size("d_out", d_out)
        reals = d_state % 2 if reals is None else _check_reals(reals, d_state)
        dtype = complex_float_dtype(dtype, "StandardSIMOLDS", "a float32/float64 `dtype`")
        poly_key, out_key = jax.random.split(key)
        a = np.asarray(jax.random.normal(poly_key, (d_state,), jnp.float32), np.float64)
        roots = np.roots(np.concatenate([[1.0], a[::-1] / math.sqrt(d_state)]))
        upper, real = _with_reals(roots, reals)
        self.alpha = jnp.asarray(np.real(upper), dtype)
        self.beta = jnp.asarray(np.imag(upper), dtype)
        self.alpha_real = jnp.asarray(real, dtype)
        for name, value in _outputs(d_state, d_out, dtype, out_key).items():
            setattr(self, name, value)
        self.method = scan_method(method)

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

    def __init__(
        self, d_state: int, d_out: int, *, method: Any = "auto", dtype=None, key: PRNGKeyArray
    ):
        """**Arguments:** `d_state` ($n$, even), `d_out` ($m$), `method`, `dtype`, `key`."""
        check_size("d_state", d_state, "an LDS: the state size n")
        check_size("d_out", d_out)
        if d_state % 2:
            raise ValueError(
                f"`d_state` must be even (conjugate pairs on the unit circle); got {d_state}."
            )
        dtype = complex_float_dtype(dtype, "UnitSIMOLDS", "a float32/float64 `dtype`")
        theta_key, out_key = jax.random.split(key)
        self.theta = jax.random.uniform(
            theta_key, (d_state // 2,), dtype, -2 * math.pi, 2 * math.pi
        )
        for name, value in _outputs(d_state, d_out, dtype, out_key).items():
            setattr(self, name, value)
        self.method = scan_method(method)

    def eigenvalues(self) -> Complex[Array, " n"]:
        theta = jnp.concatenate([self.theta, -self.theta])
        return jax.lax.complex(jnp.cos(theta), jnp.sin(theta))
