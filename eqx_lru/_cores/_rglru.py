r"""`RGLRU`: the Real-Gated Linear Recurrent Unit of Griffin and Hawk (De et al. 2024), and
its complex counterpart in two forms.

With $H$ = `d_model`, per position $t$ and channel,

$$r_t = \sigma(W_a x_t + b_a), \qquad i_t = \sigma(W_x x_t + b_x), \qquad
a_t = \sigma(\Lambda)^{c\, r_t},$$
$$h_t = a_t \odot h_{t-1} + \sqrt{1 - a_t^2} \odot (i_t \odot x_t), \qquad y_t = h_t,$$

$W_a, W_x$ block-diagonal (`heads` blocks), $c = 8$. The state has the input's width: the
RG-LRU has no input or output projection (Hawk's block projects around it).

**Complex counterpart** (`phase=True`, recurrentgemma's `only_real=False`): the input's
two halves are the real and imaginary parts of $H/2$ complex channels,
$\tilde x_t = x_t^{(1)} + i\, x_t^{(2)}$; the gates map $x_t$ to $H/2$ values and each mode
also turns by a gated phase,

$$a_t = \sigma(\Lambda)^{c\, r_t} e^{i \theta r_t}, \qquad
h_t = a_t \odot h_{t-1} + \sqrt{1 - |a_t|^2} \odot (i_t \odot \tilde x_t), \qquad
y_t = [\operatorname{Re} h_t, \operatorname{Im} h_t].$$

As for the LRU, `form="complex"` keeps complex states and `form="real"` the same recurrence
as 2×2 rotation-scaling blocks $|a_t| R(\theta r_t)$ on planar real states (the
`RotationScaling` scan): the same parameters and function, no complex number anywhere.

**Time steps** (`dt=`): $a_t^{\Delta t_t}$ replaces $a_t$ (the gated exponent is scaled by
$\Delta t_t$), and the input's gain depends on `discretization`
(`eqx_lru._cores._discretization`): `"variance_preserving"` (default) follows the step,
$\sqrt{1 - |a_t|^{2\Delta t_t}}$; `"impulse"` keeps $\sqrt{1 - |a_t|^2}$; `"zoh"` holds
the input over the step, $\sqrt{1 - |a_t|^2}\,(a_t^{\Delta t_t} - 1)/(a_t - 1)$ (complex
with `phase`). The first position processed reads its step under each (from the zero
state too), since the gain depends on it everywhere but in `"impulse"`.

**Document starts** (`document_start=`). With `"normalised"` (the default) the update above
holds at every position. With `"unnormalised"` (recurrentgemma's semantics) a position
that starts a document takes its input whole and carries nothing,
$h_t = i_t \odot x_t$ ($a_t$ replaced by 0, the normalisation by 1). A document starts at
each packed segment's first position processed, and at the first position processed when
the state before it is the zero state `init_state()` (no `initial_state`, a fresh stream,
a `reset`): the zero state means "no document begun", so `step` from it, chunks and the
call agree.
"""

import functools
import math
from typing import ClassVar, Literal

import equinox as eqx
import jax
import jax.numpy as jnp
from beartype import beartype
from jaxtyping import Array, ArrayLike, Float, Inexact, PRNGKeyArray, jaxtyped

from .._checks import (
    Size,
    check_form,
    check_key,
    check_sequence,
    check_size,
    check_state,
    check_token,
    complex_dtype,
    complex_float_dtype,
    float_dtype,
)
from .._scan._algebra import AbstractAlgebra, Diagonal, RotationScaling
from .._scan._methods import AbstractScanMethod, holds_start, scan_method
from .._scan._recurrence import ScanMethod, recurrence, segment_starts
from ._core import AbstractStatesCore, dt_options, rebuild
from ._discretization import (
    RGLRUDiscretization,
    check_discretization,
    hold_weight,
    hold_weight_real,
)
from ._dt import check_dt
from ._projection import Precision, check_precision
from ._rglru_init import block_diagonal_init, check_rglru_ring, rglru_lambda_init

DocumentStart = Literal["normalised", "unnormalised"]

#: The largest derivative of the normalisation's square root (recurrentgemma's bound):
#: its backward pass reads $\max(x, 1/(4 \cdot 1000^2))$, so an $a_t$ within $2.5 \cdot
#: 10^{-7}$ of 1 cannot blow the gradient up.
SQRT_MAX_GRADIENT = 1000.0


