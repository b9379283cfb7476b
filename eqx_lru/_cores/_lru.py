r"""The Linear Recurrent Unit in two equivalent forms.

Both forms hold the same real parameters (paper App. A):
$\lambda = \exp(-e^{\nu_{\log}} + i e^{\theta_{\log}})$, $\gamma = e^{\gamma_{\log}}$,
$B = B_\text{re} + i B_\text{im}$, $C = C_\text{re} + i C_\text{im}$, and compute

$$x_k = \lambda \odot x_{k-1} + \gamma \odot (B u_k), \qquad
y_k = \operatorname{Re}(C x_k) + D \odot u_k .$$

`ComplexLRU` keeps a complex diagonal state. `RealLRU` keeps the real state
$(\operatorname{Re} x, \operatorname{Im} x)$ per mode and multiplies it by the 2×2
rotation-scaling block $|\lambda| R(\theta)$ — the real Jordan form of §E.3 — so no complex
number appears anywhere in its computation. Both project with real matmuls only
(`eqx_lru._cores._projection`): $[\operatorname{Re}; \operatorname{Im}](\gamma B u) =
[\gamma B_\text{re}; \gamma B_\text{im}]\, u$ and
$\operatorname{Re}(C x) = C_\text{re} \operatorname{Re} x - C_\text{im} \operatorname{Im} x$.
"""

import abc
import math
from typing import TYPE_CHECKING, ClassVar, Literal, TypeVar

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Complex, Float, Inexact, PRNGKeyArray

from .._checks import (
    Size,
    as_dtype,
    check_form,
    check_key,
    check_size,
    complex_dtype,
    complex_float_dtype,
    float_dtype,
)
from .._scan._algebra import AbstractAlgebra, Diagonal, RotationScaling
from .._scan._methods import AbstractScanMethod, scan_method
from .._scan._recurrence import ScanMethod
from .._scan._storage import AbstractStorage, Cast, ComplexPairs, Identity
from ._core import rebuild
from ._discretization import Discretization, check_discretization, hold_weight, weigh_pairs
from ._dt import scaled_polar
from ._init import lru_init
from ._modal_core import AbstractModalCore
from ._projection import Precision, check_precision


def polar(modulus: Float[Array, " n"], phase: Float[Array, " n"]) -> Complex[Array, " n"]:
    r"""$\lambda = |\lambda| (\cos\arg\lambda + i \sin\arg\lambda)$ from its modulus and
    phase: `AbstractLRU.eigenvalues`."""
    return jax.lax.complex(modulus * jnp.cos(phase), modulus * jnp.sin(phase))


_LRU = TypeVar("_LRU", bound="AbstractLRU")


