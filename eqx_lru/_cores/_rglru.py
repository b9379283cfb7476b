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

**Signed eigenvalues** (`eigenvalues="signed"`). Griffin's $a_t = \sigma(\Lambda)^{c r_t}$
lies in $(0, 1]$; a linear RNN with positive transitions only cannot count modulo 2
(parity; Grazzi et al. 2025, ICLR). `"signed"` maps the same gated power onto $(-1, 1]$,

$$a_t = 2\sigma(\Lambda)^{c r_t} - 1 = 1 + 2\operatorname{expm1}(\ell_t), \qquad
\sqrt{1 - a_t^2} = \sqrt{(1 - a_t)(1 + a_t)} = 2 e^{\ell_t/2}
\sqrt{-\operatorname{expm1}(\ell_t)},$$

$\ell_t = c\, r_t \log\sigma(\Lambda)$ (times $\Delta t_t$ with `dt`), both in log space as
the default's $e^{\ell_t}$ and $\sqrt{-\operatorname{expm1}(2\ell_t)}$ are: no cancellation
near $a_t = \pm 1$ (`eqx_lru._cores._rglru_terms`). With `phase` the signed value is the
modulus, times $e^{i \theta r_t}$. `discretization="zoh"` (which integrates
$a^{s}$ over the step, undefined for $a < 0$) is refused with it.

