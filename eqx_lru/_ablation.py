r"""The paper's ablation ladder as recurrent cores (§3; Tables 1, 2, 7, 8).

Each rung changes one thing on the way from a vanilla RNN to the LRU:

- `"rnn_tanh"`, `"rnn_relu"`: `DenseRNN`, $x_k = \sigma(A x_{k-1} + B u_k)$
    (eq. 1, §3.1, Table 1);
- `"linear_dense"`: `LinearDenseRNN`, $x_k = A x_{k-1} + B u_k$ (§3.1, Table 1);
- `"diag_realimag"`: `DiagonalRealImag`, complex diagonal with $\lambda = a + ib$
    (§3.2, Table 2);
- `"diag_exp"`: `DiagonalExp`, $\lambda = e^{-\nu + i\theta}$ (§3.3, Table 2);
- `"diag_stable_exp"`: `DiagonalStableExp`,
    $\lambda = \exp(-e^{\nu_{\log}} + i e^{\theta_{\log}})$ (§3.3, Table 2);
- `"diag_stable_exp_ring"`: the same initialised on a ring near the unit circle
    (§3.3, Tables 2, 8);
- `"lru"`: `eqx_lru.ComplexLRU`, + $\gamma$ normalisation (§3.4, Tables 3, 8).

Every core follows one contract, so a block can take any of them:
`core(u: Float[Array, "length d_model"], *, reverse=False) -> Float[Array, "length d_model"]`,
constructed as `Core(d_model, d_state, *, key, **options)`. `ABLATION_CORES` maps the
names above to factories `make_core(d_model, d_state, *, key, r_min=, r_max=, max_phase=)`.

The linear rungs run on the shared scan `eqx_lru.linear_recurrence`; the dense linear RNN
uses the small `DenseAlgebra` defined here (a dense $N \times N$ transition acting by a
matrix-vector product). Only the nonlinear RNNs need their own `jax.lax.scan`.
"""

import abc
import math
from collections.abc import Callable
from typing import ClassVar, Literal

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from beartype import beartype
from jaxtyping import Array, Complex, Float, PRNGKeyArray, jaxtyped

from ._init import check_size, float_dtype, projection_init, ring_init
from ._lru import ComplexLRU
from ._scan import AbstractAlgebra, Diagonal, ScanMethod, linear_recurrence

_METHODS = ("auto", "associative", "sequential")

# The ring of the "+ Ring Init" rung and of the LRU rung when none is given: Table 8's
# PathFinder ring, which (like Retrieval's) is the same with and without γ, so the last step
# of the ladder changes γ alone.
DEFAULT_RING = dict(r_min=0.9, r_max=0.999, max_phase=2 * math.pi)


class DenseAlgebra(AbstractAlgebra):
    r"""Dense transitions: `a[..., N, N]` acts on `h[..., N]` by $a \otimes h = a h$.

    Composition is the matrix product `later @ earlier`. With `method="associative"` every
    combine costs $O(N^3)$, which is why a dense linear RNN is slow to parallelise and the
    paper diagonalises it (§3.2.2); `LinearDenseRNN` therefore defaults to the sequential scan.
    """

    def transition_shape(self, state_shape: tuple[int, ...]) -> tuple[int, ...]:
        return state_shape + state_shape[-1:]

    def compose(self, later: Array, earlier: Array) -> Array:
        return jnp.matmul(later, earlier)

    def apply(self, a: Array, h: Array) -> Array:
        return jnp.einsum("...ij,...j->...i", a, h)

    def check_state_shape(self, state_shape: tuple[int, ...]) -> None:
        if len(state_shape) == 0:
            raise ValueError(
                "DenseAlgebra states need a trailing state axis for the N x N transition to "
                "act on, so `b` must have shape (length, ..., N); got a scalar state."
            )


# --- shared helpers ---------------------------------------------------------------------


def _check_method(method: str) -> None:
    if method not in _METHODS:
        raise ValueError(f"`method` must be one of {_METHODS}, got {method!r}.")


def _check_input(u: Array, d_model: int) -> None:
    if u.ndim != 2 or u.shape[1] != d_model or u.shape[0] == 0:
        raise ValueError(
            f"`u` must have shape (length, d_model) with length >= 1 and d_model={d_model}; "
            f"got shape {u.shape}. Batch with `jax.vmap`: a core acts on one sequence."
        )


def _complex_dtype(real_dtype) -> jnp.dtype:
    return jnp.dtype(jnp.complex128 if real_dtype == jnp.float64 else jnp.complex64)


