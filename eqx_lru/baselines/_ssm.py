r"""The diagonal state space model that S4D and S5 share: complex modes discretised by
zero-order hold, run on the shared scan in either form (complex `Diagonal`, or real
`RotationScaling` pairs)."""

import abc
from typing import Any, Literal

import equinox as eqx
import jax
import jax.numpy as jnp
from beartype import beartype
from jaxtyping import Array, ArrayLike, Complex, Float, Inexact, jaxtyped

from .._checks import (
    check_form,
    check_sequence,
    check_state,
    check_token,
    complex_dtype,
)
from .._cores._core import AbstractStatesCore, check_takes_dt, rebuild
from .._cores._dt import check_dt
from .._scan._algebra import Diagonal, RotationScaling
from .._scan._recurrence import recurrence
from .._surface import checks_first
from ._common import Pair


class AbstractDiagonalSSM(AbstractStatesCore):
    r"""A diagonal SSM with conjugate-symmetric complex modes,

    $$x_k = \bar\Lambda \odot x_{k-1} + \bar B u_k, \qquad
    y_k = 2 \operatorname{Re}(C x_k) + D \odot u_k, \qquad x_{-1} = 0,$$

    $(\bar\Lambda, \bar B)$ the zero-order hold of the continuous system; see `S4D`
    ($H$ SISO systems) and `S5` (one MIMO system). Subclasses say how the parameters give
    $(\bar\Lambda, \bar B)$ (`_pairs`), how $\bar B$ drives the modes (`_drive`) and how
    $C$ reads them (`_readout`); the state layout, the two forms, `hidden_states`, `run`,
    `step` and `init_state` are shared (the contract of `eqx_lru.AbstractRecurrentCore`).

    **Forms.** `form="complex"`: complex states on the `Diagonal` scan. `form="real"`: the
    same recurrence with each mode a $2 \times 2$ rotation-scaling block on the
    `RotationScaling` scan, real arithmetic only; its states are planar, `(..., 2, modes)`
    (real parts, then imaginary parts). `to_form` (and `eqx_lru.to_real`/`to_complex`)
    switches between them, parameters shared.
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

    def to_form(self, form: Literal["complex", "real"]) -> "AbstractDiagonalSSM":
        """This core with `form=form`: the same parameters and function (see
        `eqx_lru.AbstractRecurrentCore.to_form`)."""
        if check_form(form) == self.form:
            return self
        if form == "complex":
            self._check_complex_dtype(self.D.dtype)
        return rebuild(type(self), self, form=form)

    @classmethod
    def _check_complex_dtype(cls, dtype) -> None:
        """A `ValueError` for a 16-bit `dtype` in complex form (no complex type)."""
        if jnp.dtype(dtype).itemsize < 4:
            raise ValueError(
                f"{cls.__name__} with `form='complex'` computes with complex numbers, and "
                f"`dtype={jnp.dtype(dtype).name}` has no complex type (complex64 is the "
                "smallest). Use `form='real'`, the same function in real arithmetic, or a "
                "float32/float64 `dtype`."
            )

    def _check_state(self, state: Array) -> None:
        check_state(state, self.init_state(), type(self).__name__)

    def hidden_states(
        self, u: Array, initial_state: Array | None = None, reverse: bool = False
    ) -> Inexact[Array, "length ..."]:
        """All states $x_0, \\dots, x_{L-1}$ in the form's layout (see `init_state`)."""
        return self._states(jnp.asarray(u), initial_state, reverse, None)

    def _discrete(self, u: Array, dt: Array | None) -> tuple[Pair, Pair]:
        r"""$(\bar\Lambda, \bar B u)$ as pairs, for a sequence or one token; with checked
        time steps `dt`, the zero-order hold over $\Delta \cdot \Delta t$ per step (cores
        that `takes_dt` implement `_discrete_over`)."""
        if dt is not None:
            return self._discrete_over(u, dt)
        lam, b = self._pairs()
        return lam, self._drive(u, b)

    def _discrete_over(self, u: Array, dt: Array) -> tuple[Pair, Pair]:
        raise NotImplementedError

    def _states(
        self, u, initial_state, reverse, segment_ids, dt=None
    ) -> Inexact[Array, "length ..."]:
        check_sequence(u, self.d_model, self.D.dtype)
        if initial_state is not None:
            initial_state = jnp.asarray(initial_state)
            self._check_state(initial_state)
        dt = None if dt is None else check_dt(dt, u.shape[0], self.D.dtype)
        lam, drive = self._discrete(u, dt)
        return recurrence(
            self._join(*lam), self._join(*drive), algebra=self._algebra(),
            initial_state=initial_state, reverse=reverse, method=self.method,
            segment_ids=segment_ids,
        )  # fmt: skip

    def _outputs(self, states, u, initial_state, reverse, segment_ids) -> Array:
        del initial_state, reverse, segment_ids
        return self._output(states, u)

    @checks_first(check_takes_dt)
    @jaxtyped(typechecker=beartype)
    def step(
        self,
        state: Inexact[ArrayLike, "..."],
        u_t: Float[ArrayLike, " d_model"],
        *,
        dt: ArrayLike | None = None,
    ) -> tuple[Inexact[Array, "..."], Float[Array, " d_model"]]:
        r"""One token in RNN mode: $x_t = \bar\Lambda x_{t-1} + \bar B u_t$; returns
        `(x_t, y_t)`. Repeated from `init_state()` it equals the parallel call. `dt`: this
        position's time step (a positive scalar, cores that `takes_dt`)."""
        state, u_t = jnp.asarray(state), jnp.asarray(u_t)
        check_token(u_t, self.d_model, self.D.dtype)
        self._check_state(state)
        lam, drive = self._discrete(u_t, None if dt is None else check_dt(dt, None, self.D.dtype))
        state = self._algebra().apply(self._join(*lam), state) + self._join(*drive)
        return state, self._output(state, u_t)