@functools.partial(jax.custom_vjp, nondiff_argnums=(1,))
def bounded_sqrt(x: Array, max_gradient: float) -> Array:
    r"""$\sqrt x$, with a derivative at most `max_gradient` (the cotangent is computed at
    $\max(x, 1/(4 \cdot \text{max_gradient}^2))$)."""
    del max_gradient
    return jnp.sqrt(x)


def _bounded_sqrt_fwd(x, max_gradient):
    return jnp.sqrt(x), x


def _bounded_sqrt_bwd(max_gradient, x, g):
    floor = jnp.asarray(1 / (4 * max_gradient**2), x.dtype)
    return (g / (2 * jnp.sqrt(jnp.maximum(x, floor))),)


bounded_sqrt.defvjp(_bounded_sqrt_fwd, _bounded_sqrt_bwd)


class RGLRU(AbstractStatesCore):
    r"""The RG-LRU (Griffin/Hawk) as a recurrent core; `phase=True` is its complex
    counterpart, in `form="complex"` or `"real"` (see the module docstring for the maths).

    **Fields:** `Lambda` `(modes,)` ($a = \sigma(\Lambda)$; modes $= H$, or $H/2$ with
    `phase`), `theta` `(modes,)` (the phases, `None` without `phase`), the gates' weights
    `W_a`, `W_x` `(heads, H/heads, modes/heads)` and biases `b_a`, `b_x`
    `(heads, modes/heads)`; static `c`, `form`, `method`, `precision`. recurrentgemma's
    `a_param` is $-\Lambda$ and its `a_imag_param` is $\theta$.

    `recurrent_fields`: all six. Every parameter shapes the recurrence ($a_t$) or its input
    and there is no output projection, so the whole core gets the optimiser's recurrent
    group, as the LRU's $\nu, \theta, \gamma, B$ do (paper §D.2).

    **States:** `(d_model,)` real; with `phase`, `(d_model/2,)` complex (`form="complex"`)
    or `(2, d_model/2)` real planar pairs, real parts then imaginary parts (`"real"`).

    **Sizes.** The recurrence runs at the input's width, so `d_state` is `d_model`:
    `RGLRU(d_model, d_state)` with `d_state == d_model` or `None`. A core factory
    `(d_model, d_state, *, key)` such as `LRUBlock(core=...)` therefore builds it with
    `d_state = d_model`; a wider recurrence is a projection around the core (Hawk's
    block).

    **Packing and document starts.** No state crosses a segment boundary (`segment_ids`);
    packed, chunked and streamed runs equal separate calls. With
    `document_start="normalised"` (default) each position, a segment's first included,
    gets the normalisation $\sqrt{1-a_t^2}$ of the paper's eq. (4). With `"unnormalised"`
    (recurrentgemma's: $h = i_t \odot x_t$ where its `segment_pos` is 0) a document's first
    position takes its gated input whole; a document starts at each segment's first
    position processed, and where the state before it is exactly the zero state (a new
    stream, a `reset`, no `initial_state`). The two agree on every position of a sequence
    that does not start a document there.

    ??? cite

        ```bibtex
        @article{de2024griffin,
          title={Griffin: Mixing Gated Linear Recurrences with Local Attention for
                 Efficient Language Models},
          author={De, Soham and Smith, Samuel L. and Fernando, Anushan and Botev,
                  Aleksandar and others},
          journal={arXiv:2402.19427},
          year={2024}
        }
        ```
    """

    Lambda: Float[Array, " modes"]
    theta: Float[Array, " modes"] | None
    W_a: Float[Array, "heads block_in block_out"]
    b_a: Float[Array, "heads block_out"]
    W_x: Float[Array, "heads block_in block_out"]
    b_x: Float[Array, "heads block_out"]
    c: float = eqx.field(static=True)
    form: str = eqx.field(static=True)
    document_start: str = eqx.field(static=True)
    discretization: str = eqx.field(static=True)
    method: AbstractScanMethod = eqx.field(static=True)
    precision: jax.lax.Precision | None = eqx.field(static=True)

    recurrent_fields: ClassVar[tuple[str, ...]] = ("Lambda", "theta", "W_a", "b_a", "W_x", "b_x")
    takes_dt: ClassVar[bool] = True

    def __init__(
        self,
        d_model: Size,
        d_state: Size | None = None,
        *,
        heads: Size = 1,
        phase: bool = False,
        form: Literal["complex", "real"] | None = None,
        c: float = 8.0,
        r_min: float = 0.9,
        r_max: float = 0.999,
        max_phase: float = 0.1 * math.pi,
        document_start: DocumentStart = "normalised",
        discretization: RGLRUDiscretization | str = "variance_preserving",
        method: ScanMethod = "auto",
        precision: Precision = None,
        dtype=None,
        key: PRNGKeyArray,
    ):
        r"""**Arguments:**

        - `d_model`: $H$, the width of the input, the state and the output.
        - `d_state`: `None` or `d_model` (the state has the input's width; see above).
        - `heads`: the number of diagonal blocks of the gates' weights (must divide the
            number of modes).
        - `phase`: `False` for Griffin's RG-LRU (real states); `True` for the complex
            counterpart on $H/2$ modes ($H$ even).
        - `form`: with `phase`, `"complex"` (default) or `"real"` (2×2 blocks, real
            arithmetic only); without it, `"real"` only (the states are real).
        - `c`: the gate's exponent scale (8 in Griffin).
        - `r_min`, `r_max`: $\sigma(\Lambda)$ starts uniform in area on this ring,
            $0 < r_\min \le r_\max < 1$ (default Griffin's $[0.9, 0.999]$).
        - `max_phase`: with `phase`, $\theta \sim U[0, \text{max_phase}]$ (default
            recurrentgemma's $0.1\pi$).
        - `document_start`: `"normalised"` (default; eq. (4) at every position) or
            `"unnormalised"` (recurrentgemma's: a document's first position enters as
            $i_t \odot x_t$ and carries nothing; see above).
        - `discretization`: what an input means when `dt` is not 1 (all three are the same
            core at $\Delta t \equiv 1$ and without `dt`): `"variance_preserving"`
            (default) normalises by $\sqrt{1-|a_t|^{2\Delta t}}$; `"impulse"` by the
            $\Delta t = 1$ normalisation $\sqrt{1-|a_t|^2}$, whatever the step; `"zoh"`
            holds the input over the step, $\sqrt{1-|a_t|^2}\,(a_t^{\Delta t} - 1)/(a_t -
            1)$. See the module docstring and the concepts page on time steps.
        - `method`, `precision`, `dtype`, `key`: as `eqx_lru.ComplexLRU` (`precision` is
            the gates' matmuls').
        """
        d_model, heads = check_size("d_model", d_model), check_size("heads", heads)
        if d_state is not None and check_size("d_state", d_state) != d_model:
            raise ValueError(
                f"RGLRU's state has the width of its input, so `d_state` must be None or "
                f"d_model={d_model}; got d_state={d_state}. For a wider recurrence, project "
                "the input to that width first (as Hawk's block does)."
            )
        check_key(key)
        check_rglru_ring(r_min, r_max, max_phase, c)
        if document_start not in ("normalised", "unnormalised"):
            raise ValueError(
                "`document_start` must be 'normalised' (eq. (4) at every position) or "
                "'unnormalised' (recurrentgemma's: a document's first input enters whole); "
                f"got {document_start!r}."
            )
        discretization = check_discretization(
            discretization, ("variance_preserving", "impulse", "zoh"), "RGLRU"
        )
        form = ("complex" if phase else "real") if form is None else check_form(form)
        if not phase and form != "real":
            raise ValueError(
                "RGLRU without `phase` has real states and one form, 'real'; `form='complex'` "
                "needs `phase=True` (the complex counterpart)."
            )
        modes = d_model // 2 if phase else d_model
        if phase and d_model % 2:
            raise ValueError(
                f"RGLRU(phase=True) pairs the input's halves into complex modes, so `d_model` "
                f"must be even; got {d_model}."
            )
        if modes % heads:
            raise ValueError(
                f"`heads`={heads} must divide the number of modes, {modes} (d_model"
                f"{'/2 with phase' if phase else ''})."
            )
        dtype = float_dtype(dtype)
        if form == "complex":
            dtype = complex_float_dtype(dtype, "RGLRU(form='complex')", "`form='real'`")
        lam_key, theta_key, a_key, x_key = jax.random.split(key, 4)
        self.Lambda = rglru_lambda_init(modes, r_min=r_min, r_max=r_max, dtype=dtype, key=lam_key)
        self.theta = (
            jax.random.uniform(theta_key, (modes,), dtype, 0.0, max_phase) if phase else None
        )
        self.W_a, self.b_a = block_diagonal_init(d_model, modes, heads, dtype=dtype, key=a_key)
        self.W_x, self.b_x = block_diagonal_init(d_model, modes, heads, dtype=dtype, key=x_key)
        self.c = float(c)
        self.form = form
        self.document_start = document_start
        self.discretization = discretization
        self.method = scan_method(method)
        self.precision = check_precision(precision)

    @property
    def d_model(self) -> int:
        return self.W_a.shape[0] * self.W_a.shape[1]

    @property
    def d_state(self) -> int:
        """The real numbers in the state: `d_model`."""
        return self.d_model

    @property
    def phase(self) -> bool:
        return self.theta is not None

    @property
    def _algebra(self) -> AbstractAlgebra:
        return RotationScaling() if self.form == "real" and self.phase else Diagonal()

    def init_state(self) -> Inexact[Array, "..."]:
        """The zero state: `(d_model,)` real; with `phase`, `(d_model/2,)` complex or
        `(2, d_model/2)` real planar (`form="real"`)."""
        modes, dtype = self.Lambda.shape[0], self.Lambda.dtype
        if not self.phase:
            return jnp.zeros(modes, dtype)
        if self.form == "complex":
            return jnp.zeros(modes, complex_dtype(dtype))
        return jnp.zeros((2, modes), dtype)

    def gates(
        self, x: Float[Array, "*length d_model"]
    ) -> tuple[Float[Array, "*length modes"], Float[Array, "*length modes"]]:
        r"""$(r_t, i_t)$: the recurrence and input gates, for a sequence or one token."""

        def gate(weight, bias):
            blocks = x.reshape(*x.shape[:-1], *weight.shape[:2])
            z = jnp.einsum("...hi,hio->...ho", blocks, weight, precision=self.precision) + bias
            return jax.nn.sigmoid(z.reshape(*x.shape[:-1], -1))

        return gate(self.W_a, self.b_a), gate(self.W_x, self.b_x)

    def _terms(self, x: Array, dt: Array | None, starts: Array | None = None):
        r"""(transitions $a_t$, drives $g_t\, i_t x_t$) in the algebra's layout, one per
        position (or for one token), with the gain $g_t$ of the `discretization`: at the
        step, $\sqrt{1-|a_t|^{2\Delta t}}$ (variance-preserving); at $\Delta t = 1$,
        $\sqrt{1-|a_t|^2}$ (impulse), times $(a_t^{\Delta t} - 1)/(a_t - 1)$ (zoh). Where
        `starts` (booleans, one per position) is true, $a_t = 0$ and the drive is
        $i_t x_t$ (a document's start)."""
        r, i = self.gates(x)
        scale = self.c * r if dt is None else self.c * r * dt[..., None]
        log_sigma = jax.nn.log_sigmoid(self.Lambda)
        log_modulus = scale * log_sigma
        held = dt is not None and self.discretization != "variance_preserving"
        unit = self.c * r * log_sigma if held else log_modulus  # log |a_t| at Δt = 1
        gain: Array = bounded_sqrt(-jnp.expm1(2 * unit), SQRT_MAX_GRADIENT)
        gain_im = None
        if held and self.discretization == "zoh":
            step = jnp.asarray(dt)[..., None]
            if self.theta is None:
                gain = gain * hold_weight_real(unit, step)
            else:
                w_re, w_im = hold_weight(unit, self.theta * r, step)
                gain, gain_im = gain * w_re, gain * w_im
        modulus = jnp.exp(log_modulus)
        if starts is not None:
            start = starts[..., None]
            gain = jnp.where(start, jnp.ones_like(gain), gain)
            gain_im = None if gain_im is None else jnp.where(start, 0, gain_im)
            modulus = jnp.where(start, jnp.zeros_like(modulus), modulus)
        if self.theta is None:  # no phase
            return modulus, gain * (i * x)
        angle = self.theta * (r if dt is None else r * dt[..., None])
        half = self.Lambda.shape[0]
        re, im = gain * i * x[..., :half], gain * i * x[..., half:]
        if gain_im is not None:  # times the imaginary part of the complex gain
            re, im = re - gain_im * i * x[..., half:], im + gain_im * i * x[..., :half]
        a_re, a_im = modulus * jnp.cos(angle), modulus * jnp.sin(angle)
        if self.form == "complex":
            return jax.lax.complex(a_re, a_im), jax.lax.complex(re, im)
        return jnp.stack([a_re, a_im], axis=-2), jnp.stack([re, im], axis=-2)

    def _output(self, h: Array) -> Float[Array, "*length d_model"]:
        if not self.phase:
            return h
        if self.form == "complex":
            return jnp.concatenate([h.real, h.imag], axis=-1)
        return h.reshape(*h.shape[:-2], -1)

    def _check_state(self, state: Array) -> None:
        check_state(state, self.init_state(), f"RGLRU(phase={self.phase}, form={self.form!r})")

    def _states(self, u, initial_state, reverse, segment_ids, dt=None) -> Inexact[Array, "..."]:
        check_sequence(u, self.d_model, self.Lambda.dtype)
        if initial_state is not None:
            initial_state = jnp.asarray(initial_state)
            self._check_state(initial_state)
        dt = None if dt is None else check_dt(dt, u.shape[0], self.Lambda.dtype)
        starts = None
        if self.document_start == "unnormalised":
            starts = self._document_starts(u.shape[0], initial_state, reverse, segment_ids)
        a, b = self._terms(u, dt, starts)
        return recurrence(
            a, b, algebra=self._algebra, initial_state=initial_state, reverse=reverse,
            method=self.method, segment_ids=segment_ids,
        )  # fmt: skip

    def _document_starts(self, length, initial_state, reverse, segment_ids) -> Array:
        """`document_start="unnormalised"`: `True` at each position that starts a document:
        a packed segment's first position processed, and the first position processed when
        the state before it is the zero state (on the device holding the sequence's start,
        for a sequence split across devices)."""
        first = jnp.arange(length) == (length - 1 if reverse else 0)
        if initial_state is not None:
            first = first & _is_zero(initial_state)
        first = first & holds_start(self.method.resolve(), reverse=reverse)
        if segment_ids is None:
            return first
        return first | segment_starts(segment_ids, reverse=reverse, method=self.method.resolve())

    def _outputs(self, states, u, initial_state, reverse, segment_ids) -> Array:
        del u, initial_state, reverse, segment_ids
        return self._output(states)

    def __call__(self, u: Float[ArrayLike, "length d_model"], **options) -> Array:
        r"""Run over one sequence `(length, d_model)`: `initial_state`, `reverse`,
        `segment_ids`, `dt` (positive time steps `(length,)` or a scalar; see the concepts
        page on time steps) and `key` (ignored) as `eqx_lru.AbstractRecurrentCore.__call__`.

        **Returns:** $y$, shape `(length, d_model)`.
        """
        return super().__call__(u, **options)

    @jaxtyped(typechecker=beartype)
    def step(
        self,
        state: Inexact[ArrayLike, "..."],
        u_t: Float[ArrayLike, " d_model"],
        *,
        dt: ArrayLike | None = None,
    ) -> tuple[Inexact[Array, "..."], Float[Array, " d_model"]]:
        r"""One position: $h_t = a_t h_{t-1} + \sqrt{1-|a_t|^2}\, i_t x_t$, `(h_t, y_t)`;
        `dt` this position's time step (a positive scalar; the input's gain then follows
        the `discretization`, as in the call). With
        `document_start="unnormalised"`, $h_t = i_t x_t$ from the zero state (a document's
        first position). Repeated from `init_state()` it equals the parallel call."""
        state, u_t = jnp.asarray(state), jnp.asarray(u_t)
        check_token(u_t, self.d_model, self.Lambda.dtype)
        self._check_state(state)
        dt_options(self, dt)
        dt = None if dt is None else check_dt(dt, None, self.Lambda.dtype)
        start = _is_zero(state) if self.document_start == "unnormalised" else None
        a, b = self._terms(u_t, dt, start)
        h = self._algebra.apply(a, state) + b
        return h, self._output(h)

    def to_form(self, form: Literal["complex", "real"]) -> "RGLRU":
        """With `phase`: this core in `form`, the same parameters and function. Without:
        itself for `"real"` (its states are real); it has no complex form."""
        if check_form(form) == self.form:
            return self
        if not self.phase:
            raise TypeError(
                "RGLRU without `phase` has real states and no 'complex' form to convert to "
                "(`to_real` keeps it as it is). Its complex counterpart is a different core: "
                "`RGLRU(..., phase=True)`."
            )
        if form == "complex":
            complex_float_dtype(self.Lambda.dtype, "RGLRU(form='complex')", "`form='real'`")
        return rebuild(RGLRU, self, form=form)


def _is_zero(state: Array) -> Array:
    """Whether a state is exactly the zero state (`document_start="unnormalised"`: no
    document begun)."""
    return jnp.all(jnp.asarray(state) == 0)