def _glorot(key: PRNGKeyArray, shape: tuple[int, int], dtype) -> Array:
    r"""Glorot normal, $\mathcal N(0, 2/(\text{fan\_in} + \text{fan\_out}))$. For the
    square $A$ this is $\mathcal N(0, 1/N)$, under which the spectrum fills the unit disk
    (Thm. 3.1, Fig. 2)."""
    fan_out, fan_in = shape
    return jax.random.normal(key, shape, dtype) * math.sqrt(2 / (fan_in + fan_out))


# --- dense RNNs (§2.1 eq. 1, §3.1) ------------------------------------------------------


class AbstractDenseRNN(eqx.Module):
    r"""A dense RNN core $x_k = \sigma(A x_{k-1} + B u_k)$, $y_k = C x_k + D \odot u_k$,
    $x_{-1} = 0$ (paper eq. 1; no bias, as there).

    **Fields:** `A` `(d_state, d_state)`, `B` `(d_state, d_model)`, `C` `(d_model, d_state)`,
    all Glorot normal $\mathcal N(0, 2/(\text{fan\_in} + \text{fan\_out}))$ as in the
    paper's vanilla RNN (§3.1; $\mathcal N(0, 1/N)$ for $A$);
    `D` `(d_model,)` $\sim \mathcal N(0, 1)$, elementwise like the LRU's, so every rung of
    the ladder has the same skip.
    """

    A: Float[Array, "d_state d_state"]
    B: Float[Array, "d_state d_model"]
    C: Float[Array, "d_model d_state"]
    D: Float[Array, " d_model"]

    #: "A and B" get the reduced learning rate and no weight decay (§D.2, `lru_optimizer`).
    recurrent_fields: ClassVar[tuple[str, ...]] = ("A", "B")

    @property
    def d_model(self) -> int:
        return self.D.shape[-1]

    @property
    def d_state(self) -> int:
        return self.A.shape[-1]

    @abc.abstractmethod
    def hidden_states(
        self, u: Float[Array, "length d_model"], *, reverse: bool = False
    ) -> Float[Array, "length d_state"]:
        """All hidden states $x_0, \\dots, x_{L-1}$."""

    def eigenvalues(self) -> Complex[Array, " d_state"]:
        """The eigenvalues of `A` (for analysis; computed on the host with NumPy, so not
        traceable under `jit`)."""
        return jnp.asarray(np.linalg.eigvals(np.asarray(self.A)))

    @jaxtyped(typechecker=beartype)
    def __call__(
        self,
        u: Float[Array, "length d_model"],
        *,
        reverse: bool = False,
        key: PRNGKeyArray | None = None,
    ) -> Float[Array, "length d_model"]:
        r"""**Arguments:** `u` of shape `(length, d_model)` (one sequence; batch with
        `jax.vmap`); `reverse=True` runs from the last step ($x_k$ depends on
        $u_k, \dots, u_{L-1}$); `key` is ignored.

        **Returns:** $y$, shape `(length, d_model)`.
        """
        del key
        states = self.hidden_states(u, reverse=reverse)
        return states @ self.C.T + self.D * u


def _dense_parameters(d_model, d_state, dtype, key) -> dict[str, Array]:
    check_size("d_model", d_model)
    check_size("d_state", d_state)
    dtype = float_dtype(dtype)
    a_key, b_key, c_key, d_key = jax.random.split(key, 4)
    return dict(
        A=_glorot(a_key, (d_state, d_state), dtype),
        B=_glorot(b_key, (d_state, d_model), dtype),
        C=_glorot(c_key, (d_model, d_state), dtype),
        D=jax.random.normal(d_key, (d_model,), dtype),
    )


_NONLINEARITIES: dict[str, Callable[[Array], Array]] = {"tanh": jnp.tanh, "relu": jax.nn.relu}


