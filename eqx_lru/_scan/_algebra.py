r"""Algebras of transitions: how transitions compose and act on states.

The scan (`eqx_lru.linear_recurrence`) computes $h_k = a_k \otimes h_{k-1} + b_k$ for any
algebra: `Diagonal` (elementwise, real or complex), `RotationScaling` (real 2×2 blocks
$\begin{pmatrix}a & -b\\ b & a\end{pmatrix}$ stored as $(a, b)$, isomorphic to $\mathbb C$),
`Block2x2` (general real 2×2 blocks) and `DenseAlgebra` (dense $N \times N$ matrices).
"""

import abc

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array


class AbstractAlgebra(eqx.Module):
    """How transitions compose and act on states.

    A new algebra is one small subclass: the shape of a transition for a given state
    shape, how two transitions compose, and how a transition acts on a state. The methods
    the backward pass needs, `apply_transpose`, `transposed`, `transition_cotangent` and
    `transition_cotangent_sum`, have generic defaults derived from `apply` by autodiff;
    override them with closed forms for speed. An algebra describes the arithmetic only:
    it holds no arrays (it is a static, hashable argument of the custom VJP).
    """

    @abc.abstractmethod
    def transition_shape(self, state_shape: tuple[int, ...]) -> tuple[int, ...]:
        """Shape of one transition acting on one state of shape `state_shape`."""

    @abc.abstractmethod
    def compose(self, later: Array, earlier: Array) -> Array:
        """The transition `later ∘ earlier` (apply `earlier` first)."""

    @abc.abstractmethod
    def apply(self, a: Array, h: Array) -> Array:
        """The state `a ⊗ h`."""

    def apply_transpose(self, a: Array, g: Array) -> Array:
        r"""$a^\top \otimes g$: the cotangent of $h$ in $a \otimes h$, given the cotangent
        $g$ of the result (the linear transpose of $h \mapsto a \otimes h$, JAX's convention:
        no complex conjugation)."""
        _, transpose = jax.vjp(lambda h: self.apply(a, h), g)
        return transpose(g)[0]

    def transposed(self, a: Array) -> tuple["AbstractAlgebra", Array]:
        r"""`(algebra_T, a_T)` with `algebra_T.apply(a_T, g) == self.apply_transpose(a, g)`
        (and compositions transposed accordingly): the transitions of the adjoint recurrence
        that the backward pass scans. The default wraps this algebra; closed algebras
        (`Diagonal`, `RotationScaling`, …) return themselves, so a scan method only ever
        sees the algebras it knows."""
        return _Transposed(self), a

    def transition_cotangent(self, g: Array, h: Array) -> Array:
        r"""$g \otimes h^\top$: the cotangent of $a$ in $a \otimes h$, given the cotangent $g$
        of the result (JAX's convention: no complex conjugation). One state, no length axis."""
        a = jnp.zeros(self.transition_shape(h.shape), h.dtype)
        _, transpose = jax.vjp(lambda a: self.apply(a, h), a)
        return transpose(g)[0]

    def transition_cotangent_sum(self, g: Array, h: Array) -> Array:
        """`transition_cotangent(g_k, h_k)` summed over the leading axis of `g` and `h`: the
        cotangent of a transition shared by every step. Override when a layout-aware sum is
        faster."""
        return jnp.sum(jax.vmap(self.transition_cotangent)(g, h), axis=0)

    def check_state_shape(self, state_shape: tuple[int, ...]) -> None:
        """Raise a `ValueError` if states of this shape are not valid for the algebra."""


class _Transposed(AbstractAlgebra):
    r"""The transposes of `base`'s transitions, stored as `base`'s own arrays:
    $p^\top \otimes g$ and $p_\text{later}^\top p_\text{earlier}^\top =
    (p_\text{earlier} p_\text{later})^\top$."""

    base: AbstractAlgebra

    def transition_shape(self, state_shape: tuple[int, ...]) -> tuple[int, ...]:
        return self.base.transition_shape(state_shape)

    def compose(self, later: Array, earlier: Array) -> Array:
        return self.base.compose(earlier, later)

    def apply(self, a: Array, h: Array) -> Array:
        return self.base.apply_transpose(a, h)

    def apply_transpose(self, a: Array, g: Array) -> Array:
        return self.base.apply(a, g)

    def transposed(self, a: Array) -> tuple[AbstractAlgebra, Array]:
        return self.base, a

    def check_state_shape(self, state_shape: tuple[int, ...]) -> None:
        self.base.check_state_shape(state_shape)


class Diagonal(AbstractAlgebra):
    r"""Elementwise transitions: $a \otimes h = a \odot h$, with `a.shape == h.shape`.

    Works for real and complex dtypes (complex diagonal LRU, paper §3.2).
    """

    def transition_shape(self, state_shape: tuple[int, ...]) -> tuple[int, ...]:
        return state_shape

    def compose(self, later: Array, earlier: Array) -> Array:
        return later * earlier

    def apply(self, a: Array, h: Array) -> Array:
        return a * h

    def apply_transpose(self, a: Array, g: Array) -> Array:
        return a * g

    def transposed(self, a: Array) -> tuple[AbstractAlgebra, Array]:
        return self, a

    def transition_cotangent(self, g: Array, h: Array) -> Array:
        return g * h


