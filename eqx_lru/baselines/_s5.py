r"""S5 (Smith, Warrington, Linderman 2023, "Simplified state space layers for sequence
modeling"): one multiple-input multiple-output diagonal SSM with HiPPO-N eigenvalues."""

import math
from collections.abc import Mapping
from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Complex, Float, PRNGKeyArray

from .._checks import (
    check_choice,
    check_fits,
    check_form,
    check_size,
    check_steps,
    complex_dtype,
    float_dtype,
)
from .._scan._methods import scan_method
from .._training._optim import check_param_groups
from ._common import Pair, check_even_state, cmul, zoh_pairs
from ._ssm import AbstractDiagonalSSM


def hippo_n(size: int) -> np.ndarray:
    r"""The normal part of HiPPO-LegS, float64 `(size, size)`: $S = -A_\text{LegS} + p p^\top$
    with $(A_\text{LegS})_{nk} = \sqrt{(2n+1)(2k+1)}$ ($n > k$), $n + 1$ ($n = k$), 0 ($n < k$)
    and $p_n = \sqrt{n + 1/2}$. $S = -\tfrac12 I + K$ with $K$ skew-symmetric."""
    n = np.arange(size)
    q = np.sqrt(2 * n + 1.0)
    legs = np.where(n[:, None] > n[None, :], q[:, None] * q[None, :], 0.0) + np.diag(n + 1.0)
    p = np.sqrt(n + 0.5)
    return -legs + p[:, None] * p[None, :]