class DenseRNN(AbstractDenseRNN):
    r"""The vanilla nonlinear RNN of paper eq. 1 / §3.1 (rows RNN-Tanh and RNN-ReLU of
    Table 1): $x_k = \sigma(A x_{k-1} + B u_k)$ with $\sigma$ = tanh or ReLU.

    Nonlinear, so it runs on a plain sequential `jax.lax.scan`.
    """

    nonlinearity: Literal["tanh", "relu"] = eqx.field(static=True)

    def __init__(
        self,
        d_model: int,
        d_state: int,
        *,
        nonlinearity: Literal["tanh", "relu"] = "tanh",
        dtype=None,
        key: PRNGKeyArray,
    ):
        """**Arguments:** `d_model` ($H$), `d_state` ($N$), `nonlinearity` (`"tanh"` or
        `"relu"`), `dtype` (real floating; default JAX's float), `key`."""
        if nonlinearity not in _NONLINEARITIES:
            raise ValueError(
                f"`nonlinearity` must be one of {tuple(_NONLINEARITIES)}, got {nonlinearity!r}; "
                "for the linear RNN use `LinearDenseRNN`."
            )
        for name, value in _dense_parameters(d_model, d_state, dtype, key).items():
            setattr(self, name, value)
        self.nonlinearity = nonlinearity

    def hidden_states(
        self, u: Float[Array, "length d_model"], *, reverse: bool = False
    ) -> Float[Array, "length d_state"]:
        _check_input(u, self.d_model)
        sigma = _NONLINEARITIES[self.nonlinearity]

        def step(x, bu_k):
            x = sigma(self.A @ x + bu_k)
            return x, x

        x0 = jnp.zeros(self.d_state, u.dtype)
        _, states = jax.lax.scan(step, x0, u @ self.B.T, reverse=reverse)
        return states


class LinearDenseRNN(AbstractDenseRNN):
    r"""The linear dense RNN of §3.1 (row RNN-Lin of Table 1, "Dense A" of Table 2):
    $x_k = A x_{k-1} + B u_k$, Glorot $A$ (spectrum ≈ uniform on the unit disk, Thm. 3.1).

    Linear, so it runs on the shared scan with `DenseAlgebra`. `to_diagonal` turns it into
    the exactly equivalent complex diagonal RNN of §3.2.1.
    """

    method: ScanMethod = eqx.field(static=True)

    def __init__(
        self,
        d_model: int,
        d_state: int,
        *,
        method: ScanMethod = "sequential",
        dtype=None,
        key: PRNGKeyArray,
    ):
        """**Arguments:** `d_model` ($H$), `d_state` ($N$), `method` (scan method of
        `eqx_lru.linear_recurrence`; default sequential, since a parallel scan of dense
        $N \\times N$ transitions costs $O(N^3)$ per combine), `dtype`, `key`."""
        _check_method(method)
        for name, value in _dense_parameters(d_model, d_state, dtype, key).items():
            setattr(self, name, value)
        self.method = method

    def hidden_states(
        self, u: Float[Array, "length d_model"], *, reverse: bool = False
    ) -> Float[Array, "length d_state"]:
        _check_input(u, self.d_model)
        return linear_recurrence(
            self.A, u @ self.B.T, algebra=DenseAlgebra(), reverse=reverse, method=self.method
        )


# --- complex diagonal RNNs (§3.2, §3.3) -------------------------------------------------


class AbstractDiagonalRNN(eqx.Module):
    r"""A complex diagonal linear RNN without normalisation (§3.2):
    $x_k = \lambda \odot x_{k-1} + B u_k$, $y_k = \operatorname{Re}(C x_k) + D \odot u_k$,
    $x_{-1} = 0$, with $B = B_\text{re} + i B_\text{im}$, $C = C_\text{re} + i C_\text{im}$
    initialised as the LRU's (App. A). Subclasses differ only in how the real parameters give
    $\lambda$ (`eigenvalues()`); every stored parameter is real.
    """

    B_re: Float[Array, "d_state d_model"]
    B_im: Float[Array, "d_state d_model"]
    C_re: Float[Array, "d_model d_state"]
    C_im: Float[Array, "d_model d_state"]
    D: Float[Array, " d_model"]
    method: ScanMethod = eqx.field(static=True)

    @abc.abstractmethod
    def eigenvalues(self) -> Complex[Array, " d_state"]:
        r"""The diagonal $\lambda$ of the recurrence."""

    @property
    def d_model(self) -> int:
        return self.D.shape[-1]

    @property
    def d_state(self) -> int:
        return self.B_re.shape[0]

    def hidden_states(
        self, u: Float[Array, "length d_model"], *, reverse: bool = False
    ) -> Complex[Array, "length d_state"]:
        """All hidden states $x_0, \\dots, x_{L-1}$ (complex)."""
        _check_input(u, self.d_model)
        drive = jax.lax.complex(u @ self.B_re.T, u @ self.B_im.T)
        return linear_recurrence(
            self.eigenvalues(), drive, algebra=Diagonal(), reverse=reverse, method=self.method
        )

    @jaxtyped(typechecker=beartype)
    def __call__(
        self,
        u: Float[Array, "length d_model"],
        *,
        reverse: bool = False,
        key: PRNGKeyArray | None = None,
    ) -> Float[Array, "length d_model"]:
        r"""**Arguments:** `u` of shape `(length, d_model)` (one sequence; batch with
        `jax.vmap`); `reverse=True` runs the recurrence from the last step; `key` is ignored.

        **Returns:** $y = \operatorname{Re}(C x) + D \odot u$, shape `(length, d_model)`.
        """
        del key
        states = self.hidden_states(u, reverse=reverse)
        return states.real @ self.C_re.T - states.imag @ self.C_im.T + self.D * u


