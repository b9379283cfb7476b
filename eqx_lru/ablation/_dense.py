r"""Dense RNN cores (§2.1 eq. 1, §3.1): the first rungs of the ladder."""

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

from .._algebra import DenseAlgebra
from .._init import Size, check_key, check_size, float_dtype
from .._methods import AbstractScanMethod, scan_method
from .._scan import ScanMethod, linear_recurrence
from ._checks import check_input
from ._core import AbstractAblationCore


def _glorot(key: PRNGKeyArray, shape: tuple[int, int], dtype) -> Array:
    r"""Glorot normal, $\mathcal N(0, 2/(\text{fan\_in} + \text{fan\_out}))$. For the
    square $A$ this is $\mathcal N(0, 1/N)$, under which the spectrum fills the unit disk
    (Thm. 3.1, Fig. 2)."""
    fan_out, fan_in = shape
    return jax.random.normal(key, shape, dtype) * math.sqrt(2 / (fan_in + fan_out))


def _dense_init(d_model: Size, d_state: Size, dtype, key: PRNGKeyArray) -> tuple[Array, ...]:
    """`(A, B, C, D)` of `AbstractDenseRNN`, from one key."""
    d_model, d_state = check_size("d_model", d_model), check_size("d_state", d_state)
    check_key(key)
    dtype = float_dtype(dtype)
    a_key, b_key, c_key, d_key = jax.random.split(key, 4)
    return (
        _glorot(a_key, (d_state, d_state), dtype),
        _glorot(b_key, (d_state, d_model), dtype),
        _glorot(c_key, (d_model, d_state), dtype),
        jax.random.normal(d_key, (d_model,), dtype),
    )


class AbstractDenseRNN(AbstractAblationCore):
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

    def _readout(self, u: Array, reverse: bool) -> Float[Array, "length d_model"]:
        return self.hidden_states(u, reverse=reverse) @ self.C.T


_NONLINEARITIES: dict[str, Callable[[Array], Array]] = {"tanh": jnp.tanh, "relu": jax.nn.relu}


class DenseRNN(AbstractDenseRNN):
    r"""The vanilla nonlinear RNN of paper eq. 1 / §3.1 (rows RNN-Tanh and RNN-ReLU of
    Table 1): $x_k = \sigma(A x_{k-1} + B u_k)$ with $\sigma$ = tanh or ReLU.

    Nonlinear, so it runs on a plain sequential `jax.lax.scan`.
    """

    nonlinearity: Literal["tanh", "relu"] = eqx.field(static=True)

    def __init__(
        self,
        d_model: Size,
        d_state: Size,
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
        self.A, self.B, self.C, self.D = _dense_init(d_model, d_state, dtype, key)
        self.nonlinearity = nonlinearity

    @jaxtyped(typechecker=beartype)
    def hidden_states(
        self, u: Float[Array, "length d_model"], *, reverse: bool = False
    ) -> Float[Array, "length d_state"]:
        check_input(u, self.d_model)
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

    method: AbstractScanMethod = eqx.field(static=True)

    def __init__(
        self,
        d_model: Size,
        d_state: Size,
        *,
        method: ScanMethod = "sequential",
        dtype=None,
        key: PRNGKeyArray,
    ):
        """**Arguments:** `d_model` ($H$), `d_state` ($N$), `method` (a scan method of
        `eqx_lru.linear_recurrence`, object or string; default sequential, since a parallel
        scan of dense $N \\times N$ transitions costs $O(N^3)$ per combine), `dtype`, `key`."""
        self.A, self.B, self.C, self.D = _dense_init(d_model, d_state, dtype, key)
        self.method = scan_method(method)

    @jaxtyped(typechecker=beartype)
    def hidden_states(
        self, u: Float[Array, "length d_model"], *, reverse: bool = False
    ) -> Float[Array, "length d_state"]:
        check_input(u, self.d_model)
        return linear_recurrence(
            self.A, u @ self.B.T, algebra=DenseAlgebra(), reverse=reverse, method=self.method
        )