class RotationScaling(AbstractAlgebra):
    r"""Real 2×2 rotation-scaling blocks $\begin{pmatrix}a & -b\\ b & a\end{pmatrix}$
    stored as their two numbers $(a, b)$, in planar layout.

    States `h[..., 2, M]` hold M pairs $(h_0, h_1)$ as two contiguous halves `h[..., 0, :]`,
    `h[..., 1, :]`; transitions `a[..., 2, M]` hold $(a, b)$ the same way. The block acts as
    multiplication by $a + ib$ on $h_0 + i h_1$:
    $a \otimes h = (a h_0 - b h_1,\ b h_0 + a h_1)$. These blocks are closed under products
    and commute (the subalgebra of 2×2 blocks isomorphic to $\mathbb C$), so composition,
    the transpose $(a, -b)$ and the cotangents all cost two numbers per transition, like a
    complex number, where `Block2x2` carries four. With $a + ib = \lambda$ this is the real
    Jordan form of the complex diagonal LRU (paper §E.3), the algebra `RealLRU` scans with.
    """

    def transition_shape(self, state_shape: tuple[int, ...]) -> tuple[int, ...]:
        return state_shape

    def compose(self, later: Array, earlier: Array) -> Array:
        (l0, l1), (e0, e1) = _halves(later), _halves(earlier)
        return _planar(l0 * e0 - l1 * e1, l0 * e1 + l1 * e0)

    def apply(self, a: Array, h: Array) -> Array:
        return self.compose(a, h)

    def apply_transpose(self, a: Array, g: Array) -> Array:
        (a0, a1), (g0, g1) = _halves(a), _halves(g)
        return _planar(a0 * g0 + a1 * g1, a0 * g1 - a1 * g0)

    def transposed(self, a: Array) -> tuple[AbstractAlgebra, Array]:
        a0, a1 = _halves(a)
        return self, _planar(a0, -a1)

    def transition_cotangent(self, g: Array, h: Array) -> Array:
        # The cotangent of (a, b) in (a h0 - b h1, b h0 + a h1), given (g0, g1).
        (g0, g1), (h0, h1) = _halves(g), _halves(h)
        return _planar(g0 * h0 + g1 * h1, g1 * h0 - g0 * h1)

    def transition_cotangent_sum(self, g: Array, h: Array) -> Array:
        # One reduction of the stacked products: XLA fuses it with the products and the
        # loads; two separate sums (or a reversed copy of `h`) made XLA on CPU keep a block
        # of the inputs in a buffer for the second one.
        return jnp.sum(self.transition_cotangent(g, h), axis=0)

    def check_state_shape(self, state_shape: tuple[int, ...]) -> None:
        if len(state_shape) < 2 or state_shape[-2] != 2:
            raise ValueError(
                "RotationScaling states must end in axes (2, M) (the planar pairs "
                "(h_0, h_1) the blocks act on), so `b` must have shape (length, ..., 2, M); "
                f"got a state shape {state_shape}."
            )


def _halves(x: Array) -> tuple[Array, Array]:
    return x[..., 0, :], x[..., 1, :]


def _planar(x0: Array, x1: Array) -> Array:
    return jnp.stack([x0, x1], axis=-2)