def _diagonal_init(d_model, d_state, r_min, r_max, max_phase, method, dtype, key):
    """Lemma 3.2 ring sample $(\\nu_{\\log}, \\theta_{\\log})$ and the LRU's projections."""
    check_size("d_model", d_model)
    check_size("d_state", d_state)
    _check_method(method)
    ring_key, proj_key = jax.random.split(key)
    nu_log, theta_log = ring_init(
        d_state, r_min=r_min, r_max=r_max, max_phase=max_phase, dtype=dtype, key=ring_key
    )
    projections = projection_init(d_model, d_state, dtype=dtype, key=proj_key)
    return nu_log, theta_log, projections


class DiagonalRealImag(AbstractDiagonalRNN):
    r"""Complex diagonal RNN with $\lambda = a + ib$ stored directly (§3.2.2; row
    "Λ Real + Im" of Table 2): `lambda_re` $= a$, `lambda_im` $= b$.

    Initialised uniformly on the ring $r_\min \le |\lambda| \le r_\max$ (Lemma 3.2); the
    default unit disk matches the spectrum of a Glorot dense $A$ (Thm. 3.1). Nothing keeps
    $|\lambda| < 1$ during training. Also the target of `to_diagonal`.
    """

    recurrent_fields: ClassVar[tuple[str, ...]] = ("lambda_re", "lambda_im", "B_re", "B_im")

    lambda_re: Float[Array, " d_state"]
    lambda_im: Float[Array, " d_state"]

    def __init__(
        self,
        d_model: int,
        d_state: int,
        *,
        r_min: float = 0.0,
        r_max: float = 1.0,
        max_phase: float = 2 * math.pi,
        method: ScanMethod = "auto",
        dtype=None,
        key: PRNGKeyArray,
    ):
        """**Arguments:** as `eqx_lru.ComplexLRU`."""
        nu_log, theta_log, projections = _diagonal_init(
            d_model, d_state, r_min, r_max, max_phase, method, dtype, key
        )
        modulus, phase = jnp.exp(-jnp.exp(nu_log)), jnp.exp(theta_log)
        self.lambda_re = modulus * jnp.cos(phase)
        self.lambda_im = modulus * jnp.sin(phase)
        for name, value in projections.items():
            setattr(self, name, value)
        self.method = method

    def eigenvalues(self) -> Complex[Array, " d_state"]:
        return jax.lax.complex(self.lambda_re, self.lambda_im)


class DiagonalExp(AbstractDiagonalRNN):
    r"""Complex diagonal RNN with the exponential parameterisation
    $\lambda = \exp(-\nu + i\theta)$ (§3.3 "Optimization under exponential
    parameterization"; row "Λ Exp" of Table 2): fields `nu`, `theta`.

    Magnitude and phase are decoupled (§E.2, Fig. 8), but nothing keeps $\nu > 0$, so
    $|\lambda|$ can leave the unit disk during training.
    """

    recurrent_fields: ClassVar[tuple[str, ...]] = ("nu", "theta", "B_re", "B_im")

    nu: Float[Array, " d_state"]
    theta: Float[Array, " d_state"]

    def __init__(
        self,
        d_model: int,
        d_state: int,
        *,
        r_min: float = 0.0,
        r_max: float = 1.0,
        max_phase: float = 2 * math.pi,
        method: ScanMethod = "auto",
        dtype=None,
        key: PRNGKeyArray,
    ):
        """**Arguments:** as `eqx_lru.ComplexLRU`."""
        nu_log, theta_log, projections = _diagonal_init(
            d_model, d_state, r_min, r_max, max_phase, method, dtype, key
        )
        self.nu = jnp.exp(nu_log)
        self.theta = jnp.exp(theta_log)
        for name, value in projections.items():
            setattr(self, name, value)
        self.method = method

    def eigenvalues(self) -> Complex[Array, " d_state"]:
        modulus = jnp.exp(-self.nu)
        return jax.lax.complex(modulus * jnp.cos(self.theta), modulus * jnp.sin(self.theta))


