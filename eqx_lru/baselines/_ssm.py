r"""The diagonal state space model that S4D and S5 share: complex modes discretised by
zero-order hold, run on the shared scan in either form (complex `Diagonal`, or real
`RotationScaling` pairs)."""

import abc
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
from beartype import beartype
from jaxtyping import Array, Complex, Float, Inexact, PRNGKeyArray, jaxtyped

from .. import Diagonal, RotationScaling, linear_recurrence
from ._common import Pair, check_sequence, check_state, complex_dtype


class AbstractDiagonalSSM(eqx.Module):
    r"""A diagonal SSM with conjugate-symmetric complex modes,

    $$x_k = \bar\Lambda \odot x_{k-1} + \bar B u_k, \qquad
    y_k = 2 \operatorname{Re}(C x_k) + D \odot u_k, \qquad x_{-1} = 0,$$

    $(\bar\Lambda, \bar B)$ the zero-order hold of the continuous system; see `S4D`
    ($H$ SISO systems) and `S5` (one MIMO system). Subclasses say how the parameters give
    $(\bar\Lambda, \bar B)$ (`_pairs`), how $\bar B$ drives the modes (`_drive`), how $C$
    reads them (`_readout`) and how a sequence is run (`_run`); the state layout,
    the two forms, `hidden_states`, `step` and `init_state` are shared.

    **Forms.** `form="complex"`: complex states on the `Diagonal` scan. `form="real"`: the
    same recurrence with each mode a $2 \times 2$ rotation-scaling block on the
    `RotationScaling` scan, real arithmetic only; its states are planar, `(..., 2, modes)`
    (real parts, then imaginary parts).
    """

    C_re: eqx.AbstractVar[Float[Array, "d_model modes"]]
    C_im: eqx.AbstractVar[Float[Array, "d_model modes"]]
    D: eqx.AbstractVar[Float[Array, " d_model"]]
    form: eqx.AbstractVar[str]
    method: eqx.AbstractVar[Any]

    @abc.abstractmethod
    def continuous(self) -> Complex[Array, "..."]:
        r"""The continuous-time eigenvalues."""

    @abc.abstractmethod
    def _pairs(self) -> tuple[Pair, Pair]:
        r"""$(\bar\Lambda, \bar B)$ as (real, imaginary) pairs; $\bar\Lambda$ has the
        shape of the complex state."""

    @abc.abstractmethod
    def _drive(self, u: Array, b: Pair) -> Pair:
        r"""$\bar B u$ as a (real, imaginary) pair, for `u` of shape `(..., d_model)`."""

    @abc.abstractmethod
    def _readout(self, x_re: Array, x_im: Array) -> Array:
        r"""$\operatorname{Re}(C x)$, shape `(..., d_model)`, for the parts of `x`."""

    @abc.abstractmethod
    def _run(self, u: Array, initial_state: Array | None, reverse: bool) -> Array:
        """The output sequence of `__call__`: `_output` of `hidden_states`, or another way
        to compute it (S4D's convolution mode)."""

    @abc.abstractmethod
    def _state_shape(self) -> tuple[int, ...]:
        """The shape of the complex state."""

    @property
    def d_model(self) -> int:
        return self.D.shape[0]

    @property
    def d_state(self) -> int:
        """The real state size: twice the number of complex modes of each system."""
        return 2 * self.C_re.shape[-1]

    def discretise(self) -> tuple[Complex[Array, "..."], Complex[Array, "..."]]:
        r"""$(\bar\Lambda, \bar B)$ of the zero-order hold, complex."""
        (lam_re, lam_im), (b_re, b_im) = self._pairs()
        return jax.lax.complex(lam_re, lam_im), jax.lax.complex(b_re, b_im)

    def _algebra(self):
        return RotationScaling() if self.form == "real" else Diagonal()

    def _join(self, re: Array, im: Array) -> Array:
        """A (real, imaginary) pair in the form's layout: complex, or planar `(..., 2, M)`."""
        return jnp.stack([re, im], axis=-2) if self.form == "real" else jax.lax.complex(re, im)

    def _split(self, x: Array) -> tuple[Array, Array]:
        return (x[..., 0, :], x[..., 1, :]) if self.form == "real" else (x.real, x.imag)

    def init_state(self) -> Inexact[Array, "..."]:
        """The zero state $x_{-1}$: complex, or real planar pairs `(..., 2, d_state // 2)`
        with `form="real"` (shapes in the core's docstring)."""
        shape = self._state_shape()
        if self.form == "real":
            return jnp.zeros(shape[:-1] + (2,) + shape[-1:], self.D.dtype)
        return jnp.zeros(shape, complex_dtype(self.D.dtype))

    def _output(self, x: Array, u: Array) -> Array:
        return 2 * self._readout(*self._split(x)) + self.D * u

    @jaxtyped(typechecker=beartype)
    def __call__(
        self,
        u: Float[Array, "length d_model"],
        *,
        initial_state: Inexact[Array, "..."] | None = None,
        reverse: bool = False,
        key: PRNGKeyArray | None = None,
    ) -> Float[Array, "length d_model"]:
        r"""**Arguments:** `u` `(length, d_model)`, one sequence (batch with `jax.vmap`);
        `initial_state` (default zero, see `init_state`); `reverse=True` runs from the last
        step; `key` ignored.

        **Returns:** $y_k = 2 \operatorname{Re}(C x_k) + D \odot u_k$, `(length, d_model)`.
        """
        del key
        return self._run(u, initial_state, reverse)

    def hidden_states(
        self, u: Array, initial_state: Array | None = None, reverse: bool = False
    ) -> Inexact[Array, "length ..."]:
        """All states $x_0, \\dots, x_{L-1}$ in the form's layout (see `init_state`)."""
        check_sequence(u, self.d_model, self.D.dtype)
        if initial_state is not None:
            check_state(initial_state, self.init_state(), "initial_state")
        lam, b = self._pairs()
        return linear_recurrence(
            self._join(*lam), self._join(*self._drive(u, b)), algebra=self._algebra(),
            initial_state=initial_state, reverse=reverse, method=self.method,
        )

    @jaxtyped(typechecker=beartype)
    def step(
        self, state: Inexact[Array, "..."], u_t: Float[Array, " d_model"]
    ) -> tuple[Inexact[Array, "..."], Float[Array, " d_model"]]:
        r"""One token in RNN mode: $x_t = \bar\Lambda x_{t-1} + \bar B u_t$; returns
        `(x_t, y_t)`. Repeated from `init_state()` it equals the parallel call."""
        check_sequence(u_t[None], self.d_model, self.D.dtype)
        check_state(state, self.init_state())
        lam, b = self._pairs()
        state = self._algebra().apply(self._join(*lam), state) + self._join(*self._drive(u_t, b))
        return state, self._output(state, u_t)