def hippo_n_modes(size: int) -> tuple[np.ndarray, np.ndarray]:
    r"""The kept half of the eigendecomposition of `hippo_n(size)` (`size` even):
    eigenvalues $\Lambda = -\tfrac12 + i\omega$ with $\omega > 0$, shape `(size/2,)`, and the
    orthonormal eigenvectors $V$ `(size, size/2)`, so that
    $S = V \Lambda V^* + \overline{V \Lambda V^*}$ (the other half are the conjugates)."""
    skew = hippo_n(size) + 0.5 * np.eye(size)
    omega, vectors = np.linalg.eigh(-1j * skew)  # K v = i ω v; ascending ω, pairs ±ω
    keep = np.argsort(omega)[size // 2 :]
    return -0.5 + 1j * omega[keep], vectors[:, keep]


#: The initialisations of $C$ of S5's code (its `--C_init`); see `S5`.
C_INITS = ("trunc_standard_normal", "lecun_normal", "complex_normal")


def s5_eigenbasis(d_state: int, blocks: int) -> tuple[np.ndarray, np.ndarray]:
    """Block-diagonal HiPPO-N: `blocks` copies of `hippo_n_modes(d_state // blocks)`.
    Returns the kept eigenvalues `(d_state/2,)` and eigenvectors `(d_state, d_state/2)`."""
    size = d_state // blocks
    lam, vec = hippo_n_modes(size)
    vectors = np.zeros((d_state, d_state // 2), complex)
    for j in range(blocks):
        vectors[j * size : (j + 1) * size, j * (size // 2) : (j + 1) * (size // 2)] = vec
    return np.tile(lam, blocks), vectors


class S5(AbstractDiagonalSSM):
    r"""The S5 core: one MIMO SSM over all $H$ channels,

    $$\dot x = \Lambda x + \tilde B u, \qquad y = 2\operatorname{Re}(\tilde C x) + D \odot u,$$

    $\Lambda$ diagonal complex ($P/2$ modes), discretised per mode by zero-order hold with
    its own step $\Delta_j = e^{\log\Delta_j}$: $\bar\Lambda = e^{\Lambda\Delta}$,
    $\bar B = (e^{\Lambda\Delta} - 1)\Lambda^{-1}\tilde B$, $x_k = \bar\Lambda x_{k-1} +
    \bar B u_k$, $x_{-1} = 0$. Conjugate symmetry: the $P/2$ modes stand for the $P$ of a
    real system, hence $2\operatorname{Re}$.

    **`d_state`** is $P$, S5's state size: $P/2$ complex modes are stored. It must be a
    multiple of `2 * blocks`.

    **Initialisation (HiPPO-N, $J$ = `blocks`).** $\Lambda$ and the eigenvectors $V$ of
    the block-diagonal matrix with $J$ copies of the $P/J$-sized normal part of HiPPO-LegS
    (`hippo_n`, `s5_eigenbasis`); $\operatorname{Re}\Lambda = -\tfrac12$.
    As the official code: $B$ real `(P, H)` by `lecun_normal` (truncated normal of
    variance $1/P$, the fan-in of a `(P, H)` matrix), moved to the eigenbasis:
    $\tilde B = V^* B$ (stored as real and imaginary parts). $C$ by `C_init`, S5's
    `--C_init` (its run scripts choose it per task):

    - `"trunc_standard_normal"` (S5's default): $C$ complex `(H, P)`, the real and imaginary
      parts truncated normal of variance $1/P$ each (one `lecun_normal` row per output),
      $\tilde C = C V$;
    - `"lecun_normal"`: the same with variance $1/(HP)$ (`lecun_normal` over the whole
      `(H, P, 2)` array: fan-in $HP$), $\tilde C = C V$;
    - `"complex_normal"`: $\tilde C$ itself `(H, P/2)`, real and imaginary parts normal of
      variance $\tfrac12$ each (not moved by $V$).

    $\log\Delta \sim U[\log\Delta_\min, \log\Delta_\max]$ per mode,
    $D \sim \mathcal N(0, 1)$.

    **Fields** (all real): `Lambda_re`, `Lambda_im`, `log_step` `(P/2,)`; `B_re`, `B_im`
    `(P/2, H)`; `C_re`, `C_im` `(H, P/2)`; `D` `(H,)`. As in S5, $\operatorname{Re}\Lambda$
    is trained freely (no clipping). `recurrent_fields`: $\Lambda$, $\tilde B$, $\Delta$
    (paper §D.2); `param_groups` moves fields to other groups of `eqx_lru.lru_optimizer`
    (S5's optimiser variants: `{"log_step": "decay"}` for `--dt_global`, $\tilde B$
    to `"decay"` for `BfastandCdecay`, to `"recurrent_decay"` for `BandCdecay`).

    **Time steps** (`dt=`, as `eqx_lru.ComplexLRU`'s: one per position, or a scalar): the
    zero-order hold over $\Delta_j \Delta t_k$ at position $k$, as in S5's irregular-sampling
    experiments: $\bar\Lambda_k = e^{\Lambda\Delta\Delta t_k}$,
    $\bar B_k = (\bar\Lambda_k - 1)\Lambda^{-1}\tilde B$ (the input is held over the
    step). `None` is $\Delta t \equiv 1$.

    **Bidirectional.** `LRUBlock(bidirectional=True)` adds a second S5 core run in
    reverse and sums the outputs; S5's own bidirectional variant shares $\Lambda, \tilde B$
    between directions, here each direction has its own parameters.

    **Real form.** The states are complex. `form="real"` runs the same recurrence as
    $2 \times 2$ rotation-scaling blocks on the `RotationScaling` scan (real arithmetic only,
    same parameters and function, as `eqx_lru.RealLRU`); its state is real
    `(2, d_state // 2)` (real parts, then imaginary parts).

    ??? cite
        Smith, Warrington, Linderman (2023), "Simplified State Space Layers for Sequence
        Modeling", ICLR.
    """

    Lambda_re: Float[Array, " modes"]
    Lambda_im: Float[Array, " modes"]
    log_step: Float[Array, " modes"]
    B_re: Float[Array, "modes d_model"]
    B_im: Float[Array, "modes d_model"]
    C_re: Float[Array, "d_model modes"]
    C_im: Float[Array, "d_model modes"]
    D: Float[Array, " d_model"]
    blocks: int = eqx.field(static=True)
    form: str = eqx.field(static=True)
    method: Any = eqx.field(static=True)
    param_groups: tuple[tuple[str, str], ...] = eqx.field(static=True, default=())

    recurrent_fields: ClassVar[tuple[str, ...]] = (
        "Lambda_re",
        "Lambda_im",
        "log_step",
        "B_re",
        "B_im",
    )
    takes_dt: ClassVar[bool] = True

    def __init__(
        self,
        d_model: int,
        d_state: int,
        *,
        blocks: int = 1,
        form: str = "complex",
        C_init: str = "trunc_standard_normal",
        dt_min: float = 0.001,
        dt_max: float = 0.1,
        method: Any = "auto",
        param_groups: Mapping[str, str] | None = None,
        dtype=None,
        key: PRNGKeyArray,
    ):
        """**Arguments:** `d_model` ($H$), `d_state` ($P$, a multiple of `2 * blocks`),
        `blocks` ($J$, HiPPO-N blocks of size $P/J$), `form` (`"complex"` or `"real"`),
        `C_init` (one of `C_INITS`, see above), `dt_min`/`dt_max` (range of the log-uniform
        initial steps), `method` (scan method of `eqx_lru.linear_recurrence`),
        `param_groups` (`{field: group}`, see above; kept as sorted pairs), `dtype` (real
        floating; default JAX's float), `key`."""
        check_size("d_model", d_model)
        check_size("blocks", blocks)
        what = f" (2 x blocks={blocks}: even-sized HiPPO-N blocks)"
        check_even_state(d_state, blocks, what, owner="S5")
        check_steps(dt_min, dt_max, dtype)
        check_choice("C_init", C_init, C_INITS)
        groups = check_param_groups("S5", param_groups, _FIELDS)
        dtype = float_dtype(dtype)
        if check_form(form) == "complex":
            self._check_complex_dtype(dtype)
        # B, C (complex) and the eigenbasis V, a dense (P, P) complex matrix.
        elements = 4 * d_model * d_state + 2 * d_state * d_state
        check_fits(f"S5(d_model={d_model}, d_state={d_state})", dtype, elements)
        lam, vectors = s5_eigenbasis(d_state, blocks)
        b_key, c_key, dt_key, d_key = jax.random.split(key, 4)
        # B (real), C (complex) drawn, moved to the eigenbasis in JAX (traceable: `filter_vmap` over
        # keys builds ensembles); V is a constant of the sizes. In at least float32, as a
        # 16-bit `dtype` has no complex type; the results are cast to `dtype`.
        wide = dtype if dtype.itemsize >= 4 else jnp.dtype(jnp.float32)
        v = jnp.asarray(vectors, complex_dtype(wide))
        # Official S5: B by lecun_normal on (P, H) (fan-in P); C by C_init.
        b = jax.nn.initializers.lecun_normal()(b_key, (d_state, d_model), wide)
        highest = jax.lax.Precision.HIGHEST
        b_tilde = jnp.matmul(v.conj().T, b.astype(v.dtype), precision=highest)
        c_tilde = _init_c(C_init, c_key, d_model, v, wide)
        self.Lambda_re = jnp.asarray(np.real(lam), dtype)
        self.Lambda_im = jnp.asarray(np.imag(lam), dtype)
        self.log_step = jax.random.uniform(
            dt_key, lam.shape, dtype, math.log(dt_min), math.log(dt_max)
        )
        self.B_re, self.B_im = b_tilde.real.astype(dtype), b_tilde.imag.astype(dtype)
        self.C_re, self.C_im = c_tilde.real.astype(dtype), c_tilde.imag.astype(dtype)
        self.D = jax.random.normal(d_key, (d_model,), dtype)
        self.blocks = blocks
        self.form = form
        self.method = scan_method(method)
        self.param_groups = groups

    def continuous(self) -> Complex[Array, " modes"]:
        r"""The continuous-time eigenvalues $\Lambda$."""
        return jax.lax.complex(self.Lambda_re, self.Lambda_im)

    def _discrete_over(self, u: Array, dt: Array) -> tuple[Pair, Pair]:
        r"""The zero-order hold over each position's own step $\Delta_j \Delta t_k$:
        $\bar\Lambda_k = e^{\Lambda \Delta \Delta t_k}$ and
        $\bar B_k u_k = (\bar\Lambda_k - 1)\Lambda^{-1} \tilde B u_k$."""
        step = jnp.exp(self.log_step) * dt[..., None]
        lam, factor = zoh_pairs(self.Lambda_re, self.Lambda_im, step)
        return lam, cmul(factor, self._drive(u, (self.B_re, self.B_im)))

    def _pairs(self) -> tuple[Pair, Pair]:
        lam, (f_re, f_im) = zoh_pairs(self.Lambda_re, self.Lambda_im, jnp.exp(self.log_step))
        return lam, cmul((f_re[:, None], f_im[:, None]), (self.B_re, self.B_im))

    def _drive(self, u: Array, b: Pair) -> Pair:
        return u @ b[0].T, u @ b[1].T

    def _readout(self, x_re: Array, x_im: Array) -> Array:
        return x_re @ self.C_re.T - x_im @ self.C_im.T

    def _state_shape(self) -> tuple[int, ...]:
        return self.Lambda_re.shape


_FIELDS = ("Lambda_re", "Lambda_im", "log_step", "B_re", "B_im", "C_re", "C_im", "D")


def _init_c(C_init: str, key: PRNGKeyArray, d_model: int, v: Array, dtype) -> Array:
    r"""$\tilde C$ `(d_model, P/2)` complex, drawn as S5's `--C_init` draws it (see `S5`)."""
    d_state, modes = v.shape
    if C_init == "complex_normal":  # drawn in the eigenbasis directly
        parts = jax.random.normal(key, (d_model, modes, 2), dtype) * math.sqrt(0.5)
        return jax.lax.complex(parts[..., 0], parts[..., 1])
    if C_init == "lecun_normal":  # fan-in H * P: the whole (H, P, 2) array
        parts = jax.nn.initializers.lecun_normal()(key, (d_model, d_state, 2), dtype)
    else:  # trunc_standard_normal: one lecun_normal (1, P, 2) row per output, fan-in P
        parts = jax.nn.initializers.variance_scaling(
            1.0, "fan_in", "truncated_normal", in_axis=-2, out_axis=-1, batch_axis=0
        )(key, (d_model, d_state, 2), dtype)
    c = jax.lax.complex(parts[..., 0], parts[..., 1])
    return jnp.matmul(c.astype(v.dtype), v, precision=jax.lax.Precision.HIGHEST)
