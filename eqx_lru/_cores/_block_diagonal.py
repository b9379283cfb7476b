r"""`BlockDiagonalLRU`: a selective linear recurrence with input-dependent real
`block_size`×`block_size` blocks.

With $H$ = `d_model`, $N$ = `d_state` $= K b$ ($K$ blocks of size $b$), per position $t$,

$$x_t = A(u_t)\, x_{t-1} + \gamma \odot (B u_t), \qquad y_t = C x_t + D \odot u_t,$$

$A(u_t) = \operatorname{diag}(A_1(u_t), \dots, A_K(u_t))$, each block a real $b \times b$
matrix computed from the input, in one of two parameterisations (`parameterisation=`):

- `"normalised"` (the block-diagonal LRU of Dubinin, Orvieto and Effenberger, 2026): a
  block $M_k(u) = W_k u + M^0_k$ whose rows are scaled to an $\ell_1$ norm of at most
  $\rho_{k,i} = \sigma(\text{rho_logit}_{k,i}) < 1$,
  $$A_k(u)_{ij} = \rho_{k,i}\, \frac{M_k(u)_{ij}}{\max(1, \sum_j |M_k(u)_{ij}|)},$$
  so $\|A(u)\|_\infty \le \max \rho < 1$ for every input: stable by construction. Entries
  of either sign: reflections, rotations, permutations (scaled by $\rho$).
- `"householder"`: a product of `reflections` generalised Householder matrices times a
  contraction, $A_k(u) = \rho_k \prod_{r} (I - 2 \beta_{r,k}(u)\, \hat v_{r,k}(u)
  \hat v_{r,k}(u)^\top)$, $\hat v = v / \|v\|$, $v_{r,k}(u)$ linear in $u$,
  $\beta = \sigma(\cdot) \in (0, 1)$ (each factor has eigenvalues $1$ and $1 - 2\beta \in
  (-1, 1)$, so its spectral norm is 1), $\rho_k = \sigma(\text{rho_logit}_k) < 1$:
  $\|A(u)\|_2 \le \rho < 1$. Two reflections give every rotation of a plane; one gives
  reflections only.

**Input normalisation.** $\gamma = \sqrt{1 - \rho^2}$ per row (the LRU's eq. (7) with the
contraction in place of $|\lambda|$): since each row of $A$ has $\ell_1$ norm at most
$\rho_i$ (`"normalised"`), $|x_{t,i}| \le \rho_i \|x_{t-1}\|_\infty + \gamma_i |(Bu_t)_i|$,
and the state stays bounded, $\|x_t\|_\infty \le \sqrt{(1+\rho)/(1-\rho)}\,
\max_s \|B u_s\|_\infty$ from the zero state ($\rho = \max_i \rho_i$); likewise in the
2-norm for `"householder"`.

The scan runs on the library's algebras with one transition per position: `Block2x2` for
$b = 2$, `DenseAlgebra` on each block otherwise (an associative scan costs $O(b^3)$ per
combine). The blocks do not commute, so this core can track non-abelian state (the
symmetric groups $S_3$, $S_5$), which no diagonal core can (Grazzi et al. 2025; see the
concepts page on state tracking).
"""

import math
from typing import ClassVar, Literal

import equinox as eqx
import jax
import jax.numpy as jnp
from beartype import beartype
from jaxtyping import Array, ArrayLike, Float, Integer, PRNGKeyArray, PyTree, jaxtyped

from .._checks import (
    Size,
    check_key,
    check_not_complex,
    check_sequence,
    check_size,
    check_state,
    check_token,
    float_dtype,
)
from .._scan._algebra import AbstractAlgebra, Block2x2, DenseAlgebra
from .._scan._methods import AbstractScanMethod, scan_method
from .._scan._recurrence import ScanMethod, recurrence
from .._surface import checks_first
from ._core import AbstractStatesCore, check_takes_dt
from ._projection import Precision, check_precision

Parameterisation = Literal["normalised", "householder"]