class DiagonalStableExp(AbstractDiagonalRNN):
    r"""Complex diagonal RNN with the stable exponential parameterisation
    $\lambda = \exp(-e^{\nu_{\log}} + i e^{\theta_{\log}})$ (§3.3 "Enforcing stability";
    rows "Λ Stable Exp" and "+ Ring Init" of Table 2): fields `nu_log`, `theta_log`, named
    and initialised exactly as the LRU's, so this core is `eqx_lru.ComplexLRU` with
    $\gamma = 1$ and the last step of the ladder adds $\gamma$ alone.

    $|\lambda| < 1$ for every value of the parameters. The paper introduces the logarithmic
    phase $\theta = e^{\theta_{\log}}$ with the LRU in §3.4; it is used here already so that
    the two rungs differ only by $\gamma$.
    """

    recurrent_fields: ClassVar[tuple[str, ...]] = ("nu_log", "theta_log", "B_re", "B_im")

    nu_log: Float[Array, " d_state"]
    theta_log: Float[Array, " d_state"]

    def __init__(
        self,
        d_model: int,
        d_state: int,
        *,
        r_min: float = 0.0,
        r_max: float = 1.0,
        max_phase: float = 2 * math.pi,
        method: ScanMethod = "auto",
        dtype=None,
        key: PRNGKeyArray,
    ):
        """**Arguments:** as `eqx_lru.ComplexLRU`."""
        nu_log, theta_log, projections = _diagonal_init(
            d_model, d_state, r_min, r_max, max_phase, method, dtype, key
        )
        self.nu_log = nu_log
        self.theta_log = theta_log
        for name, value in projections.items():
            setattr(self, name, value)
        self.method = method

    def eigenvalues(self) -> Complex[Array, " d_state"]:
        modulus, phase = jnp.exp(-jnp.exp(self.nu_log)), jnp.exp(self.theta_log)
        return jax.lax.complex(modulus * jnp.cos(phase), modulus * jnp.sin(phase))


# --- §3.2.1: dense linear RNN -> complex diagonal RNN, exactly --------------------------