class AbstractLRU(AbstractModalCore):
    r"""A Linear Recurrent Unit layer (Orvieto et al. 2023); see `ComplexLRU`, `RealLRU`.

    **Fields** (real arrays, shared by both forms):

    - `nu_log`, `theta_log`, `gamma_log`: shape `(d_state,)`;
        $|\lambda| = e^{-e^{\nu_{\log}}}$, $\arg\lambda = e^{\theta_{\log}}$,
        $\gamma = e^{\gamma_{\log}}$.
    - `B_re`, `B_im`: shape `(d_state, d_model)`; `C_re`, `C_im`: `(d_model, d_state)`;
        `D`: `(d_model,)`.
    - `method`, `precision`, `compute_dtype`, `discretization`: static options, see
        `__init__`.

    **Class attributes:** `recurrent_fields`, the fields that get the optimiser's recurrent
    group ($\nu$, $\theta$, $\gamma$, $B$: smaller learning rate, no weight decay, §D.2;
    see `eqx_lru.lru_param_labels`); `algebra`, the scan algebra of the form.

    ??? cite

        ```bibtex
        @inproceedings{orvieto2023resurrecting,
          title={Resurrecting Recurrent Neural Networks for Long Sequences},
          author={Orvieto, Antonio and Smith, Samuel L. and Gu, Albert and
                  Fernando, Anushan and Gulcehre, Caglar and Pascanu, Razvan and De, Soham},
          booktitle={International Conference on Machine Learning},
          year={2023}
        }
        ```
    """

    nu_log: Float[Array, " d_state"]
    theta_log: Float[Array, " d_state"]
    gamma_log: Float[Array, " d_state"]
    B_re: Float[Array, "d_state d_model"]
    B_im: Float[Array, "d_state d_model"]
    C_re: Float[Array, "d_model d_state"]
    C_im: Float[Array, "d_model d_state"]
    D: Float[Array, " d_model"]
    method: AbstractScanMethod = eqx.field(static=True)
    precision: jax.lax.Precision | None = eqx.field(static=True)
    compute_dtype: str | None = eqx.field(static=True)
    discretization: str = eqx.field(static=True)

    recurrent_fields: ClassVar[tuple[str, ...]] = (
        "nu_log",
        "theta_log",
        "gamma_log",
        "B_re",
        "B_im",
    )
    algebra: eqx.AbstractClassVar[AbstractAlgebra]
    takes_dt: ClassVar[bool] = True

    def __init__(
        self,
        d_model: Size,
        d_state: Size,
        *,
        r_min: float = 0.0,
        r_max: float = 1.0,
        max_phase: float = 2 * math.pi,
        method: ScanMethod = "auto",
        precision: Precision = None,
        dtype=None,
        compute_dtype=None,
        discretization: Discretization | str = "impulse",
        key: PRNGKeyArray,
    ):
        r"""**Arguments:**

        - `d_model`: $H$, the input and output features.
        - `d_state`: $N$, the number of complex modes (`RealLRU` stores $2N$ reals).
        - `r_min`, `r_max`: the ring $r_\min \le |\lambda| \le r_\max \le 1$ of Lemma 3.2.
        - `max_phase`: phases are initialised uniform on $[0, \text{max_phase}]$ (§3.4).
        - `method`: the scan method, an `eqx_lru.AbstractScanMethod` (`Sequential(unroll=…)`,
            `Associative()`, `Auto()`, …) or a string shortcut `"auto"`, `"sequential"`,
            `"associative"`, `"pallas"`; stored as the object.
        - `precision`: of every projection matmul (parallel call and `step`): `None`
            (default) is JAX's default — on NVIDIA GPUs float32 matmuls then run in TF32,
            about 3e-4 relative error against float64 (see the documentation's
            performance page); `"highest"` (or
            `jax.lax.Precision.HIGHEST`) gives float32-exact products there, at a speed
            cost. On the CPU both are float32-exact. See `jax.lax.dot_general`.
        - `dtype`: real floating dtype of the parameters (default: JAX's default float).
        - `compute_dtype`: `RealLRU` only: a lower-precision floating dtype such as
            `jnp.bfloat16` for the projections' operands and the stored states, with
            accumulation in the parameters' dtype: the matmuls accumulate in it
            (`preferred_element_type`) and the recurrence carries its state in it, rounding
            only what it stores. Gradients flow the same way: the projections' backward
            products take the cotangents rounded to it. The output, `init_state()` and
            `step`'s state keep the parameters' dtype. Halves the memory of the
            sequence-long arrays; its error against float32 is measured on the
            documentation's performance page. `None` (default): compute in the
            parameters' dtype.
        - `discretization`: what an input means when `dt` is not 1
            (`eqx_lru._cores._discretization`; every choice is the same layer at
            $\Delta t \equiv 1$ and without `dt`):
            `"impulse"` (default) $x_k = \lambda^{\Delta t_k} x_{k-1} + \gamma B u_k$, each
            input an event whose weight does not depend on the gap; `"zoh"` the input held
            over its step, $x_k = \lambda^{\Delta t_k} x_{k-1} + w_k \gamma B u_k$ with
            $w_k = (\lambda^{\Delta t_k} - 1)/(\lambda - 1)$ (a sampled signal: resampling
            it keeps the function). See the concepts page on time steps.
        - `key`: a `jax.random.PRNGKey`. The same key gives the same parameters in both forms.
        """
        d_model = check_size("d_model", d_model)
        d_state = check_size("d_state", d_state, f"{type(self).__name__}: the complex modes N")
        check_key(key)
        discretization = check_discretization(
            discretization, ("impulse", "zoh"), type(self).__name__
        )
        dtype = self._check_dtype(dtype)
        method = scan_method(method)
        ring = dict(r_min=r_min, r_max=r_max, max_phase=max_phase)
        params = lru_init(d_model, d_state, dtype=dtype, key=key, **ring)
        self.nu_log = params["nu_log"]
        self.theta_log = params["theta_log"]
        self.gamma_log = params["gamma_log"]
        self.B_re = params["B_re"]
        self.B_im = params["B_im"]
        self.C_re = params["C_re"]
        self.C_im = params["C_im"]
        self.D = params["D"]
        self.method = method
        self.precision = check_precision(precision)
        self.compute_dtype = self._check_compute_dtype(compute_dtype, self.nu_log.dtype)
        self.discretization = discretization

    # --- the maths shared by both forms -------------------------------------------------

    def modulus(self) -> Float[Array, " d_state"]:
        r"""$|\lambda| = \exp(-e^{\nu_{\log}}) < 1$."""
        return jnp.exp(-jnp.exp(self.nu_log))

    def phase(self) -> Float[Array, " d_state"]:
        r"""$\arg\lambda = e^{\theta_{\log}}$."""
        return jnp.exp(self.theta_log)

    def eigenvalues(self) -> Complex[Array, " d_state"]:
        r"""The complex diagonal $\lambda$ (for analysis; `RealLRU` never computes it)."""
        return polar(self.modulus(), self.phase())

    def _transition(self) -> Inexact[Array, "..."]:
        return self._pack(self.modulus(), self.phase())

    def _transition_over(self, dt: Float[Array, "*length"]) -> Inexact[Array, "..."]:
        r"""$\lambda^{\Delta t} = |\lambda|^{\Delta t} e^{i\theta\Delta t}$, with
        $|\lambda|^{\Delta t} = \exp(-e^{\nu_{\log}} \Delta t)$ (equal to `modulus()`,
        bit for bit, at $\Delta t = 1$)."""
        return self._pack(*scaled_polar(-jnp.exp(self.nu_log), self.phase(), dt))

    def _weigh(self, drive, dt):
        r"""`"zoh"`: $w \odot \gamma B u_k$ with $w = (\lambda^{\Delta t_k} - 1)/(\lambda - 1)$,
        the same real numbers in both forms (`eqx_lru._cores._discretization.hold_weight`)."""
        if dt is None or self.discretization == "impulse":
            return drive
        w_re, w_im = hold_weight(-jnp.exp(self.nu_log), self.phase(), dt[..., None])
        return weigh_pairs(drive, w_re, w_im)

    @abc.abstractmethod
    def _pack(self, modulus: Float[Array, "..."], phase: Float[Array, "..."]) -> Array:
        r"""The transitions of modulus and phase (`(..., d_state)` each) in the form's
        algebra: complex $m e^{i\phi}$, or the planar pairs $(m\cos\phi, m\sin\phi)$."""

    @classmethod
    def _check_compute_dtype(cls, compute_dtype, param_dtype) -> str | None:
        if compute_dtype is None:
            return None
        dtype = as_dtype(compute_dtype, "compute_dtype")
        if not jnp.issubdtype(dtype, jnp.floating):
            raise ValueError(
                f"`compute_dtype` must be a real floating dtype such as jnp.bfloat16, got {dtype}."
            )
        return None if dtype == param_dtype else dtype.name

    def _projection_options(self) -> dict:
        return dict(precision=self.precision, compute_dtype=self.compute_dtype)

    def _gamma(self) -> Float[Array, " d_state"]:
        return jnp.exp(self.gamma_log)

    def to_form(self, form: Literal["complex", "real"]) -> "AbstractLRU":
        """`RealLRU.from_complex(self)` for `"real"`, `ComplexLRU.from_real(self)` for
        `"complex"` (itself if it is in `form` already); see
        `AbstractRecurrentCore.to_form`."""
        if check_form(form) == self.form:
            return self
        target = RealLRU if form == "real" else ComplexLRU
        return target._with_parameters_of(self)

    # --- what differs between the forms --------------------------------------------------

    #: `"complex"` or `"real"`.
    form: eqx.AbstractClassVar[str]

    @classmethod
    @abc.abstractmethod
    def _check_dtype(cls, dtype) -> jnp.dtype:
        """The parameters' dtype for `dtype` (a clear error for one the form cannot use)."""

    @classmethod
    def _with_parameters_of(cls: type[_LRU], layer: "AbstractLRU") -> _LRU:
        """A `cls` holding `layer`'s fields (every dataclass field, shared not copied)."""
        if not isinstance(layer, AbstractLRU):
            raise TypeError(f"expected an LRU layer, got {type(layer).__name__}.")
        cls._check_dtype(layer.nu_log.dtype)
        cls._check_compute_dtype(layer.compute_dtype, layer.nu_log.dtype)
        return rebuild(cls, layer)


