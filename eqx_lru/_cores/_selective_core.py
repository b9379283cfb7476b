r"""The selective LRU: an LRU whose eigenvalues depend on the input, in two equivalent forms.

Per position $t$ and mode $n$ (`d_state` modes, `d_model` inputs),

$$\Delta_t = \operatorname{softplus}(W_r u_t + b_r), \qquad
\log r_t = -e^{\nu_{\log}} \odot \Delta_t, \qquad
\theta_t = \phi_\max\, \sigma\big(c_\theta (W_\theta u_t + b_\theta)\big),$$
$$\lambda_t = r_t e^{i\theta_t}, \qquad
x_t = \lambda_t \odot x_{t-1} + g_t \odot (B u_t), \qquad
y_t = \operatorname{Re}(C x_t) + D \odot u_t,$$

$B = B_\text{re} + i B_\text{im}$, $C = C_\text{re} + i C_\text{im}$, $\phi_\max$ =
`max_phase`, $c_\theta$ = `phase_gate_scale`. The modulus lives in log space:
$\log r_t < 0$, so $0 < r_t < 1$ for every input (the state cannot blow up), and
$\Delta_t$ is a learned, input-dependent step (as in Mamba): $\Delta_t \to 0$ keeps the
state ($r_t \to 1$), a large $\Delta_t$ forgets it. The phase is input dependent in
$(0, \phi_\max)$.

**Input normalisation** $g_t$ (`normalisation=`; both computed in log space, accurate as
$r \to 1$, with a bounded derivative, `bounded_sqrt`):

- `"selective"` (default): $g_t = \sqrt{1 - r_t^2} = \sqrt{-\operatorname{expm1}(2 \log
  r_t)}$, the position's own modulus: the state's variance under unit white-noise inputs
  is kept whatever $r_t$, and a token that holds the state ($r_t \to 1$) writes nothing
  ($g_t \to 0$).
- `"fixed"`: $g = \sqrt{1 - \bar r^2}$, $\bar r = e^{-e^{\nu_{\log}}}$ the mode's modulus
  at $\Delta = 1$ (its ring value at initialisation), the same at every position: the
  LRU's $\gamma$ (eq. 7). Holding and writing are then independent, which exact counting
  needs: for parity, $\lambda(1) = -1$, $\lambda(0) = +1$ and $B u(0) = 0$ give the state
  $g B u(1)$ after an odd number of ones and 0 after an even one, at any length; with
  `"selective"` the token that writes must have $r < 1$, so the count decays ($r^k$
  after $k$ ones). As $r_t \to 1$ the state is bounded by $t\, g \max_s |B u_s|$, not by
  a constant.

**Initialisation** (`r_min`, `r_max`, `max_phase`): at zero input the layer is the LRU of
the same key's ring (Lemma 3.2, `eqx_lru.ring_init`): $b_r = \log(e - 1)$ gives
$\Delta = 1$, so $r = e^{-e^{\nu_{\log}}}$ with the ring's $\nu_{\log}$, and
$b_\theta = \operatorname{logit}(\theta_\text{ring}/\phi_\max)$ gives the ring's phases,
uniform on $[0, \phi_\max]$; its normalisation is the LRU's $\gamma$ (eq. 7), under both
`normalisation`s. The selection weights $W_r, W_\theta$ start small ($\mathcal N(0,
1/(2H))$, as $B$), so the layer starts near that LRU. $W_\theta$ and $b_\theta$ are stored
divided by $c_\theta$, so the layer at initialisation does not depend on $c_\theta$ (bit
for bit when it is a power of two).

**Phase range.** `max_phase` (default $\pi$) bounds the phase, $\theta_t \in (0, \phi_\max)$.
At the default, $\lambda_t = +r_t$ and $\lambda_t = -r_t$ (the signed real eigenvalues that
track parity) are the phase gate's two saturations, $\sigma \to 0$ and $\sigma \to 1$:
training keeps driving a gate towards them as the loss falls (Adam's steps do not shrink
with the gradient), so a parity solution learned on short sequences sharpens and can hold
on long ones. With `max_phase=2 * math.pi` (the whole circle) $-r_t$ sits at the gate's
centre, where nothing sharpens it. See the documentation's layers page for the parity runs.

**Phase gate scale** ($c_\theta$, `phase_gate_scale`, default 8, as Griffin's $c$). Adam
moves each parameter by about its learning rate per step whatever the gradient's size, so
the phase logit moves $c_\theta$ times faster than its stored parameters. The loss at the
training length $L$ stops pulling the phases once they are within about $1/L$ of their
targets: with $c_\theta = 1$ the gates of parity runs stalled 1-2% of $\pi$ short of 0
and $\pi$, an error that adds up over $4L$ tokens; with $c_\theta = 8$ they came within
$10^{-4}\pi$ in the same steps (the concepts page on state tracking).

**Forms.** `ComplexSelectiveLRU` keeps complex states and builds $\lambda_t$ as complex
numbers in the forward pass; `RealSelectiveLRU` keeps $(\operatorname{Re} x,
\operatorname{Im} x)$ per mode and multiplies it by the 2×2 rotation-scaling block
$r_t R(\theta_t)$ (`eqx_lru.RotationScaling`, one per position): the same real parameters
and function, no complex number anywhere. `from_complex`/`from_real` convert exactly.

**Time steps** (`dt=`): $\lambda_t^{\Delta t_t}$ replaces $\lambda_t$ ($\log r_t \Delta t_t$,
$\theta_t \Delta t_t$), and the input keeps its weight $\sqrt{1 - r_t^2}$ (the LRU's
`"impulse"`: each input kicks the state by the same amount whatever the gap); $\Delta t
\equiv 1$ is the layer without `dt`.
"""

