r"""S4D (Gu et al. 2022, "On the parameterization and initialization of diagonal state
space models"): $H$ independent single-input single-output diagonal SSMs."""

import math
from collections.abc import Mapping
from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from beartype import beartype
from jaxtyping import Array, ArrayLike, Complex, Float, Inexact, Integer, PRNGKeyArray, jaxtyped

from .._checks import (
    check_choice,
    check_fits,
    check_form,
    check_sequence,
    check_size,
    check_steps,
    float_dtype,
)
from .._cores._core import check_sequence_args
from .._scan._methods import scan_method
from .._scan._sequence_parallel import SequenceParallel
from .._surface import checks_first
from .._training._optim import check_param_groups
from ._common import Pair, check_even_state, cmul, zoh_pairs
from ._s5 import hippo_n_modes
from ._ssm import AbstractDiagonalSSM

_INITS = ("lin", "inv", "legs")
_MODES = ("recurrence", "convolution")
_FIELDS = ("log_dt", "A_re_log", "A_im", "B_re", "B_im", "C_re", "C_im", "D")


def s4d_eigenvalues(d_state: int, init: str) -> tuple[list[float], list[float]]:
    r"""The continuous-time $A_n$, $n = 0, \dots, N/2 - 1$, as (real, imaginary) lists:
    S4D-Lin $A_n = -\tfrac12 + i\pi n$; S4D-Inv
    $A_n = -\tfrac12 + i \tfrac{N}{\pi}\left(\tfrac{N}{2n + 1} - 1\right)$; S4D-LegS the
    eigenvalues $-\tfrac12 + i\omega_n$, $\omega_n > 0$ ascending, of the normal part of
    HiPPO-LegS (`hippo_n_modes`)."""
    check_choice("init", init, _INITS)
    modes = range(d_state // 2)
    if init == "legs":
        lam, _ = hippo_n_modes(d_state)
        return [float(x) for x in np.real(lam)], [float(x) for x in np.imag(lam)]
    if init == "lin":
        imag = [math.pi * n for n in modes]
    else:
        imag = [d_state / math.pi * (d_state / (2 * n + 1) - 1) for n in modes]
    return [-0.5] * len(imag), imag


def s4d_input(d_state: int, init: str) -> tuple[list[float], list[float]]:
    r"""The initial $B_n$ of every channel, as (real, imaginary) lists: 1 for S4D-Lin and
    S4D-Inv; for S4D-LegS, HiPPO-LegS's $b_k = \sqrt{2k + 1}$ in the eigenbasis,
    $B = V^* b$ (`hippo_n_modes`), imaginary parts clipped to $[-2, 2]$ as S4's code does
    (`B_clip=2`). $V$'s columns are NumPy's eigenvectors; S4's come from PyTorch's, and
    their phases (hence which parts the clip touches) may differ."""
    check_choice("init", init, _INITS)
    if init != "legs":
        return [1.0] * (d_state // 2), [0.0] * (d_state // 2)
    _, vectors = hippo_n_modes(d_state)
    b = vectors.conj().T @ np.sqrt(2 * np.arange(d_state) + 1.0)
    return [float(x) for x in np.real(b)], [float(x) for x in np.clip(np.imag(b), -2.0, 2.0)]


class S4D(AbstractDiagonalSSM):
    r"""The S4D core: for each of the $H$ channels $h$ a SISO SSM with $N/2$ complex modes,

    $$\dot x^{(h)} = A^{(h)} x^{(h)} + B^{(h)} u^{(h)}, \qquad
    y^{(h)} = 2 \operatorname{Re}\big(C^{(h)} x^{(h)}\big) + D_h u^{(h)},$$

    $A^{(h)} = \operatorname{diag}(-e^{a_{\log}} + i a_\text{im})$, discretised by
    zero-order hold with a learnable step $\Delta_h = e^{\log\Delta_h}$:
    $\bar A = e^{\Delta A}$, $\bar B = (e^{\Delta A} - 1) A^{-1} B$,
    $x_k = \bar A x_{k-1} + \bar B u_k$, $x_{-1} = 0$. The $N/2$ modes stand for the $N$ of
    a real system whose eigenvalues come in conjugate pairs (conjugate symmetry): the
    conjugate half is implied, hence the factor 2 on the real part.

    **`d_state`** is $N$, the real state size per channel as in the S4D paper and code
    (`d_state=64` keeps 32 complex modes per channel, $H \cdot N/2$ complex numbers of
    state in all). It must be even.

    **Fields** (all real): `log_dt` `(H,)` $\sim U[\log\Delta_\min, \log\Delta_\max]$;
    `A_re_log`, `A_im` `(H, N/2)` (S4D-Lin, S4D-Inv or S4D-LegS, see `s4d_eigenvalues`;
    $\operatorname{Re} A = -e^{a_{\log}} < 0$ always); `B_re`, `B_im` `(H, N/2)`
    (`s4d_input`: S4D's $B = 1$, or LegS's projected $b$; trainable); `C_re`, `C_im`
    `(H, N/2)` $\sim \mathcal N(0, \tfrac12)$ (unit-variance complex normal); `D` `(H,)`
    $\sim \mathcal N(0, 1)$.
    `recurrent_fields`: $\Delta$, $A$ and $B$ get the smaller learning rate and no weight
    decay in `eqx_lru.lru_optimizer` (paper §D.2); `param_groups` moves fields to other
    groups, as S4's per-parameter settings do (`{"log_dt": "no_decay"}`: $\Delta$ at the
    base rate without decay; `"recurrent_decay"` for $C$: the smaller rate with decay).

    **Convolution mode.** The recurrence keeps all $L \times H \times N/2$ complex states of
    each example (the backward pass needs them), which is $N/2$ times the LRU's memory at the
    same $H$. `mode="convolution"` computes the same outputs as S4D's own code does, as a
    causal convolution with the kernel $K_l = 2\operatorname{Re}(\sum_n C_n \bar B_n
    \bar A_n^l)$ (`kernel`, once per layer, shared by the batch) by FFT: $O(HL)$ memory per
    example. The call uses it when it starts from zero without `segment_ids` and scans on one
    device (a `SequenceParallel` method runs the recurrence); `run` (which
    returns the final state), a call with `initial_state` or `segment_ids`, and `step` run
    the recurrence, the same function.

    **Real form.** The states are complex. `form="real"` runs the same recurrence with each
    mode as a $2 \times 2$ rotation-scaling block (paper §E.3) on the `RotationScaling`
    scan, as `eqx_lru.RealLRU` does for the LRU: same parameters, same function, no complex
    number anywhere (the discretisation too is computed on real pairs). Its state is real
    `(d_model, 2, d_state // 2)` (planar: real parts, then imaginary parts).

    ??? cite
        Gu, Gupta, Goel, Ré (2022), "On the Parameterization and Initialization of Diagonal
        State Space Models", NeurIPS.
    """

    log_dt: Float[Array, " d_model"]
    A_re_log: Float[Array, "d_model modes"]
    A_im: Float[Array, "d_model modes"]
    B_re: Float[Array, "d_model modes"]
    B_im: Float[Array, "d_model modes"]
    C_re: Float[Array, "d_model modes"]
    C_im: Float[Array, "d_model modes"]
    D: Float[Array, " d_model"]
    init: str = eqx.field(static=True)
    form: str = eqx.field(static=True)
    mode: str = eqx.field(static=True)
    method: Any = eqx.field(static=True)
    param_groups: tuple[tuple[str, str], ...] = eqx.field(static=True, default=())

    recurrent_fields: ClassVar[tuple[str, ...]] = ("log_dt", "A_re_log", "A_im", "B_re", "B_im")

    def __init__(
        self,
        d_model: int,
        d_state: int,
        *,
        init: str = "lin",
        form: str = "complex",
        mode: str = "recurrence",
        dt_min: float = 0.001,
        dt_max: float = 0.1,
        method: Any = "auto",
        param_groups: Mapping[str, str] | None = None,
        dtype=None,
        key: PRNGKeyArray,
    ):
        """**Arguments:** `d_model` ($H$), `d_state` ($N$, even: $N/2$ complex modes per
        channel), `init` (`"lin"`, `"inv"` or `"legs"`), `form` (`"complex"` or `"real"`),
        `mode` (`"recurrence"` or `"convolution"`, see above),
        `dt_min`/`dt_max` (range of the log-uniform initial step), `method` (scan method of
        `eqx_lru.linear_recurrence`, string or object), `param_groups` (`{field: group}`,
        see above; kept as sorted pairs), `dtype` (real floating; default JAX's float),
        `key`."""
        check_size("d_model", d_model)
        check_even_state(d_state, owner="S4D")
        check_steps(dt_min, dt_max, dtype)
        check_choice("init", init, _INITS)
        check_choice("mode", mode, _MODES)
        groups = check_param_groups("S4D", param_groups, _FIELDS)
        dtype = float_dtype(dtype)
        if check_form(form) == "complex":
            self._check_complex_dtype(dtype)
        check_fits(f"S4D(d_model={d_model}, d_state={d_state})", dtype, 3 * d_model * d_state)
        re, im = s4d_eigenvalues(d_state, init)
        dt_key, c_key = jax.random.split(key)
        shape = (d_model, d_state // 2)
        self.log_dt = jax.random.uniform(
            dt_key, (d_model,), dtype, math.log(dt_min), math.log(dt_max)
        )
        self.A_re_log = jnp.broadcast_to(jnp.log(-jnp.asarray(re, dtype)), shape)
        self.A_im = jnp.broadcast_to(jnp.asarray(im, dtype), shape)
        b_re, b_im = s4d_input(d_state, init)
        self.B_re = jnp.broadcast_to(jnp.asarray(b_re, dtype), shape)
        self.B_im = jnp.broadcast_to(jnp.asarray(b_im, dtype), shape)
        c = jax.random.normal(c_key, (2,) + shape, dtype) * math.sqrt(0.5)
        self.C_re, self.C_im = c[0], c[1]
        self.D = jax.random.normal(jax.random.fold_in(c_key, 1), (d_model,), dtype)
        self.init = init
        self.form = form
        self.mode = mode
        self.method = scan_method(method)
        self.param_groups = groups

    def continuous(self) -> Complex[Array, "d_model modes"]:
        r"""The continuous-time eigenvalues $A = -e^{a_{\log}} + i a_\text{im}$."""
        return jax.lax.complex(-jnp.exp(self.A_re_log), self.A_im)

    def _pairs(self) -> tuple[Pair, Pair]:
        dt = jnp.exp(self.log_dt)[:, None]
        lam, factor = zoh_pairs(-jnp.exp(self.A_re_log), self.A_im, dt)
        return lam, cmul(factor, (self.B_re, self.B_im))

    def _drive(self, u: Array, b: Pair) -> Pair:
        return u[..., None] * b[0], u[..., None] * b[1]

    def _readout(self, x_re: Array, x_im: Array) -> Array:
        return jnp.sum(self.C_re * x_re - self.C_im * x_im, axis=-1)

    def _state_shape(self) -> tuple[int, ...]:
        return self.A_im.shape

    @checks_first(check_sequence_args)
    @jaxtyped(typechecker=beartype)
    def __call__(
        self,
        u: Float[ArrayLike, "length d_model"],
        *,
        initial_state: Inexact[ArrayLike, "..."] | None = None,
        reverse: bool = False,
        length: Integer[ArrayLike, ""] | None = None,
        segment_ids: Integer[ArrayLike, " length"] | None = None,
        dt: ArrayLike | None = None,
        key: PRNGKeyArray | None = None,
    ) -> Float[Array, "length d_model"]:
        r"""As `eqx_lru.AbstractRecurrentCore.__call__`; by FFT convolution with
        `mode="convolution"` when it starts from zero without `segment_ids` (and the
        sequence is not split across devices by a `SequenceParallel` method). S4D takes
        no time steps: `dt` other than `None` is refused."""
        # The convolution sees one chunk only of a sequence split across devices.
        local = not isinstance(self.method, SequenceParallel)
        if self.mode == "convolution" and local and initial_state is None:
            if segment_ids is None:
                return self._convolve(jnp.asarray(u), reverse)
        return super().__call__(
            u, initial_state=initial_state, reverse=reverse, length=length,
            segment_ids=segment_ids, dt=dt, key=key,
        )  # fmt: skip

    def kernel(self, length: int) -> Float[Array, "length d_model"]:
        r"""The convolution kernel $K_l = 2\operatorname{Re}(\sum_n C_n \bar B_n
        \bar A_n^l)$ for $l < L$ (`length`), in real arithmetic
        ($\bar A^l = e^{l p}(\cos lq + i \sin lq)$, $p + iq = \Delta A$)."""
        dt = jnp.exp(self.log_dt)[:, None]
        _, b = self._pairs()
        cb_re, cb_im = cmul((self.C_re, self.C_im), b)
        steps = jnp.arange(length, dtype=self.D.dtype)
        p, q = -jnp.exp(self.A_re_log) * dt, self.A_im * dt
        decay, angle = jnp.exp(p[..., None] * steps), q[..., None] * steps  # (H, N/2, L)
        terms = cb_re[..., None] * jnp.cos(angle) - cb_im[..., None] * jnp.sin(angle)
        return 2 * jnp.sum(decay * terms, axis=1).T

    def _convolve(self, u: Array, reverse: bool) -> Array:
        check_sequence(u, self.d_model, self.D.dtype)
        length = u.shape[0]
        x = u[::-1] if reverse else u
        size = 2 * length  # zero padding: a linear, not circular, convolution
        spectrum = jnp.fft.rfft(x, size, axis=0) * jnp.fft.rfft(self.kernel(length), size, axis=0)
        y = jnp.fft.irfft(spectrum, size, axis=0)[:length].astype(u.dtype)
        return (y[::-1] if reverse else y) + self.D * u