class ComplexLRU(AbstractLRU):
    r"""The LRU with a complex diagonal state $x \in \mathbb C^N$ (paper §3, App. A).

    The state is complex (`(d_state,)`, complex64 for float32 parameters); the
    projections are real matmuls. See `AbstractLRU.__init__` for the arguments.
    """

    if TYPE_CHECKING:  # Equinox keeps the inherited `__init__`; say so to type checkers
        __init__ = AbstractLRU.__init__

    algebra: ClassVar[AbstractAlgebra] = Diagonal()
    form: ClassVar[str] = "complex"
    _state_layout: ClassVar[str] = "complex, one entry per mode"

    @classmethod
    def _check_dtype(cls, dtype) -> jnp.dtype:
        return complex_float_dtype(dtype, "ComplexLRU", "`RealLRU` (or `eqx_lru.to_real(layer)`)")

    @classmethod
    def _check_compute_dtype(cls, compute_dtype, param_dtype) -> str | None:
        checked = super()._check_compute_dtype(compute_dtype, param_dtype)
        if checked is not None:
            raise ValueError(
                f"ComplexLRU computes in the complex dtype of its parameters and has no "
                f"`compute_dtype` {checked} (there is no bfloat16/float16 complex type); use "
                f"`RealLRU(..., compute_dtype={checked})`, which runs the same function in real "
                "arithmetic, or `RealLRU.from_complex(layer)`."
            )
        return None

    def _storage(self) -> AbstractStorage:
        return ComplexPairs()

    def _to_algebra(self, state: Complex[Array, "*batch d_state"]) -> Array:
        return state

    def _from_algebra(self, h: Array) -> Complex[Array, "*batch d_state"]:
        return h

    def init_state(self) -> Complex[Array, " d_state"]:
        return jnp.zeros(self.d_state, complex_dtype(self.nu_log.dtype))

    def _pack(self, modulus, phase) -> Complex[Array, "*length d_state"]:
        return jax.lax.complex(modulus * jnp.cos(phase), modulus * jnp.sin(phase))

    @classmethod
    def from_real(cls, layer: "RealLRU") -> "ComplexLRU":
        """The same function in complex form: exact, the parameters are shared."""
        return cls._with_parameters_of(layer)