import abc
import math
from typing import ClassVar, Literal, TypeVar

import equinox as eqx
import jax
import jax.numpy as jnp
from beartype import beartype
from jaxtyping import Array, ArrayLike, Float, Inexact, Integer, PRNGKeyArray, PyTree, jaxtyped

from .._checks import (
    Size,
    check_key,
    check_not_complex,
    check_sequence,
    check_size,
    check_state,
    check_token,
)
from .._scan._algebra import AbstractAlgebra
from .._scan._methods import AbstractScanMethod, scan_method
from .._scan._recurrence import ScanMethod, recurrence
from .._scan._storage import AbstractStorage
from .._surface import checks_first
from . import _projection as projection
from ._core import AbstractStatesCore, check_takes_dt, rebuild
from ._dt import check_dt
from ._init import projection_init, ring_init
from ._projection import Precision, check_precision
from ._rglru_terms import SQRT_MAX_GRADIENT, bounded_sqrt

_Selective = TypeVar("_Selective", bound="AbstractSelectiveLRU")
Normalisation = Literal["selective", "fixed"]

#: $b_r$ at initialisation: $\operatorname{softplus}(b_r) = 1$.
_UNIT_STEP_BIAS = math.log(math.e - 1)


class AbstractSelectiveLRU(AbstractStatesCore):
    r"""The selective LRU (see the module's maths); `ComplexSelectiveLRU`,
    `RealSelectiveLRU`.

    **Fields** (real arrays, shared by both forms): `nu_log` `(d_state,)` (the base decay
    rate $e^{\nu_{\log}}$), the modulus gate `W_r` `(d_state, d_model)`, `b_r`
    `(d_state,)`, the phase gate `W_theta` `(d_state, d_model)`, `b_theta` `(d_state,)`,
    `B_re`, `B_im` `(d_state, d_model)`, `C_re`, `C_im` `(d_model, d_state)`, `D`
    `(d_model,)`; static `max_phase`, `phase_gate_scale`, `normalisation`, `method`,
    `precision`. `W_theta`, `b_theta` hold the phase logit divided by
    `phase_gate_scale`.

    `recurrent_fields`: $\nu$, both gates and $B$ (what shapes the recurrence and its input,
    as the LRU's $\nu, \theta, \gamma, B$; smaller learning rate, no weight decay, §D.2).
    """

    nu_log: Float[Array, " d_state"]
    W_r: Float[Array, "d_state d_model"]
    b_r: Float[Array, " d_state"]
    W_theta: Float[Array, "d_state d_model"]
    b_theta: Float[Array, " d_state"]
    B_re: Float[Array, "d_state d_model"]
    B_im: Float[Array, "d_state d_model"]
    C_re: Float[Array, "d_model d_state"]
    C_im: Float[Array, "d_model d_state"]
    D: Float[Array, " d_model"]
    max_phase: float = eqx.field(static=True)
    phase_gate_scale: float = eqx.field(static=True)
    normalisation: str = eqx.field(static=True)
    method: AbstractScanMethod = eqx.field(static=True)
    precision: jax.lax.Precision | None = eqx.field(static=True)

    recurrent_fields: ClassVar[tuple[str, ...]] = (
        "nu_log", "W_r", "b_r", "W_theta", "b_theta", "B_re", "B_im",
    )  # fmt: skip
    takes_dt: ClassVar[bool] = True
    #: `"complex"` or `"real"`.
    form: eqx.AbstractClassVar[str]
    algebra: eqx.AbstractClassVar[AbstractAlgebra]
    _state_layout: eqx.AbstractClassVar[str]

    def __init__(
        self,
        d_model: Size,
        d_state: Size,
        *,
        r_min: float = 0.0,
        r_max: float = 1.0,
        max_phase: float = math.pi,
        phase_gate_scale: float = 8.0,
        normalisation: Normalisation = "selective",
        method: ScanMethod = "auto",
        precision: Precision = None,
        dtype=None,
        key: PRNGKeyArray,
    ):
        r"""**Arguments:**

        - `d_model`: $H$, the input and output features.
        - `d_state`: $N$, the number of complex modes (the real form stores $2N$ reals).
        - `r_min`, `r_max`: at zero input $|\lambda|$ starts on the ring
            $r_\min \le |\lambda| \le r_\max \le 1$ of Lemma 3.2 (as `eqx_lru.ComplexLRU`).
        - `max_phase`: $\phi_\max$, the phases' range $(0, \phi_\max)$ for every input;
            at zero input they start uniform on $[0, \phi_\max]$. Default $\pi$: the
            gate's two ends are $\lambda = \pm r$ (parity; see the module docstring).
        - `phase_gate_scale`: $c_\theta > 0$, the phase logit's scale, $\theta_t =
            \phi_\max \sigma(c_\theta (W_\theta u_t + b_\theta))$ (default 8; the layer at
            initialisation does not depend on it; see the module docstring).
        - `normalisation`: the input's weight $g_t$: `"selective"` (default,
            $\sqrt{1 - r_t^2}$ at each position) or `"fixed"` ($\sqrt{1 -
            e^{-2 e^{\nu_{\log}}}}$ per mode, whatever the input: a held state still takes
            its input; see the module docstring).
        - `method`, `precision`, `dtype`, `key`: as `eqx_lru.ComplexLRU` (`precision` is
            every projection's and gate's matmul). The same key gives the same parameters
            in both forms.
        """
        d_model = check_size("d_model", d_model)
        d_state = check_size("d_state", d_state, f"{type(self).__name__}: the complex modes N")
        check_key(key)
        if not (isinstance(max_phase, (int, float)) and 0 < max_phase < math.inf):
            raise ValueError(
                f"`max_phase` must be a positive finite number (the phases' range, e.g. "
                f"math.pi or 2 * math.pi); got {max_phase!r}."
            )
        if not (
            isinstance(phase_gate_scale, (int, float))
            and not isinstance(phase_gate_scale, bool)
            and 0 < phase_gate_scale < math.inf
        ):
            raise ValueError(
                f"`phase_gate_scale` must be a positive finite number (the phase logit's "
                f"scale, e.g. 8); got {phase_gate_scale!r}."
            )
        if normalisation not in ("selective", "fixed"):
            raise ValueError(
                "`normalisation` must be 'selective' (sqrt(1 - r_t^2) at each position) or "
                f"'fixed' (the mode's sqrt(1 - r^2) at Delta = 1); got {normalisation!r}."
            )
        dtype = self._check_dtype(dtype)
        ring_key, r_key, theta_key, proj_key = jax.random.split(key, 4)
        nu_log, theta_log = ring_init(
            d_state, r_min=r_min, r_max=r_max, max_phase=max_phase, dtype=dtype, key=ring_key
        )
        eps = jnp.finfo(dtype).eps
        fraction = jnp.clip(jnp.exp(theta_log) / max_phase, eps, 1 - eps)
        scale = 1 / math.sqrt(2 * d_model)
        params = projection_init(d_model, d_state, dtype=dtype, key=proj_key)
        self.nu_log = nu_log
        self.W_r = jax.random.normal(r_key, (d_state, d_model), dtype) * scale
        self.b_r = jnp.full((d_state,), _UNIT_STEP_BIAS, dtype)
        logit = jnp.log(fraction) - jnp.log1p(-fraction)
        theta_weight = jax.random.normal(theta_key, (d_state, d_model), dtype) * scale
        self.W_theta = theta_weight / phase_gate_scale
        self.b_theta = logit / phase_gate_scale
        self.B_re, self.B_im = params["B_re"], params["B_im"]
        self.C_re, self.C_im, self.D = params["C_re"], params["C_im"], params["D"]
        self.max_phase = float(max_phase)
        self.phase_gate_scale = float(phase_gate_scale)
        self.normalisation = normalisation
        self.method = scan_method(method)
        self.precision = check_precision(precision)

    @property
    def d_model(self) -> int:
        return self.D.shape[-1]

    @property
    def d_state(self) -> int:
        return self.B_re.shape[0]

    # --- the maths shared by both forms -------------------------------------------------

    def selection(
        self, u: Float[Array, "*length d_model"]
    ) -> tuple[Float[Array, "*length d_state"], Float[Array, "*length d_state"]]:
        r"""$(\log r_t, \theta_t)$ for a sequence or one token: $\log r_t =
        -e^{\nu_{\log}} \operatorname{softplus}(W_r u_t + b_r)$, $\theta_t = \phi_\max
        \sigma(c_\theta (W_\theta u_t + b_\theta))$."""
        z_r = jnp.matmul(u, self.W_r.T, precision=self.precision) + self.b_r
        z_theta = jnp.matmul(u, self.W_theta.T, precision=self.precision) + self.b_theta
        z_theta = self.phase_gate_scale * z_theta
        log_modulus = -jnp.exp(self.nu_log) * jax.nn.softplus(z_r)
        return log_modulus, self.max_phase * jax.nn.sigmoid(z_theta)

    def eigenvalues(self, u: Float[ArrayLike, "*length d_model"]) -> Array:
        r"""The complex $\lambda_t$ for inputs `u` (for analysis; `RealSelectiveLRU` never
        computes it)."""
        log_modulus, phase = self.selection(jnp.asarray(u))
        modulus = jnp.exp(log_modulus)
        return jax.lax.complex(modulus * jnp.cos(phase), modulus * jnp.sin(phase))

    def _terms(self, u: Array, dt: Array | None) -> tuple[Array, Array]:
        r"""(transitions $\lambda_t^{\Delta t_t}$ in the algebra's layout, drives
        $g_t B u_t$ as planar pairs), for a sequence or one token."""
        log_modulus, phase = self.selection(u)
        written = log_modulus  # "selective": the position's own modulus
        if self.normalisation == "fixed":  # the mode's modulus at Δ = 1, every position
            written = jnp.broadcast_to(-jnp.exp(self.nu_log), log_modulus.shape)
        gain: Array = bounded_sqrt(-jnp.expm1(2 * written), SQRT_MAX_GRADIENT)
        if dt is not None:
            step = dt[..., None]
            log_modulus, phase = log_modulus * step, phase * step
        modulus = jnp.exp(log_modulus)
        a_re, a_im = modulus * jnp.cos(phase), modulus * jnp.sin(phase)
        ones = jnp.ones(self.d_state, self.B_re.dtype)
        drive = projection.project_in(u, self.B_re, self.B_im, ones, precision=self.precision)
        return self._pack(a_re, a_im), drive * gain[..., None, :]

    def _check_state(self, state: Array) -> None:
        core = f"{type(self).__name__} ({self._state_layout})"
        check_state(state, self.init_state(), core, self._state_hint(state))

    def _state_hint(self, state: Array) -> str:
        del state
        return ""

    def _states(
        self, u, initial_state, reverse, segment_ids, dt=None
    ) -> Float[Array, "length 2 d_state"]:
        check_sequence(u, self.d_model, self.nu_log.dtype)
        if initial_state is not None:
            initial_state = jnp.asarray(initial_state)
            self._check_state(initial_state)
            initial_state = self._to_algebra(initial_state)
        dt = None if dt is None else check_dt(dt, u.shape[0], self.nu_log.dtype)
        a, drive = self._terms(u, dt)
        return recurrence(
            a, drive, algebra=self.algebra, storage=self._storage(),
            initial_state=initial_state, reverse=reverse, method=self.method,
            segment_ids=segment_ids,
        )  # fmt: skip

    def _outputs(self, states, u, initial_state, reverse, segment_ids) -> Array:
        del initial_state, reverse, segment_ids
        y = projection.project_out(states, self.C_re, self.C_im, precision=self.precision)
        return y + self.D * u

    def _final(self, state: Float[Array, "2 d_state"]) -> Inexact[Array, "d_state ..."]:
        return self._from_algebra(self._storage().load(state[None])[0])

    @checks_first()
    def run(
        self,
        u: Float[ArrayLike, "length d_model"],
        *,
        initial_state: Inexact[ArrayLike, "d_state ..."] | None = None,
        reverse: bool = False,
        length: Integer[ArrayLike, ""] | None = None,
        segment_ids: Integer[ArrayLike, " length"] | None = None,
        dt: ArrayLike | None = None,
    ) -> tuple[Float[Array, "length d_model"], Inexact[Array, "d_state ..."]]:
        """`(y, final_state)` (see `eqx_lru.AbstractRecurrentCore.run`); `dt` as in
        `__call__`."""
        check_not_complex(u)
        return super().run(
            u, initial_state=initial_state, reverse=reverse, length=length,
            segment_ids=segment_ids, dt=dt,
        )  # fmt: skip

    @checks_first()
    def __call__(
        self,
        u: Float[ArrayLike, "length d_model"],
        *,
        initial_state: PyTree[ArrayLike] | None = None,
        reverse: bool = False,
        length: Integer[ArrayLike, ""] | None = None,
        segment_ids: Integer[ArrayLike, " length"] | None = None,
        dt: ArrayLike | None = None,
        key: PRNGKeyArray | None = None,
    ) -> Array:
        r"""Run the layer over one sequence `(length, d_model)` (one example: batch with
        `jax.vmap`).

        - `initial_state`: start from this state (as `init_state`/`step`/`run` return it;
            `RealSelectiveLRU`: `(d_state, 2)`, `[Re x, Im x]` per mode).
        - `reverse`: run from the last position to the first.
        - `length`: the valid leading positions (as in `run`; the outputs are those of
            the whole input).
        - `segment_ids`: packed sequences, `(length,)` integers; no state crosses a
            segment boundary.
        - `dt`: positive time steps `(length,)` or one scalar: $\lambda_t^{\Delta t_t}$
            replaces $\lambda_t$, the input keeps its weight (see the module docstring).
        - `key`: ignored.

        **Returns:** $y$, shape `(length, d_model)`.
        """
        check_not_complex(u)
        return super().__call__(
            u, initial_state=initial_state, reverse=reverse, length=length,
            segment_ids=segment_ids, dt=dt, key=key,
        )  # fmt: skip

    @checks_first()
    @jaxtyped(typechecker=beartype)
    def step(
        self,
        state: Inexact[ArrayLike, "d_state ..."],
        u_t: Float[ArrayLike, " d_model"],
        *,
        dt: ArrayLike | None = None,
    ) -> tuple[Inexact[Array, "d_state ..."], Float[Array, " d_model"]]:
        r"""One token: $x_t = \lambda_t x_{t-1} + g_t B u_t$,
        $y_t = \operatorname{Re}(C x_t) + D u_t$; `dt` this position's step (a positive
        scalar). Repeated from `init_state()` it equals the parallel call."""
        state, u_t = jnp.asarray(state), jnp.asarray(u_t)
        check_token(u_t, self.d_model, self.nu_log.dtype)
        self._check_state(state)
        check_takes_dt(self, dt=dt)
        dt = None if dt is None else check_dt(dt, None, self.nu_log.dtype)
        a, pair = self._terms(u_t, dt)
        storage = self._storage()
        h = self.algebra.apply(a, self._to_algebra(state)) + storage.load(pair[None])[0]
        pair = storage.store(h[None])[0]
        y_t = projection.project_out(pair, self.C_re, self.C_im, precision=self.precision)
        return self._from_algebra(h), y_t + self.D * u_t

    # --- what differs between the forms --------------------------------------------------

    @classmethod
    @abc.abstractmethod
    def _check_dtype(cls, dtype) -> jnp.dtype:
        """The parameters' dtype for `dtype` (a clear error for one the form cannot use)."""

    @abc.abstractmethod
    def _pack(self, a_re: Array, a_im: Array) -> Array:
        """The transitions `(..., d_state)` parts in the form's algebra."""

    @abc.abstractmethod
    def _storage(self) -> AbstractStorage: ...

    @abc.abstractmethod
    def _to_algebra(self, state: Array) -> Array: ...

    @abc.abstractmethod
    def _from_algebra(self, h: Array) -> Array: ...

    @classmethod
    def _with_parameters_of(cls: type[_Selective], core: "AbstractSelectiveLRU") -> _Selective:
        if not isinstance(core, AbstractSelectiveLRU):
            raise TypeError(
                f"`core` must be a ComplexSelectiveLRU or RealSelectiveLRU, got "
                f"{type(core).__name__}."
            )
        cls._check_dtype(core.nu_log.dtype)
        return rebuild(cls, core)