class Block2x2(AbstractAlgebra):
    r"""General real 2×2 blocks: `a[..., 2, 2]` acts on `h[..., 2]` by matrix-vector product.

    $(a \otimes h)_i = \sum_j a_{ij} h_j$; composition is the matrix product
    `later @ earlier`, which does not commute in general. For the rotation-scaling blocks
    $|\lambda| R(\theta)$ of the LRU use `RotationScaling`, which stores two numbers per
    block instead of four.

    **Arguments:**

    - `planar`: where the pair axis is. `False` (default): last, `h[..., 2]` and
        `a[..., 2, 2]` as above. `True`: before a last axis of M pairs, `h[..., 2, M]` and
        `a[..., 2, 2, M]` — the same maths on the two contiguous halves `h[..., 0, :]`,
        `h[..., 1, :]`, which vectorise better than interleaved pairs.
    """

    planar: bool = eqx.field(default=False, static=True)

    def _pair(self, h: Array) -> tuple[Array, Array]:
        return (h[..., 0, :], h[..., 1, :]) if self.planar else (h[..., 0], h[..., 1])

    def _join(self, h0: Array, h1: Array) -> Array:
        return jnp.stack([h0, h1], axis=-2 if self.planar else -1)

    def _entries(self, a: Array) -> tuple[Array, Array, Array, Array]:
        if self.planar:
            return a[..., 0, 0, :], a[..., 0, 1, :], a[..., 1, 0, :], a[..., 1, 1, :]
        return a[..., 0, 0], a[..., 0, 1], a[..., 1, 0], a[..., 1, 1]

    def _block(self, a00: Array, a01: Array, a10: Array, a11: Array) -> Array:
        rows = self._join(a00, a01), self._join(a10, a11)
        return jnp.stack(rows, axis=-3) if self.planar else jnp.stack(rows, axis=-2)

    def transition_shape(self, state_shape: tuple[int, ...]) -> tuple[int, ...]:
        if self.planar:
            return state_shape[:-1] + (2,) + state_shape[-1:]
        return state_shape + (2,)

    def compose(self, later: Array, earlier: Array) -> Array:
        # Written out rather than as a batched matmul: four multiply-adds per entry
        # vectorise well on every backend and never dispatch a tiny matmul.
        l00, l01, l10, l11 = self._entries(later)
        e00, e01, e10, e11 = self._entries(earlier)
        return self._block(
            l00 * e00 + l01 * e10,
            l00 * e01 + l01 * e11,
            l10 * e00 + l11 * e10,
            l10 * e01 + l11 * e11,
        )

    def apply(self, a: Array, h: Array) -> Array:
        a00, a01, a10, a11 = self._entries(a)
        h0, h1 = self._pair(h)
        return self._join(a00 * h0 + a01 * h1, a10 * h0 + a11 * h1)

    def apply_transpose(self, a: Array, g: Array) -> Array:
        a00, a01, a10, a11 = self._entries(a)
        g0, g1 = self._pair(g)
        return self._join(a00 * g0 + a10 * g1, a01 * g0 + a11 * g1)

    def transposed(self, a: Array) -> tuple[AbstractAlgebra, Array]:
        a00, a01, a10, a11 = self._entries(a)
        return self, self._block(a00, a10, a01, a11)

    def transition_cotangent(self, g: Array, h: Array) -> Array:
        (g0, g1), (h0, h1) = self._pair(g), self._pair(h)
        return self._block(g0 * h0, g0 * h1, g1 * h0, g1 * h1)

    def transition_cotangent_sum(self, g: Array, h: Array) -> Array:
        # Two sums of contiguous products, (g0 h0, g1 h1) and (g0 h1, g1 h0), rather than
        # sums of the four products, which XLA on CPU vectorises 3x worse.
        swapped_h = h[..., ::-1, :] if self.planar else h[..., ::-1]
        same = jnp.sum(g * h, axis=0)
        swapped = jnp.sum(g * swapped_h, axis=0)
        (s00, s11), (s01, s10) = self._pair(same), self._pair(swapped)
        return self._block(s00, s01, s10, s11)

    def check_state_shape(self, state_shape: tuple[int, ...]) -> None:
        if self.planar and (len(state_shape) < 2 or state_shape[-2] != 2):
            raise ValueError(
                "Block2x2(planar=True) states must end in axes (2, M) (the pairs (h_0, h_1) "
                "the 2x2 blocks act on), so `b` must have shape (length, ..., 2, M); got a "
                f"state shape {state_shape}."
            )
        if not self.planar and (len(state_shape) == 0 or state_shape[-1] != 2):
            raise ValueError(
                "Block2x2 states must end in an axis of size 2 (the pair (h_0, h_1) a 2x2 "
                f"block acts on), so `b` must have shape (length, ..., 2); got a state shape "
                f"{state_shape}."
            )


class DenseAlgebra(AbstractAlgebra):
    r"""Dense transitions: `a[..., N, N]` acts on `h[..., N]` by $a \otimes h = a h$.

    Composition is the matrix product `later @ earlier`. With `method="associative"` every
    combine costs $O(N^3)$, which is why a dense linear RNN is slow to parallelise and the
    paper diagonalises it (§3.2.2); `LinearDenseRNN` therefore defaults to the sequential scan.

    The products are written as broadcast multiplies and sums, not `dot_general`: small
    batched float64 matmuls inside `lax.associative_scan` made XLA abort while compiling
    on CUDA (JAX 0.11.2, H100), and elementwise arithmetic is exact in the dtype on every
    backend, where a float32 matmul runs as TF32 on NVIDIA GPUs by default. XLA fuses each
    sum with its products (no $N^3$ buffer).
    """

    def transition_shape(self, state_shape: tuple[int, ...]) -> tuple[int, ...]:
        return state_shape + state_shape[-1:]

    def compose(self, later: Array, earlier: Array) -> Array:
        # (later @ earlier)_ij = Σ_k later_ik earlier_kj
        return jnp.sum(later[..., :, :, None] * earlier[..., None, :, :], axis=-2)

    def apply(self, a: Array, h: Array) -> Array:
        return jnp.sum(a * h[..., None, :], axis=-1)

    def apply_transpose(self, a: Array, g: Array) -> Array:
        return jnp.sum(a * g[..., :, None], axis=-2)

    def transposed(self, a: Array) -> tuple[AbstractAlgebra, Array]:
        return self, jnp.swapaxes(a, -1, -2)

    def transition_cotangent(self, g: Array, h: Array) -> Array:
        return g[..., :, None] * h[..., None, :]

    def check_state_shape(self, state_shape: tuple[int, ...]) -> None:
        if len(state_shape) == 0:
            raise ValueError(
                "DenseAlgebra states need a trailing state axis for the N x N transition to "
                "act on, so `b` must have shape (length, ..., N); got a scalar state."
            )