class RealLRU(AbstractLRU):
    r"""The LRU in real Jordan form (paper §E.3): real states, 2×2 rotation-scaling blocks.

    Mode $n$ keeps $(\operatorname{Re} x_n, \operatorname{Im} x_n)$ and evolves by
    $|\lambda_n| \begin{pmatrix}\cos\theta_n & -\sin\theta_n\\
    \sin\theta_n & \cos\theta_n\end{pmatrix}$, the real matrix of multiplication by
    $\lambda_n$. It computes the same function as `ComplexLRU` with the same parameters and
    uses real dtypes only. See
    `AbstractLRU.__init__` for the arguments.

    **State layout: `(d_state, 2)`**, row $n$ = $[\operatorname{Re} x_n, \operatorname{Im}
    x_n]$ (as `init_state()`, `step` and `hidden_states` give it). A `(2, d_state)` state
    is refused with a hint — except when `d_state == 2`, where the two layouts have the same
    shape and a transposed state cannot be detected: build states with `init_state()`,
    `step` or `hidden_states`, or stack `[re, im]` on the *last* axis.
    """

    if TYPE_CHECKING:  # Equinox keeps the inherited `__init__`; say so to type checkers
        __init__ = AbstractLRU.__init__

    # Planar pairs `(2, d_state)`: two numbers per rotation-scaling block, on contiguous
    # halves; the public state stays (N, 2).
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

    def _storage(self) -> AbstractStorage:
        if self.compute_dtype is None:
            return Identity()
        # A float32 carry over bfloat16 (say) inputs and states.
        return Cast(compute=self.nu_log.dtype.name, stored=self.compute_dtype)

    def init_state(self) -> Float[Array, "d_state 2"]:
        return jnp.zeros((self.d_state, 2), self.nu_log.dtype)

    def _pack(self, modulus, phase) -> Float[Array, "*length 2 d_state"]:
        r"""$(m \cos\phi, m \sin\phi)$, planar: the rotation-scaling block
        $\begin{pmatrix}a & -b\\ b & a\end{pmatrix}$ of each mode as its pair $(a, b)$."""
        return jnp.stack([modulus * jnp.cos(phase), modulus * jnp.sin(phase)], axis=-2)

    def _to_algebra(self, state: Float[Array, "*batch d_state 2"]) -> Array:
        return jnp.swapaxes(state, -1, -2)

    def _from_algebra(self, h: Array) -> Float[Array, "*batch d_state 2"]:
        return jnp.swapaxes(h, -1, -2)

    @classmethod
    def from_complex(cls, layer: ComplexLRU) -> "RealLRU":
        """The same function in real form: exact, the parameters are shared."""
        return cls._with_parameters_of(layer)