class BlockDiagonalLRU(AbstractStatesCore):
    r"""A selective core with input-dependent real `block_size`×`block_size` blocks,
    $x_t = A(u_t) x_{t-1} + \gamma \odot B u_t$, $y_t = C x_t + D \odot u_t$, stable by
    construction (see the module docstring for the maths and both parameterisations).

    **Fields:** `rho_logit` (the contractions $\rho = \sigma(\text{rho_logit})$: `(blocks,
    block_size)` per row, `"normalised"`; `(blocks,)`, `"householder"`); the transitions'
    weights `W_A`, `A0` (`"normalised"`: `(d_model, blocks, b, b)` and `(blocks, b, b)`;
    `"householder"`: the reflections' vectors `(reflections, d_model, blocks, b)` and
    `(reflections, blocks, b)`), `W_beta`, `beta0` (`"householder"`: `(reflections,
    d_model, blocks)`, `(reflections, blocks)`; `None` otherwise), `B` `(d_state,
    d_model)`, `C` `(d_model, d_state)`, `D` `(d_model,)`.

    `recurrent_fields`: the transitions' parameters and `B` (the optimiser's recurrent
    group, as the LRU's $\nu, \theta, \gamma, B$).

    **State:** `(blocks, block_size)` real, block $k$'s coordinates in row $k$ (the flat
    state of $C$ is its reshape to `(d_state,)`). No `dt` (`takes_dt = False`).

    ??? cite

        ```bibtex
        @article{grazzi2025unlocking,
          title={Unlocking State-Tracking in Linear RNNs Through Negative Eigenvalues},
          author={Grazzi, Riccardo and Siems, Julien and Zela, Arber and Franke, J{\"o}rg
                  K.H. and Hutter, Frank and Pontil, Massimiliano},
          journal={ICLR},
          year={2025}
        }
        ```
    """

    rho_logit: Float[Array, "blocks ..."]
    W_A: Float[Array, "..."]
    A0: Float[Array, "..."]
    W_beta: Float[Array, "reflections d_model blocks"] | None
    beta0: Float[Array, "reflections blocks"] | None
    B: Float[Array, "d_state d_model"]
    C: Float[Array, "d_model d_state"]
    D: Float[Array, " d_model"]
    block_size: int = eqx.field(static=True)
    parameterisation: str = eqx.field(static=True)
    method: AbstractScanMethod = eqx.field(static=True)
    precision: jax.lax.Precision | None = eqx.field(static=True)

    recurrent_fields: ClassVar[tuple[str, ...]] = ("rho_logit", "W_A", "A0", "W_beta", "beta0", "B")
    takes_dt: ClassVar[bool] = False

    def __init__(
        self,
        d_model: Size,
        d_state: Size,
        *,
        block_size: Size,
        parameterisation: Parameterisation | str = "normalised",
        reflections: Size = 2,
        r_min: float = 0.9,
        r_max: float = 0.999,
        method: ScanMethod = "auto",
        precision: Precision = None,
        dtype=None,
        key: PRNGKeyArray,
    ):
        r"""**Arguments:**

        - `d_model`: $H$, the width of the input and the output.
        - `d_state`: $N$, the real numbers in the state: a multiple of `block_size`.
        - `block_size`: $b$, the size of each block ($b = 2$: general 2×2 blocks, the
            smallest that holds reflections and rotations together; $b = 1$: a signed
            diagonal).
        - `parameterisation`: `"normalised"` (default; rows scaled to an $\ell_1$ norm
            $\le \rho$) or `"householder"` (`reflections` generalised Householder factors
            times $\rho$).
        - `reflections`: the Householder factors per block (`"householder"` only).
        - `r_min`, `r_max`: the contractions $\rho$ start uniform in $[r_\min, r_\max]$,
            $0 < r_\min \le r_\max < 1$.
        - `method`: the scan method (as `eqx_lru.linear_recurrence`).
        - `precision`: the projections' matmuls (`jax.lax.Precision`).
        - `dtype`: the parameters' real dtype (default float32, float64 with x64).
        - `key`: a `jax.random` key.
        """
        d_model = check_size("d_model", d_model)
        d_state = check_size("d_state", d_state, "BlockDiagonalLRU: the real state size N")
        block_size = check_size("block_size", block_size)
        if d_state % block_size:
            raise ValueError(
                f"`d_state`={d_state} must be a multiple of `block_size`={block_size} (the "
                f"state is d_state/block_size blocks); pick d_state="
                f"{block_size * max(1, round(d_state / block_size))} or another block size."
            )
        if parameterisation not in ("normalised", "householder"):
            raise ValueError(
                "`parameterisation` must be 'normalised' (rows of each block scaled to an L1 "
                "norm <= rho < 1) or 'householder' (reflections times a contraction); got "
                f"{parameterisation!r}."
            )
        reflections = check_size("reflections", reflections)
        if not (0 < r_min <= r_max < 1):
            raise ValueError(
                f"`r_min`, `r_max` must satisfy 0 < r_min <= r_max < 1 (the contractions rho "
                f"start in [r_min, r_max]); got r_min={r_min}, r_max={r_max}."
            )
        check_key(key)
        dtype = float_dtype(dtype)
        blocks = d_state // block_size
        rho_key, w_key, v_key, beta_key, b_key, c_key, d_key = jax.random.split(key, 7)
        householder = parameterisation == "householder"
        rho_shape = (blocks,) if householder else (blocks, block_size)
        rho = jax.random.uniform(rho_key, rho_shape, dtype, r_min, r_max)
        self.rho_logit = jnp.log(rho) - jnp.log1p(-rho)
        scale = 1 / math.sqrt(d_model)
        if householder:
            shape = (reflections, d_model, blocks, block_size)
            self.W_A = scale * jax.random.normal(w_key, shape, dtype)
            self.A0 = jax.random.normal(v_key, (reflections, blocks, block_size), dtype)
            self.W_beta = scale * jax.random.normal(beta_key, shape[:-1], dtype)
            self.beta0 = jnp.zeros((reflections, blocks), dtype)
        else:  # near the identity, with input-dependent entries of either sign
            shape = (d_model, blocks, block_size, block_size)
            self.W_A = 0.5 * scale * jax.random.normal(w_key, shape, dtype)
            self.A0 = jnp.broadcast_to(jnp.eye(block_size, dtype=dtype), shape[1:])
            self.W_beta = self.beta0 = None
        self.B = jax.random.normal(b_key, (d_state, d_model), dtype) * scale
        self.C = jax.random.normal(c_key, (d_model, d_state), dtype) / math.sqrt(d_state)
        self.D = jax.random.normal(d_key, (d_model,), dtype)
        self.block_size = block_size
        self.parameterisation = parameterisation
        self.method = scan_method(method)
        self.precision = check_precision(precision)

    @property
    def d_model(self) -> int:
        return self.D.shape[0]

    @property
    def d_state(self) -> int:
        return self.B.shape[0]

    @property
    def blocks(self) -> int:
        return self.d_state // self.block_size

    @property
    def algebra(self) -> AbstractAlgebra:
        """`Block2x2()` for 2×2 blocks, `DenseAlgebra()` (per block) otherwise."""
        return Block2x2() if self.block_size == 2 else DenseAlgebra()

    def contraction(self) -> Float[Array, "blocks block_size"]:
        r"""$\rho$ per row of each block, in $(0, 1)$."""
        rho = jax.nn.sigmoid(self.rho_logit)
        if rho.ndim == 1:
            rho = jnp.broadcast_to(rho[:, None], (self.blocks, self.block_size))
        return rho

    def gamma(self) -> Float[Array, "blocks block_size"]:
        r"""The input normalisation $\gamma = \sqrt{1 - \rho^2}$ per row."""
        return jnp.sqrt(-jnp.expm1(2 * jnp.log(self.contraction())))

    def transitions(
        self, u: Float[ArrayLike, "*length d_model"]
    ) -> Float[Array, "*length blocks block_size block_size"]:
        r"""$A(u_t)$ block by block, for a sequence `(length, d_model)` or one position."""
        u = jnp.asarray(u)
        p = self.precision
        if self.parameterisation == "normalised":
            m = jnp.einsum("...h,hkij->...kij", u, self.W_A, precision=p) + self.A0
            norm = jnp.maximum(jnp.sum(jnp.abs(m), axis=-1, keepdims=True), 1)
            return self.contraction()[..., None] * m / norm
        assert self.W_beta is not None and self.beta0 is not None
        v = jnp.einsum("...h,rhki->...rki", u, self.W_A, precision=p) + self.A0
        v = v / jnp.sqrt(jnp.sum(v * v, axis=-1, keepdims=True))
        beta = jnp.einsum("...h,rhk->...rk", u, self.W_beta, precision=p) + self.beta0
        beta = jax.nn.sigmoid(beta)
        eye = jnp.eye(self.block_size, dtype=v.dtype)
        a = jnp.broadcast_to(eye, (*u.shape[:-1], self.blocks, *eye.shape))
        for r in range(v.shape[-3]):  # later factors on the left
            vr = v[..., r, :, :]
            outer = vr[..., :, None] * vr[..., None, :]
            a = (eye - 2 * beta[..., r, :, None, None] * outer) @ a
        rho = jax.nn.sigmoid(self.rho_logit)
        return rho[:, None, None] * a

    def _drive(self, u: Array) -> Array:
        bu = jnp.matmul(u, self.B.T, precision=self.precision)
        return self.gamma() * bu.reshape(*u.shape[:-1], self.blocks, self.block_size)

    def init_state(self) -> Float[Array, "blocks block_size"]:
        """The zero state, `(blocks, block_size)`."""
        return jnp.zeros((self.blocks, self.block_size), self.B.dtype)

    def hidden_states(
        self,
        u: Float[ArrayLike, "length d_model"],
        *,
        initial_state: Float[ArrayLike, "..."] | None = None,
        reverse: bool = False,
    ) -> Float[Array, "length blocks block_size"]:
        """All states $x_0, \\dots, x_{L-1}$, `(length, blocks, block_size)`; for analysis."""
        return self._states(jnp.asarray(u), initial_state, reverse, None)

    def _check_state(self, state: Array) -> None:
        check_state(
            state, self.init_state(), f"BlockDiagonalLRU(block_size={self.block_size})",
            " The state is (d_state // block_size, block_size): one row per block.",
        )  # fmt: skip

    def _states(self, u, initial_state, reverse, segment_ids, dt=None) -> Array:
        del dt  # refused by `run` (no time steps)
        check_sequence(u, self.d_model, self.B.dtype)
        if initial_state is not None:
            initial_state = jnp.asarray(initial_state)
            self._check_state(initial_state)
        return recurrence(
            self.transitions(u), self._drive(u), algebra=self.algebra,
            initial_state=initial_state, reverse=reverse, method=self.method,
            segment_ids=segment_ids,
        )  # fmt: skip

    def _output(self, x: Array, u: Array) -> Array:
        flat = x.reshape(*x.shape[:-2], self.d_state)
        return jnp.matmul(flat, self.C.T, precision=self.precision) + self.D * u

    def _outputs(self, states, u, initial_state, reverse, segment_ids) -> Array:
        del initial_state, reverse, segment_ids
        return self._output(states, u)

    @checks_first()
    def run(
        self,
        u: Float[ArrayLike, "length d_model"],
        *,
        initial_state: Float[ArrayLike, "..."] | None = None,
        reverse: bool = False,
        length: Integer[ArrayLike, ""] | None = None,
        segment_ids: Integer[ArrayLike, " length"] | None = None,
        dt: ArrayLike | None = None,
    ) -> tuple[Float[Array, "length d_model"], PyTree[Array]]:
        """`(y, final_state)` over one sequence: see `eqx_lru.AbstractRecurrentCore.run`.
        `dt` is refused (`TypeError`): the core has no notion of elapsed time."""
        check_takes_dt(self, dt=dt)
        return super().run(
            u, initial_state=initial_state, reverse=reverse, length=length,
            segment_ids=segment_ids,
        )  # fmt: skip

    @checks_first(lambda layer, u, **options: check_not_complex(u))
    def __call__(
        self,
        u: Float[ArrayLike, "length d_model"],
        *,
        initial_state: Float[ArrayLike, "..."] | None = None,
        reverse: bool = False,
        length: Integer[ArrayLike, ""] | None = None,
        segment_ids: Integer[ArrayLike, " length"] | None = None,
        dt: ArrayLike | None = None,
        key: PRNGKeyArray | None = None,
    ) -> Float[Array, "length d_model"]:
        r"""Run over one sequence `(length, d_model)`: $y$, `(length, d_model)`.

        `initial_state` `(blocks, block_size)` (as `init_state()`), `reverse` (run from the
        last position: $x_t = A(u_t) x_{t+1} + \gamma B u_t$), `length` (as in `run`),
        `segment_ids` (packed
        sequences never exchange state), `dt` (refused: no time steps), `key` (ignored).
        """
        return super().__call__(
            u, initial_state=initial_state, reverse=reverse, length=length,
            segment_ids=segment_ids, dt=dt, key=key,
        )  # fmt: skip

    @checks_first()
    @jaxtyped(typechecker=beartype)
    def step(
        self,
        state: Float[ArrayLike, "blocks block_size"],
        u_t: Float[ArrayLike, " d_model"],
        *,
        dt: ArrayLike | None = None,
    ) -> tuple[Float[Array, "blocks block_size"], Float[Array, " d_model"]]:
        r"""One position: $x_t = A(u_t) x_{t-1} + \gamma B u_t$, `(x_t, y_t)`. Repeated
        from `init_state()` it equals the parallel call. `dt` is refused."""
        check_takes_dt(self, dt=dt)
        state, u_t = jnp.asarray(state), jnp.asarray(u_t)
        check_token(u_t, self.d_model, self.B.dtype)
        self._check_state(state)
        x = self.algebra.apply(self.transitions(u_t), state) + self._drive(u_t)
        return x, self._output(x, u_t)
