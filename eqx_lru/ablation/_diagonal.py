r"""`DiagonalRNN`: the complex diagonal rungs of the ladder (§3.2, §3.3)."""

import math
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
from beartype import beartype
from jaxtyping import Array, Complex, Float, PRNGKeyArray, jaxtyped

from .. import _projection as projection
from .._algebra import Diagonal
from .._init import Size, lru_init
from .._methods import AbstractScanMethod, scan_method
from .._projection import Precision, check_precision
from .._scan import ScanMethod, recurrence
from .._storage import ComplexPairs
from ._checks import check_input
from ._core import AbstractAblationCore
from ._parameterisation import (
    PARAMETERISATIONS,
    AbstractParameterisation,
    ParameterisationName,
)


def _parameterisation_class(name: str) -> type[AbstractParameterisation]:
    if name not in PARAMETERISATIONS:
        raise ValueError(
            f"`parameterisation` must be one of {tuple(PARAMETERISATIONS)}, got {name!r}."
        )
    return PARAMETERISATIONS[name]


class DiagonalRNN(AbstractAblationCore):
    r"""A complex diagonal linear RNN without normalisation (§3.2):
    $x_k = \lambda \odot x_{k-1} + B u_k$, $y_k = \operatorname{Re}(C x_k) + D \odot u_k$,
    $x_{-1} = 0$, with $B = B_\text{re} + i B_\text{im}$, $C = C_\text{re} + i C_\text{im}$.

    The rungs differ only in how real parameters give $\lambda$ (`lambda_`, see
    `RealImag`, `Exp`, `StableExp`). With `"stable_exp"` this is `eqx_lru.ComplexLRU`
    without $\gamma$: same parameters from the same key, same scan and projections.

    **Fields:** `lambda_` (an `AbstractParameterisation`), `B_re`, `B_im`
    `(d_state, d_model)`, `C_re`, `C_im` `(d_model, d_state)`, `D` `(d_model,)`, all real
    and initialised as the LRU's (App. A); `method`, `precision` (static).
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
        cls = _parameterisation_class(parameterisation)
        params = lru_init(
            d_model, d_state, r_min=r_min, r_max=r_max, max_phase=max_phase, dtype=dtype,
            key=key,
        )  # fmt: skip
        self.lambda_ = cls.from_ring(params["nu_log"], params["theta_log"])
        self.B_re, self.B_im = params["B_re"], params["B_im"]
        self.C_re, self.C_im = params["C_re"], params["C_im"]
        self.D = params["D"]
        self.method = scan_method(method)
        self.precision = check_precision(precision)

    @property
    def d_state(self) -> int:
        return self.B_re.shape[0]

    @property
    def parameterisation(self) -> str:
        """The name of `lambda_`'s parameterisation."""
        return self.lambda_.name

    def eigenvalues(self) -> Complex[Array, " d_state"]:
        r"""The diagonal $\lambda$ of the recurrence."""
        return self.lambda_.eigenvalues()

    def _state_pairs(self, u: Array, reverse: bool) -> Float[Array, "length 2 d_state"]:
        r"""All states as planar pairs $[\operatorname{Re} x; \operatorname{Im} x]$."""
        check_input(u, self.d_model)
        no_gamma = jnp.ones(self.d_state, self.B_re.dtype)
        drive = projection.project_in(
            u, self.B_re, self.B_im, no_gamma, precision=self.precision
        )
        return recurrence(
            self.eigenvalues(),
            drive,
            algebra=Diagonal(),
            storage=ComplexPairs(),
            reverse=reverse,
            method=self.method,
        )

    @jaxtyped(typechecker=beartype)
    def hidden_states(
        self, u: Float[Array, "length d_model"], *, reverse: bool = False
    ) -> Complex[Array, "length d_state"]:
        """All hidden states $x_0, \\dots, x_{L-1}$ (complex)."""
        return ComplexPairs().load(self._state_pairs(u, reverse))

    def _readout(self, u: Array, reverse: bool) -> Float[Array, "length d_model"]:
        r"""$\operatorname{Re}(C x_k)$ for every position."""
        pairs = self._state_pairs(u, reverse)
        return projection.project_out(pairs, self.C_re, self.C_im, precision=self.precision)
