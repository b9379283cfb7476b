r"""The selective LRU's two forms, `ComplexSelectiveLRU` and `RealSelectiveLRU`: the same
parameters and function (`eqx_lru._cores._selective_core` has the maths, the
parameterisation and the initialisation they share), converted exactly into each other."""

from typing import TYPE_CHECKING, ClassVar, Literal

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Inexact

from .._checks import check_form, complex_dtype, complex_float_dtype, float_dtype
from .._scan._algebra import AbstractAlgebra, Diagonal, RotationScaling
from .._scan._storage import AbstractStorage, ComplexPairs, Identity
from ._selective_core import AbstractSelectiveLRU


def _in_form(core: AbstractSelectiveLRU, form: Literal["complex", "real"]) -> AbstractSelectiveLRU:
    """`core` in `form` (itself if it is in it already): `to_form` of both classes."""
    if check_form(form) == core.form:
        return core
    target = RealSelectiveLRU if form == "real" else ComplexSelectiveLRU
    return target._with_parameters_of(core)


class ComplexSelectiveLRU(AbstractSelectiveLRU):
    r"""The selective LRU with a complex diagonal state $x \in \mathbb C^N$ (`(d_state,)`,
    complex64 for float32 parameters); $\lambda_t$ is built as complex numbers in the
    forward pass, the projections are real matmuls. See `AbstractSelectiveLRU.__init__`
    for the arguments and the module docstring for the maths."""

    if TYPE_CHECKING:  # Equinox keeps the inherited `__init__`; say so to type checkers
        __init__ = AbstractSelectiveLRU.__init__

    algebra: ClassVar[AbstractAlgebra] = Diagonal()
    form: ClassVar[str] = "complex"
    _state_layout: ClassVar[str] = "complex, one entry per mode"

    @classmethod
    def _check_dtype(cls, dtype) -> jnp.dtype:
        return complex_float_dtype(
            dtype, "ComplexSelectiveLRU", "`RealSelectiveLRU` (or `eqx_lru.to_real(layer)`)"
        )

    def init_state(self) -> Inexact[Array, " d_state"]:
        return jnp.zeros(self.d_state, complex_dtype(self.nu_log.dtype))

    def _pack(self, a_re, a_im) -> Array:
        return jax.lax.complex(a_re, a_im)

    def _storage(self) -> AbstractStorage:
        return ComplexPairs()

    def _to_algebra(self, state: Array) -> Array:
        return state

    def _from_algebra(self, h: Array) -> Array:
        return h

    def to_form(self, form: Literal["complex", "real"]) -> AbstractSelectiveLRU:
        """`RealSelectiveLRU.from_complex(self)` for `"real"`, itself for `"complex"`."""
        return _in_form(self, form)

    @classmethod
    def from_real(cls, core: "RealSelectiveLRU") -> "ComplexSelectiveLRU":
        """The same function in complex form: exact, the parameters are shared."""
        return cls._with_parameters_of(core)


class RealSelectiveLRU(AbstractSelectiveLRU):
    r"""The selective LRU in real Jordan form: mode $n$ keeps
    $(\operatorname{Re} x_n, \operatorname{Im} x_n)$ and evolves at position $t$ by the
    2×2 rotation-scaling block $r_{t,n} \begin{pmatrix}\cos\theta_{t,n} & -\sin\theta_{t,n}
    \\ \sin\theta_{t,n} & \cos\theta_{t,n}\end{pmatrix}$ (`eqx_lru.RotationScaling`,
    time-varying): the same parameters and function as `ComplexSelectiveLRU`, real dtypes
    only. See `AbstractSelectiveLRU.__init__` for the arguments.

    **State layout: `(d_state, 2)`**, row $n$ = $[\operatorname{Re} x_n,
    \operatorname{Im} x_n]$, as `eqx_lru.RealLRU`'s."""

    if TYPE_CHECKING:  # Equinox keeps the inherited `__init__`; say so to type checkers
        __init__ = AbstractSelectiveLRU.__init__

    algebra: ClassVar[AbstractAlgebra] = RotationScaling()
    form: ClassVar[str] = "real"
    _state_layout: ClassVar[str] = "(d_state, 2): [Re x, Im x] per mode"

    @classmethod
    def _check_dtype(cls, dtype) -> jnp.dtype:
        return float_dtype(dtype)

    def _state_hint(self, state: Array) -> str:
        if state.shape == (2, self.d_state):
            return " It looks transposed: pass `state.T` (the pair is the last axis)."
        return ""

    def init_state(self) -> Float[Array, "d_state 2"]:
        return jnp.zeros((self.d_state, 2), self.nu_log.dtype)

    def _pack(self, a_re, a_im) -> Array:
        return jnp.stack([a_re, a_im], axis=-2)

    def _storage(self) -> AbstractStorage:
        return Identity()

    def _to_algebra(self, state: Array) -> Array:
        return jnp.swapaxes(state, -1, -2)

    def _from_algebra(self, h: Array) -> Array:
        return jnp.swapaxes(h, -1, -2)

    def to_form(self, form: Literal["complex", "real"]) -> AbstractSelectiveLRU:
        """`ComplexSelectiveLRU.from_real(self)` for `"complex"`, itself for `"real"`."""
        return _in_form(self, form)

    @classmethod
    def from_complex(cls, core: ComplexSelectiveLRU) -> "RealSelectiveLRU":
        """The same function in real form: exact, the parameters are shared."""
        return cls._with_parameters_of(core)