**Document starts** (`document_start=`). With `"normalised"` (the default) the update above
holds at every position. With `"unnormalised"` (recurrentgemma's semantics) a position
that starts a document takes its input whole and carries nothing,
$h_t = i_t \odot x_t$ ($a_t$ replaced by 0, the normalisation by 1). A document starts at
each packed segment's first position processed, and at the first position processed when
no document has begun: the state is then the pair `(h, started)`, `started` a boolean
scalar, `False` in `init_state()` (a fresh stream, a `reset`) and `True` after any
position, so `step`, chunks and the call agree whatever the values of `h` (exact zeros
included).
"""

import math
from typing import ClassVar, Literal

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from beartype import beartype
from jaxtyping import (
    Array,
    ArrayLike,
    Float,
    Inexact,
    Integer,
    PRNGKeyArray,
    PyTree,
    jaxtyped,
)

from .._checks import (
    Size,
    check_form,
    check_key,
    check_sequence,
    check_size,
    check_token,
    complex_dtype,
    complex_float_dtype,
    float_dtype,
)
from .._scan._algebra import AbstractAlgebra, Diagonal, RotationScaling
from .._scan._methods import AbstractScanMethod, holds_start, scan_method
from .._scan._recurrence import ScanMethod, recurrence, segment_starts
from .._surface import checks_first
from ._core import AbstractStatesCore, check_takes_dt, rebuild
from ._discretization import RGLRUDiscretization, check_discretization
from ._dt import check_dt
from ._projection import Precision, check_precision
from ._rglru_init import block_diagonal_init, check_rglru_ring, rglru_lambda_init
from ._rglru_terms import rglru_terms, split_state

DocumentStart = Literal["normalised", "unnormalised"]
Eigenvalues = Literal["positive", "signed"]


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
    or `(2, d_model/2)` real planar pairs, real parts then imaginary parts (`"real"`). With
    `document_start="unnormalised"`, the pair `(h, started)` of that array and a boolean
    scalar (whether a document has begun).

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
    position processed, and where the state before it has begun none (a new
    stream, a `reset`, no `initial_state`: the state's `started` flag is `False`). The two
    agree on every position of a sequence that does not start a document there.

    **Eigenvalues.** `"positive"` (default, Griffin's): $a_t \in (0, 1]$; `"signed"`:
    $a_t = 2\sigma(\Lambda)^{c r_t} - 1 \in (-1, 1]$ (see the module docstring).

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
    eigenvalues: str = eqx.field(static=True)
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
        eigenvalues: Eigenvalues = "positive",
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
        - `eigenvalues`: `"positive"` (default, Griffin's $a_t = \sigma(\Lambda)^{c r_t}
            \in (0, 1]$) or `"signed"` ($a_t = 2\sigma(\Lambda)^{c r_t} - 1 \in (-1, 1]$,
            negative transitions; see the module docstring).
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
        bad = isinstance(d_state, bool) or not isinstance(d_state, int | np.integer)
        if d_state is not None and (bad or d_state != d_model):
            raise ValueError(
                f"RGLRU's state has the width of its input, so `d_state` must be None or "
                f"d_model={d_model}; got d_state={d_state}. For a wider recurrence, project "
                "the input to that width first (as Hawk's block does)."
            )
        check_key(key)
        check_rglru_ring(r_min, r_max, max_phase, c, float_dtype(dtype))
        if document_start not in ("normalised", "unnormalised"):
            raise ValueError(
                "`document_start` must be 'normalised' (eq. (4) at every position) or "
                "'unnormalised' (recurrentgemma's: a document's first input enters whole); "
                f"got {document_start!r}."
            )
        if eigenvalues not in ("positive", "signed"):
            raise ValueError(
                "`eigenvalues` must be 'positive' (Griffin's a_t in (0, 1]) or 'signed' "
                f"(a_t = 2 sigma(Lambda)^(c r_t) - 1 in (-1, 1]); got {eigenvalues!r}."
            )
        discretization = check_discretization(
            discretization, ("variance_preserving", "impulse", "zoh"), "RGLRU"
        )
        if eigenvalues == "signed" and discretization == "zoh":
            raise ValueError(
                "`discretization='zoh'` holds the input over a step by integrating a^s, "
                "undefined for the negative transitions of `eigenvalues='signed'`; use "
                "'variance_preserving' or 'impulse' with it."
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
        self.eigenvalues = eigenvalues
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

    def init_state(self) -> PyTree[Array]:
        """The zero state: `(d_model,)` real; with `phase`, `(d_model/2,)` complex or
        `(2, d_model/2)` real planar (`form="real"`). With `document_start="unnormalised"`,
        the pair `(zeros, False)`: no document begun."""
        modes, dtype = self.Lambda.shape[0], self.Lambda.dtype
        if not self.phase:
            h = jnp.zeros(modes, dtype)
        elif self.form == "complex":
            h = jnp.zeros(modes, complex_dtype(dtype))
        else:
            h = jnp.zeros((2, modes), dtype)
        return (h, jnp.asarray(False)) if self.document_start == "unnormalised" else h

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
        """(transitions, drives) per position: `eqx_lru._cores._rglru_terms.rglru_terms`."""
        return rglru_terms(self, x, dt, starts)

    def _output(self, h: Array) -> Float[Array, "*length d_model"]:
        if not self.phase:
            return h
        if self.form == "complex":
            return jnp.concatenate([h.real, h.imag], axis=-1)
        return h.reshape(*h.shape[:-2], -1)

    def _check_state(self, state) -> tuple[Array, Array | None]:
        """`(h, started)` of a state (`started` `None` for the normalised core), checked
        against `init_state()`'s layout."""
        return split_state(self, state)

    def _states(self, u, initial_state, reverse, segment_ids, dt=None) -> Inexact[Array, "..."]:
        check_sequence(u, self.d_model, self.Lambda.dtype)
        started = None
        if initial_state is not None:
            initial_state, started = self._check_state(initial_state)
        dt = None if dt is None else check_dt(dt, u.shape[0], self.Lambda.dtype)
        starts = None
        if self.document_start == "unnormalised":
            starts = self._document_starts(u.shape[0], started, reverse, segment_ids)
        a, b = self._terms(u, dt, starts)
        return recurrence(
            a, b, algebra=self._algebra, initial_state=initial_state, reverse=reverse,
            method=self.method, segment_ids=segment_ids,
        )  # fmt: skip

    def _document_starts(self, length, started, reverse, segment_ids) -> Array:
        """`document_start="unnormalised"`: `True` at each position that starts a document:
        a packed segment's first position processed, and the first position processed when
        the state before it has begun none (`started` false or no state; on the device
        holding the sequence's start, for a sequence split across devices)."""
        first = jnp.arange(length) == (length - 1 if reverse else 0)
        if started is not None:
            first = first & ~started
        first = first & holds_start(self.method.resolve(), reverse=reverse)
        if segment_ids is None:
            return first
        return first | segment_starts(segment_ids, reverse=reverse, method=self.method.resolve())

    def _outputs(self, states, u, initial_state, reverse, segment_ids) -> Array:
        del u, initial_state, reverse, segment_ids
        return self._output(states)

    def _final(self, state: Array) -> PyTree[Array]:
        """The state after the last position processed: with `"unnormalised"`, `(h,
        True)` (every position continues or starts a document)."""
        return (state, jnp.asarray(True)) if self.document_start == "unnormalised" else state

    @checks_first()
    def run(
        self,
        u: Float[ArrayLike, "length d_model"],
        *,
        initial_state: PyTree[ArrayLike] | None = None,
        reverse: bool = False,
        length: Integer[ArrayLike, ""] | None = None,
        segment_ids: Integer[ArrayLike, " length"] | None = None,
        dt: ArrayLike | None = None,
    ) -> tuple[Float[Array, "length d_model"], PyTree[Array]]:
        r"""Run over one sequence `(length, d_model)` from `initial_state` (default
        `init_state()`): `reverse`, `length`, `segment_ids` as
        `eqx_lru.AbstractRecurrentCore.run`, `dt` positive time steps `(length,)` or a
        scalar (see the concepts page on time steps).

        **Returns:** `(y, final_state)`, $y$ of shape `(length, d_model)`.
        """
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
    ) -> Float[Array, "length d_model"]:
        r"""The outputs $y$ of `run`, `(length, d_model)` (`key` is ignored)."""
        del key
        options = dict(initial_state=initial_state, reverse=reverse, length=length)
        return self.run(u, segment_ids=segment_ids, dt=dt, **options)[0]

    @checks_first()
    @jaxtyped(typechecker=beartype)
    def step(
        self,
        state: PyTree[ArrayLike],
        u_t: Float[ArrayLike, " d_model"],
        *,
        dt: ArrayLike | None = None,
    ) -> tuple[PyTree[Array], Float[Array, " d_model"]]:
        r"""One position: $h_t = a_t h_{t-1} + \sqrt{1-|a_t|^2}\, i_t x_t$, `(h_t, y_t)`;
        `dt` this position's time step (a positive scalar; the input's gain then follows
        the `discretization`, as in the call). With
        `document_start="unnormalised"`, $h_t = i_t x_t$ from a state `(h, False)` (a
        document's first position), and the state is `(h_t, True)`. Repeated from
        `init_state()` it equals the parallel call."""
        u_t = jnp.asarray(u_t)
        check_token(u_t, self.d_model, self.Lambda.dtype)
        h, started = self._check_state(state)
        check_takes_dt(self, dt=dt)
        dt = None if dt is None else check_dt(dt, None, self.Lambda.dtype)
        a, b = self._terms(u_t, dt, None if started is None else ~started)
        h = self._algebra.apply(a, h) + b
        return self._final(h), self._output(h)

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