def to_diagonal(core: AbstractDenseRNN) -> DiagonalRealImag:
    r"""The complex diagonal RNN computing the same function as a linear dense RNN (§3.2.1).

    With the eigendecomposition $A = P \Lambda P^{-1}$, the state $\bar x_k = P^{-1} x_k$
    follows $\bar x_k = \Lambda \bar x_{k-1} + \bar B u_k$ with $\bar B = P^{-1} B$, and
    $y_k = C x_k + D u_k = \operatorname{Re}(\bar C \bar x_k) + D u_k$ with $\bar C = C P$
    (the product is real already, so taking the real part is exact). $\Lambda$ is stored
    directly as real and imaginary parts (`DiagonalRealImag`), with `d_state` complex modes:
    the conjugate eigenvalue pairs of a real $A$ make half of them redundant (the real Jordan
    form of §E.3 would halve it), but no information is lost.

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
    B_bar = np.linalg.solve(P, B)
    C_bar = C @ P
    dtype = core.D.dtype
    template = DiagonalRealImag(
        core.d_model, core.d_state, method=core.method, dtype=dtype, key=jax.random.key(0)
    )
    values = (
        eigenvalues.real,
        eigenvalues.imag,
        B_bar.real,
        B_bar.imag,
        C_bar.real,
        C_bar.imag,
    )
    return eqx.tree_at(
        lambda c: (c.lambda_re, c.lambda_im, c.B_re, c.B_im, c.C_re, c.C_im, c.D),
        template,
        tuple(jnp.asarray(v, dtype) for v in values) + (core.D,),
    )


# --- the registry -----------------------------------------------------------------------

AblationCore = DenseRNN | LinearDenseRNN | AbstractDiagonalRNN | ComplexLRU


def _no_ring(name: str, r_min, r_max, max_phase) -> None:
    given = [
        n
        for n, v in (("r_min", r_min), ("r_max", r_max), ("max_phase", max_phase))
        if v is not None
    ]
    if given:
        raise ValueError(
            f"The {name!r} rung has a Glorot-initialised dense A, whose spectrum is fixed "
            f"(uniform on the unit disk, Thm. 3.1), so it takes no ring options; got "
            f"{', '.join(given)}. Pass ring options only to the diagonal rungs."
        )


def make_rnn_tanh(
    d_model: int,
    d_state: int,
    *,
    key: PRNGKeyArray,
    r_min=None,
    r_max=None,
    max_phase=None,
    **options,
) -> DenseRNN:
    """Rung "rnn_tanh": `DenseRNN(nonlinearity="tanh")` (Table 1, RNN-Tanh)."""
    _no_ring("rnn_tanh", r_min, r_max, max_phase)
    return DenseRNN(d_model, d_state, nonlinearity="tanh", key=key, **options)


def make_rnn_relu(
    d_model: int,
    d_state: int,
    *,
    key: PRNGKeyArray,
    r_min=None,
    r_max=None,
    max_phase=None,
    **options,
) -> DenseRNN:
    """Rung "rnn_relu": `DenseRNN(nonlinearity="relu")` (Table 1, RNN-ReLU)."""
    _no_ring("rnn_relu", r_min, r_max, max_phase)
    return DenseRNN(d_model, d_state, nonlinearity="relu", key=key, **options)


def make_linear_dense(
    d_model: int,
    d_state: int,
    *,
    key: PRNGKeyArray,
    r_min=None,
    r_max=None,
    max_phase=None,
    **options,
) -> LinearDenseRNN:
    """Rung "linear_dense": `LinearDenseRNN` (Table 1, RNN-Lin; Table 2, Dense A)."""
    _no_ring("linear_dense", r_min, r_max, max_phase)
    return LinearDenseRNN(d_model, d_state, key=key, **options)


_UNIT_DISK = dict(r_min=0.0, r_max=1.0, max_phase=2 * math.pi)


def _ring_rung(cls: Callable[..., AblationCore], ring: dict, doc: str) -> Callable[..., AblationCore]:
    """A rung's factory for a core initialised on a ring: `ring` gives the defaults."""

    def make_core(
        d_model: int,
        d_state: int,
        *,
        key: PRNGKeyArray,
        r_min: float = ring["r_min"],
        r_max: float = ring["r_max"],
        max_phase: float = ring["max_phase"],
        **options,
    ) -> AblationCore:
        return cls(
            d_model, d_state, r_min=r_min, r_max=r_max, max_phase=max_phase, key=key, **options
        )

    make_core.__doc__ = doc
    return make_core


make_diag_realimag = _ring_rung(
    DiagonalRealImag, _UNIT_DISK,
    'Rung "diag_realimag": `DiagonalRealImag`, unit-disk init (Table 2, Λ Real + Im).',
)
make_diag_exp = _ring_rung(
    DiagonalExp, _UNIT_DISK, 'Rung "diag_exp": `DiagonalExp`, unit-disk init (Table 2, Λ Exp).'
)
make_diag_stable_exp = _ring_rung(
    DiagonalStableExp, _UNIT_DISK,
    'Rung "diag_stable_exp": `DiagonalStableExp`, unit-disk init (Table 2, Λ Stable Exp).',
)
make_diag_stable_exp_ring = _ring_rung(
    DiagonalStableExp, DEFAULT_RING,
    'Rung "diag_stable_exp_ring": `DiagonalStableExp` on a ring near the unit circle '
    "(Table 2, + Ring Init; tuned rings in Table 8), default `DEFAULT_RING`.",
)
make_lru = _ring_rung(
    ComplexLRU, DEFAULT_RING,
    'Rung "lru": `eqx_lru.ComplexLRU` (+ γ normalisation, §3.4; Tables 3, 8), default '
    "`DEFAULT_RING` like the previous rung.",
)


ABLATION_CORES: dict[str, Callable[..., AblationCore]] = {
    "rnn_tanh": make_rnn_tanh,
    "rnn_relu": make_rnn_relu,
    "linear_dense": make_linear_dense,
    "diag_realimag": make_diag_realimag,
    "diag_exp": make_diag_exp,
    "diag_stable_exp": make_diag_stable_exp,
    "diag_stable_exp_ring": make_diag_stable_exp_ring,
    "lru": make_lru,
}
"""The ladder in the paper's order: name → `make_core(d_model, d_state, *, key, r_min=,
r_max=, max_phase=, **options)`. Extra `options` (`dtype`, `method`) go to the core. Use as
`LRUBlock(..., form=functools.partial(ABLATION_CORES["diag_stable_exp_ring"], r_min=0.99))`.
The dense rungs take no ring options (a ValueError says so if given)."""
