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
from jaxtyping import Array, ArrayLike, Complex, Float, PRNGKeyArray, jaxtyped

from .._checks import (
    Size,
    check_choice,
    check_fits,
    check_key,
    check_sequence,
    check_size,
    check_state,
    check_token,
    float_dtype,
)
from .._cores._core import check_takes_dt
from .._scan._algebra import DenseAlgebra
from .._scan._methods import AbstractScanMethod, scan_method
from .._scan._recurrence import ScanMethod, recurrence, segment_starts
from .._scan._varying import vary_like
from .._surface import checks_first
from ._core import AbstractAblationCore


def _glorot(key: PRNGKeyArray, shape: tuple[int, int], dtype) -> Array:
    r"""Glorot normal, $\mathcal N(0, 2/(\text{fan_in} + \text{fan_out}))$. For the
    square $A$ this is $\mathcal N(0, 1/N)$, under which the spectrum fills the unit disk
    (Thm. 3.1, Fig. 2)."""
    fan_out, fan_in = shape
    return jax.random.normal(key, shape, dtype) * math.sqrt(2 / (fan_in + fan_out))


def _dense_init(d_model: Size, d_state: Size, dtype, key: PRNGKeyArray) -> tuple[Array, ...]:
    """`(A, B, C, D)` of `AbstractDenseRNN`, from one key."""
    d_model = check_size("d_model", d_model)
    d_state = check_size("d_state", d_state, "a dense RNN: the real state size N")
    check_key(key)
    dtype = float_dtype(dtype)
    owner = f"A dense RNN with d_model={d_model}, d_state={d_state}"
    check_fits(owner, dtype, d_state * d_state + 2 * d_model * d_state + d_model)
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
    all Glorot normal $\mathcal N(0, 2/(\text{fan_in} + \text{fan_out}))$ as in the
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
    def _cell(self, x: Array, bu: Array) -> Array:
        r"""$x_k$ from $x_{k-1}$ and $B u_k$: $\sigma(A x_{k-1} + B u_k)$."""

    @abc.abstractmethod
    def _scan(
        self, bu: Array, initial_state: Array, reverse: bool, segment_ids: Array | None
    ) -> Float[Array, "length d_state"]:
        """All states from the inputs $B u_k$ (one sequence), `_cell` after `_cell`."""

    def eigenvalues(self) -> Complex[Array, " d_state"]:
        """The eigenvalues of `A` (for analysis; computed on the host with NumPy, so not
        traceable under `jit`)."""
        return jnp.asarray(np.linalg.eigvals(np.asarray(self.A)))

    def init_state(self) -> Float[Array, " d_state"]:
        r"""The zero state $x_{-1}$, `(d_state,)`."""
        return jnp.zeros(self.d_state, self.A.dtype)

    def _check_state(self, state: Array) -> None:
        check_state(state, self.init_state(), type(self).__name__)

    def hidden_states(
        self, u: Array, *, initial_state: Array | None = None, reverse: bool = False
    ) -> Float[Array, "length d_state"]:
        """All hidden states $x_0, \\dots, x_{L-1}$ (as in `run`)."""
        return self._states(jnp.asarray(u), initial_state, reverse, None)

    def _states(
        self, u, initial_state, reverse, segment_ids, dt=None
    ) -> Float[Array, "length d_state"]:
        del dt  # no time steps (refused by the public methods)
        check_sequence(u, self.d_model)
        initial_state = self.init_state() if initial_state is None else jnp.asarray(initial_state)
        self._check_state(initial_state)
        return self._scan(u @ self.B.T, initial_state, reverse, segment_ids)

    def _outputs(self, states, u, initial_state, reverse, segment_ids) -> Array:
        del initial_state, reverse, segment_ids
        return states @ self.C.T + self.D * u

    @checks_first(check_takes_dt)
    @jaxtyped(typechecker=beartype)
    def step(
        self,
        state: Float[ArrayLike, " d_state"],
        u_t: Float[ArrayLike, " d_model"],
        *,
        dt: ArrayLike | None = None,
    ) -> tuple[Float[Array, " d_state"], Float[Array, " d_model"]]:
        r"""One position: $x_t = \sigma(A x_{t-1} + B u_t)$, $y_t = C x_t + D u_t$. `dt`:
        `None` (a dense RNN takes no time steps, and refuses any other value)."""
        del dt  # refused when not `None` (`check_takes_dt`)
        state, u_t = jnp.asarray(state), jnp.asarray(u_t)
        check_token(u_t, self.d_model)
        self._check_state(state)
        x = self._cell(state, self.B @ u_t)
        return x, self.C @ x + self.D * u_t


_NONLINEARITIES: dict[str, Callable[[Array], Array]] = {"tanh": jnp.tanh, "relu": jax.nn.relu}


class DenseRNN(AbstractDenseRNN):
    r"""The vanilla nonlinear RNN of paper eq. 1 / §3.1 (rows RNN-Tanh and RNN-ReLU of
    Table 1): $x_k = \sigma(A x_{k-1} + B u_k)$ with $\sigma$ = tanh or ReLU.

    Nonlinear, so it runs on a plain sequential `jax.lax.scan` (with `segment_ids`, the
    carry is reset to zero at each segment start). Causal: $x_k$ depends on
    $u_0, \dots, u_k$ only, and zero input keeps a zero state ($\sigma(0) = 0$).
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
        check_choice("nonlinearity", nonlinearity, tuple(_NONLINEARITIES))
        self.A, self.B, self.C, self.D = _dense_init(d_model, d_state, dtype, key)
        self.nonlinearity = nonlinearity

    def _cell(self, x: Array, bu: Array) -> Array:
        return _NONLINEARITIES[self.nonlinearity](self.A @ x + bu)

    def _scan(self, bu, initial_state, reverse, segment_ids):
        if segment_ids is None:
            starts = jnp.zeros(bu.shape[:1], bool)
        else:
            starts = segment_starts(segment_ids, reverse=reverse)

        def step(x, inputs):
            bu_k, start = inputs
            x = self._cell(jnp.where(start, jnp.zeros_like(x), x), bu_k)
            return x, x

        # Inside `jax.shard_map`, the carry keeps the type of the inputs it is mixed with.
        initial_state, bu = vary_like(initial_state, bu)
        _, states = jax.lax.scan(step, initial_state, (bu, starts), reverse=reverse)
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

    def _cell(self, x: Array, bu: Array) -> Array:
        return self.A @ x + bu

    def _scan(self, bu, initial_state, reverse, segment_ids):
        return recurrence(
            self.A, bu, algebra=DenseAlgebra(), initial_state=initial_state,
            reverse=reverse, method=self.method, segment_ids=segment_ids,
        )  # fmt: skip
