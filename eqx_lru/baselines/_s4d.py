r"""S4D (Gu et al. 2022, "On the parameterization and initialization of diagonal state
space models"): $H$ independent single-input single-output diagonal SSMs."""

import math
from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
from beartype import beartype
from jaxtyping import Array, Complex, Float, PRNGKeyArray, jaxtyped

from .. import Diagonal, linear_recurrence
from ._common import (
    check_even_state,
    check_sequence,
    check_size,
    check_state,
    check_steps,
    complex_dtype,
    float_dtype,
    resolve_method,
    zoh,
)

_INITS = ("lin", "inv")


def s4d_eigenvalues(d_state: int, init: str) -> tuple[list[float], list[float]]:
    r"""The continuous-time $A_n$, $n = 0, \dots, N/2 - 1$, as (real, imaginary) lists:
    S4D-Lin $A_n = -\tfrac12 + i\pi n$; S4D-Inv
    $A_n = -\tfrac12 + i \tfrac{N}{\pi}\left(\tfrac{N}{2n + 1} - 1\right)$."""
    if init not in _INITS:
        raise ValueError(f"`init` must be one of {_INITS}, got {init!r}.")
    modes = range(d_state // 2)
    if init == "lin":
        imag = [math.pi * n for n in modes]
    else:
        imag = [d_state / math.pi * (d_state / (2 * n + 1) - 1) for n in modes]
    return [-0.5] * len(imag), imag


class S4D(eqx.Module):
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
    `A_re_log`, `A_im` `(H, N/2)` (S4D-Lin or S4D-Inv, see `s4d_eigenvalues`;
    $\operatorname{Re} A = -e^{a_{\log}} < 0$ always); `B_re`, `B_im` `(H, N/2)` $= 1, 0$
    (S4D's $B = 1$, trainable); `C_re`, `C_im` `(H, N/2)` $\sim \mathcal N(0, \tfrac12)$
    (unit-variance complex normal); `D` `(H,)` $\sim \mathcal N(0, 1)$.
    `recurrent_fields`: $\Delta$, $A$ and $B$ get the smaller learning rate and no weight
    decay in `eqx_lru.lru_optimizer` (paper §D.2).

    **Real form.** The states are complex. A real computation is the same recurrence with
    each mode as a $2 \times 2$ rotation-scaling block (paper §E.3), exactly as
    `eqx_lru.RealLRU` does for the LRU; this core only uses the complex `Diagonal` scan.

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
    method: Any = eqx.field(static=True)

    recurrent_fields: ClassVar[tuple[str, ...]] = ("log_dt", "A_re_log", "A_im", "B_re", "B_im")

    def __init__(
        self,
        d_model: int,
        d_state: int,
        *,
        init: str = "lin",
        dt_min: float = 0.001,
        dt_max: float = 0.1,
        method: Any = "auto",
        dtype=None,
        key: PRNGKeyArray,
    ):
        """**Arguments:** `d_model` ($H$), `d_state` ($N$, even: $N/2$ complex modes per
        channel), `init` (`"lin"` or `"inv"`), `dt_min`/`dt_max` (range of the log-uniform
        initial step), `method` (scan method of `eqx_lru.linear_recurrence`, string or
        object), `dtype` (real floating; default JAX's float), `key`."""
        check_size("d_model", d_model)
        check_even_state(d_state)
        check_steps(dt_min, dt_max)
        dtype = float_dtype(dtype)
        re, im = s4d_eigenvalues(d_state, init)
        dt_key, c_key = jax.random.split(key)
        shape = (d_model, d_state // 2)
        self.log_dt = jax.random.uniform(
            dt_key, (d_model,), dtype, math.log(dt_min), math.log(dt_max)
        )
        self.A_re_log = jnp.broadcast_to(jnp.log(-jnp.asarray(re, dtype)), shape)
        self.A_im = jnp.broadcast_to(jnp.asarray(im, dtype), shape)
        self.B_re, self.B_im = jnp.ones(shape, dtype), jnp.zeros(shape, dtype)
        c = jax.random.normal(c_key, (2,) + shape, dtype) * math.sqrt(0.5)
        self.C_re, self.C_im = c[0], c[1]
        self.D = jax.random.normal(jax.random.fold_in(c_key, 1), (d_model,), dtype)
        self.init = init
        self.method = resolve_method(method)

    @property
    def d_model(self) -> int:
        return self.D.shape[0]

    @property
    def d_state(self) -> int:
        return 2 * self.A_im.shape[1]

    def continuous(self) -> Complex[Array, "d_model modes"]:
        r"""The continuous-time eigenvalues $A = -e^{a_{\log}} + i a_\text{im}$."""
        return jax.lax.complex(-jnp.exp(self.A_re_log), self.A_im)

    def discretise(self) -> tuple[Complex[Array, "d_model modes"], Complex[Array, "d_model modes"]]:
        r"""$(\bar A, \bar B)$ of the zero-order hold with step $\Delta_h = e^{\log\Delta_h}$."""
        a = self.continuous()
        dt = jnp.exp(self.log_dt)[:, None]
        lam, factor = zoh(a * jax.lax.complex(dt, jnp.zeros_like(dt)), a)
        return lam, factor * jax.lax.complex(self.B_re, self.B_im)

    def init_state(self) -> Complex[Array, "d_model modes"]:
        """The zero state $x_{-1}$, complex `(d_model, d_state // 2)`."""
        return jnp.zeros(self.A_im.shape, complex_dtype(self.D.dtype))

    def _output(self, x: Array, u: Array) -> Array:
        return 2 * jnp.sum(self.C_re * x.real - self.C_im * x.imag, axis=-1) + self.D * u

    @jaxtyped(typechecker=beartype)
    def __call__(
        self,
        u: Float[Array, "length d_model"],
        *,
        initial_state: Complex[Array, "d_model modes"] | None = None,
        reverse: bool = False,
        key: PRNGKeyArray | None = None,
    ) -> Float[Array, "length d_model"]:
        r"""**Arguments:** `u` `(length, d_model)`, one sequence (batch with `jax.vmap`);
        `initial_state` (default zero); `reverse=True` runs from the last step; `key` ignored.

        **Returns:** $y_k = 2 \operatorname{Re}(C x_k) + D u_k$, shape `(length, d_model)`.
        """
        del key
        return self._output(self.hidden_states(u, initial_state, reverse), u)

    def hidden_states(
        self, u: Array, initial_state: Array | None = None, reverse: bool = False
    ) -> Complex[Array, "length d_model modes"]:
        """All states $x_0, \\dots, x_{L-1}$, complex `(length, d_model, d_state // 2)`."""
        check_sequence(u, self.d_model, self.D.dtype)
        if initial_state is not None:
            check_state(initial_state, self.init_state(), "initial_state")
        lam, b = self.discretise()
        drive = jax.lax.complex(u[:, :, None] * b.real, u[:, :, None] * b.imag)
        return linear_recurrence(
            lam, drive, algebra=Diagonal(), initial_state=initial_state, reverse=reverse,
            method=self.method,
        )

    @jaxtyped(typechecker=beartype)
    def step(
        self, state: Complex[Array, "d_model modes"], u_t: Float[Array, " d_model"]
    ) -> tuple[Complex[Array, "d_model modes"], Float[Array, " d_model"]]:
        r"""One token in RNN mode: $x_t = \bar A x_{t-1} + \bar B u_t$; returns
        `(x_t, y_t)`. Repeated from `init_state()` it equals the parallel call."""
        check_sequence(u_t[None], self.d_model, self.D.dtype)
        check_state(state, self.init_state())
        lam, b = self.discretise()
        u = u_t[:, None]
        state = lam * state + jax.lax.complex(u * b.real, u * b.imag)
        return state, self._output(state, u_t)
