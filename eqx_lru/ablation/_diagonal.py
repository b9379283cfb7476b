r"""`DiagonalRNN`: the complex diagonal rungs of the ladder (§3.2, §3.3)."""

import math
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Complex, Float, PRNGKeyArray

from .._checks import Size, check_choice, complex_dtype, complex_float_dtype
from .._cores._init import lru_init
from .._cores._modal_core import AbstractModalCore
from .._cores._projection import Precision, check_precision
from .._scan._algebra import AbstractAlgebra, Diagonal
from .._scan._methods import AbstractScanMethod, scan_method
from .._scan._recurrence import ScanMethod
from .._scan._storage import AbstractStorage, ComplexPairs
from ._core import AbstractAblationCore
from ._parameterisation import (
    PARAMETERISATIONS,
    AbstractParameterisation,
    ParameterisationName,
)


class DiagonalRNN(AbstractModalCore, AbstractAblationCore):
    r"""A complex diagonal linear RNN without normalisation (§3.2):
    $x_k = \lambda \odot x_{k-1} + B u_k$, $y_k = \operatorname{Re}(C x_k) + D \odot u_k$,
    $x_{-1} = 0$, with $B = B_\text{re} + i B_\text{im}$, $C = C_\text{re} + i C_\text{im}$.

    The rungs differ only in how real parameters give $\lambda$ (`lambda_`, see
    `RealImag`, `Exp`, `StableExp`). With `"stable_exp"` this is `eqx_lru.ComplexLRU`
    without $\gamma$: same parameters from the same key, same scan and projections.

    **Fields:** `lambda_` (an `AbstractParameterisation`), `B_re`, `B_im`
    `(d_state, d_model)`, `C_re`, `C_im` `(d_model, d_state)`, `D` `(d_model,)`, all real
    and initialised as the LRU's (App. A); `method`, `precision` (static).

    The state is complex, `(d_state,)`, as `eqx_lru.ComplexLRU`'s; `run`, `step` and the
    call are the LRU's (`eqx_lru._cores._modal_core.AbstractModalCore`) with $\gamma = 1$.
    """

    lambda_: AbstractParameterisation
    B_re: Float[Array, "d_state d_model"]
    B_im: Float[Array, "d_state d_model"]
    C_re: Float[Array, "d_model d_state"]
    C_im: Float[Array, "d_model d_state"]
    D: Float[Array, " d_model"]
    method: AbstractScanMethod = eqx.field(static=True)
    precision: jax.lax.Precision | None = eqx.field(static=True)

    #: λ's parameters and B get the reduced learning rate and no weight decay (§D.2).
    recurrent_fields: ClassVar[tuple[str, ...]] = ("lambda_", "B_re", "B_im")
    algebra: ClassVar[AbstractAlgebra] = Diagonal()
    _state_layout: ClassVar[str] = "complex, one entry per mode"

    def __init__(
        self,
        d_model: Size,
        d_state: Size,
        *,
        parameterisation: ParameterisationName = "stable_exp",
        r_min: float = 0.0,
        r_max: float = 1.0,
        max_phase: float = 2 * math.pi,
        method: ScanMethod = "auto",
        precision: Precision = None,
        dtype=None,
        key: PRNGKeyArray,
    ):
        r"""**Arguments:**

        - `d_model` ($H$), `d_state` ($N$, complex modes).
        - `parameterisation`: `"real_imag"` ($\lambda = a + ib$), `"exp"`
            ($e^{-\nu + i\theta}$) or `"stable_exp"` ($\exp(-e^{\nu_{\log}} + ie^{\theta_{\log}})$).
        - `r_min`, `r_max`, `max_phase`: $\lambda$ starts uniform on this ring (Lemma 3.2);
            the default unit disk matches the spectrum of a Glorot dense $A$ (Thm. 3.1).
        - `method`, `precision`, `dtype`, `key`: as `eqx_lru.ComplexLRU`.
        """
        check_choice("parameterisation", parameterisation, tuple(PARAMETERISATIONS))
        cls = PARAMETERISATIONS[parameterisation]
        dtype = complex_float_dtype(
            dtype, "DiagonalRNN", "`eqx_lru.RealLRU` (the LRU in real arithmetic)"
        )
        ring = dict(r_min=r_min, r_max=r_max, max_phase=max_phase)
        params = lru_init(d_model, d_state, dtype=dtype, key=key, **ring)
        self.lambda_ = cls.from_ring(params["nu_log"], params["theta_log"])
        self.B_re, self.B_im = params["B_re"], params["B_im"]
        self.C_re, self.C_im = params["C_re"], params["C_im"]
        self.D = params["D"]
        self.method = scan_method(method)
        self.precision = check_precision(precision)

    @property
    def parameterisation(self) -> str:
        """The name of `lambda_`'s parameterisation."""
        return self.lambda_.name

    def eigenvalues(self) -> Complex[Array, " d_state"]:
        r"""The diagonal $\lambda$ of the recurrence."""
        return self.lambda_.eigenvalues()

    def init_state(self) -> Complex[Array, " d_state"]:
        return jnp.zeros(self.d_state, complex_dtype(self.D.dtype))

    def _transition(self) -> Complex[Array, " d_state"]:
        return self.eigenvalues()

    def _gamma(self) -> Float[Array, " d_state"]:
        return jnp.ones(self.d_state, self.B_re.dtype)

    def _storage(self) -> AbstractStorage:
        return ComplexPairs()

    def _to_algebra(self, state: Array) -> Array:
        return state

    def _from_algebra(self, h: Array) -> Array:
        return h
