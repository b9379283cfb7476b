r"""The generic linear-recurrence scan.

Computes, over the leading (length) axis,

$$h_k = a_k \otimes h_{k-1} + b_k, \qquad h_{-1} = h_\text{init} \ (\text{default } 0),$$

where $\otimes$ is the action of an *algebra* of transitions on states. The pairs
$(a, b)$ form a monoid under

$$(a_j, b_j) \bullet (a_i, b_i) = (a_j \circ a_i,\ a_j \otimes b_i + b_j)$$

("first $i$, then $j$"), which is what `jax.lax.associative_scan` needs. The composition
order matters for non-commuting algebras such as `Block2x2`.

**Backward pass.** Every method has the same hand-written VJP (`jax.custom_vjp`). With
cotangents $g_k$ of $h_k$, the cotangents $\lambda_k$ of the inputs $b_k$ obey the reverse
recurrence with the transposed transitions,

$$\lambda_k = g_k + a_{k+1}^\top \otimes \lambda_{k+1}, \qquad \lambda_{L} = 0,$$

and then $\bar b_k = \lambda_k$, $\bar a_k = \lambda_k \otimes h_{k-1}^\top$ (summed over $k$
for a shared $a$) and $\bar h_\text{init} = a_0^\top \otimes \lambda_0$. The backward is
therefore one more scan of the same kind, and needs only the states $h$ (which a layer
keeps anyway for its output projection), not the tree of intermediates that autodiff of
`lax.associative_scan` stores. "Transposed" follows JAX's convention for cotangents (the
linear transpose, no complex conjugation: `jax.grad` of a real loss with respect to a
complex input is the conjugate of the usual gradient), so for the complex `Diagonal`
algebra $a^\top = a$.

**Sequential method.** `jax.lax.fori_loop` over blocks of `SEQUENTIAL_UNROLL` steps that
reads a block of inputs and writes the block of states back *into the same buffer*, in
place: no second length-long array, and under `jax.vmap` the batch axis stays in front
(`lax.scan` would move it behind the length axis, which costs a transpose of the whole
input and of the whole output).
"""

import abc
from collections.abc import Callable
from typing import Literal, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
from beartype import beartype
from jaxtyping import Array, Inexact, jaxtyped

ScanMethod = Literal["auto", "associative", "sequential"]
_METHODS = ("auto", "associative", "sequential")

# Steps per iteration of the sequential loop (`experiments/bench/RESULTS.md`, "Sequential
# block size"). The loop is memory-bound, not overhead-bound: one step per iteration writes
# each state straight back; larger blocks stack their states first and were no faster
# (slower for the planar real form), and compile more slowly.
SEQUENTIAL_UNROLL = 1


class AbstractAlgebra(eqx.Module):
    """How transitions compose and act on states.

    A new algebra is one small subclass: the shape of a transition for a given state
    shape, how two transitions compose, and how a transition acts on a state. The methods
    the backward pass needs, `apply_transpose`, `transition_cotangent` and
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

    def transition_cotangent(self, g: Array, h: Array) -> Array:
        return g * h


class Block2x2(AbstractAlgebra):
    r"""General real 2×2 blocks: `a[..., 2, 2]` acts on `h[..., 2]` by matrix-vector product.

    $(a \otimes h)_i = \sum_j a_{ij} h_j$; composition is the matrix product
    `later @ earlier`, which does not commute in general. With the rotation-scaling
    blocks $|\lambda| R(\theta)$ this is the real Jordan form of a complex diagonal
    recurrence (paper §E.3).

    **Arguments:**

    - `planar`: where the pair axis is. `False` (default): last, `h[..., 2]` and
        `a[..., 2, 2]` as above. `True`: before a last axis of M pairs, `h[..., 2, M]` and
        `a[..., 2, 2, M]` — the same maths on the two contiguous halves `h[..., 0, :]`,
        `h[..., 1, :]`, which vectorise better than interleaved pairs (`RealLRU` computes
        in this layout).
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
            l00 * e00 + l01 * e10, l00 * e01 + l01 * e11, l10 * e00 + l11 * e10, l10 * e01 + l11 * e11
        )

    def apply(self, a: Array, h: Array) -> Array:
        a00, a01, a10, a11 = self._entries(a)
        h0, h1 = self._pair(h)
        return self._join(a00 * h0 + a01 * h1, a10 * h0 + a11 * h1)

    def apply_transpose(self, a: Array, g: Array) -> Array:
        a00, a01, a10, a11 = self._entries(a)
        g0, g1 = self._pair(g)
        return self._join(a00 * g0 + a10 * g1, a01 * g0 + a11 * g1)

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


# --- how states are stored between the forward and the backward pass ---------------------


class Storage(eqx.Module):
    """How the length-long arrays `b` and `h` are stored, versus the states the algebra
    computes with. Internal: the layers use it to keep complex states as real pairs (no
    conversion pass over the whole sequence) or low-precision states with a float32 carry.

    `load` and `store` are mutually inverse linear maps (up to rounding);
    `load_cotangent`/`store_cotangent` are their transposes (`store`'s and `load`'s). All act
    on arrays with a leading length (or block) axis.
    """

    def load(self, x: Array) -> Array:
        return x

    def store(self, h: Array) -> Array:
        return h

    def load_cotangent(self, g: Array) -> Array:
        return g

    def store_cotangent(self, ct: Array) -> Array:
        return ct


class ComplexPairs(Storage):
    """Complex states stored as real pairs: a stored array `(length, 2, *state_shape)` holds
    the real parts in `[:, 0]` and the imaginary parts in `[:, 1]` (planar, like
    `Block2x2(planar=True)` states)."""

    def load(self, x: Array) -> Array:
        return jax.lax.complex(x[:, 0], x[:, 1])

    def store(self, h: Array) -> Array:
        return jnp.stack([h.real, h.imag], axis=1)

    # JAX's transposes: of `complex(x, y)`, ct ↦ (Re ct, -Im ct); of `(Re h, Im h)`,
    # (g_re, g_im) ↦ g_re - i g_im.
    def load_cotangent(self, g: Array) -> Array:
        return jax.lax.complex(g[:, 0], -g[:, 1])

    def store_cotangent(self, ct: Array) -> Array:
        return jnp.stack([ct.real, -ct.imag], axis=1)


class Cast(Storage):
    """States computed (and carried from step to step) in `compute`, stored in `stored`,
    e.g. a float32 recurrence over bfloat16 inputs and outputs."""

    compute: str = eqx.field(static=True)
    stored: str = eqx.field(static=True)

    def load(self, x: Array) -> Array:
        return x.astype(self.compute)

    def store(self, h: Array) -> Array:
        return h.astype(self.stored)

    def load_cotangent(self, g: Array) -> Array:
        return g.astype(self.compute)

    def store_cotangent(self, ct: Array) -> Array:
        return ct.astype(self.stored)


# --- the scans ---------------------------------------------------------------------------


def default_method() -> Literal["associative", "sequential"]:
    """The scan method `"auto"` resolves to on the default backend.

    CPU: `"sequential"`, measured (`experiments/bench/RESULTS.md`). It is the fastest and
    lightest method at every size of the grid, forward and forward+backward: at batch 16,
    H = N = 256, L = 16384, forward+backward of `RealLRU` / `ComplexLRU` takes 0.17× / 0.21×
    the time of the paper's App. A and 0.29× its XLA temp memory, against 0.31× / 0.34× and
    0.58× / 0.71× with `"associative"` (same custom VJP). Accelerators: `"associative"`, the
    work-efficient parallel scan the paper trains with on A100s; not measured here.
    """
    return "sequential" if jax.default_backend() == "cpu" else "associative"


class _Config(NamedTuple):
    algebra: AbstractAlgebra
    storage: Storage
    method: str
    shared: bool
    reverse: bool
    unroll: int


def _sequential(
    step: Callable[[Array, Array, Array], Array],
    load: Callable[[Array], Array],
    store: Callable[[Array], Array],
    a: Array,
    xs: Array,
    h: Array,
    shared: bool,
    reverse: bool,
    unroll: int,
) -> tuple[Array, Array]:
    """`h ← step(a_k, h, load(xs[k]))` for every k (from the end if `reverse`), writing
    `store(h)` over `xs[k]` in place. Returns (all stored states, the last carry)."""
    dtype = xs.dtype
    if dtype.itemsize == 2 and jnp.issubdtype(dtype, jnp.floating):
        # Loop over the bit patterns of 16-bit floats: XLA on CPU upcasts a bfloat16
        # dynamic-update-slice to float32 over the whole buffer (a full copy per iteration).
        def load_bits(x, load=load):
            return load(jax.lax.bitcast_convert_type(x, dtype))

        def store_bits(h, store=store):
            return jax.lax.bitcast_convert_type(store(h), jnp.uint16)

        hs, h = _sequential(
            step, load_bits, store_bits, a, jax.lax.bitcast_convert_type(xs, jnp.uint16),
            h, shared, reverse, unroll,
        )
        return jax.lax.bitcast_convert_type(hs, dtype), h

    length = xs.shape[0]
    block = max(1, min(unroll, length))
    n_blocks, tail = divmod(length, block)
    # Forward: full blocks from 0, the tail at the end. Reverse: the tail at the start,
    # so that the full blocks are processed first.
    offset = tail if reverse else 0

    def run(h, buffer, start, size, a_block):
        x = load(jax.lax.dynamic_slice_in_dim(buffer, start, size, axis=0))
        out = [None] * size
        for t in reversed(range(size)) if reverse else range(size):
            h = step(a if shared else a_block[t], h, x[t])
            out[t] = h
        # The carry is the last state written, so the write depends on every read of
        # `buffer` in this block and XLA updates it in place.
        return h, jax.lax.dynamic_update_slice_in_dim(buffer, store(jnp.stack(out)), start, 0)

    def body(i, carry):
        h, buffer = carry
        start = offset + ((n_blocks - 1 - i) if reverse else i) * block
        a_block = None if shared else jax.lax.dynamic_slice_in_dim(a, start, block, axis=0)
        return run(h, buffer, start, block, a_block)

    if n_blocks:
        h, xs = jax.lax.fori_loop(0, n_blocks, body, (h, xs))
    if tail:
        start = 0 if reverse else n_blocks * block
        h, xs = run(h, xs, start, tail, None if shared else a[start : start + tail])
    return xs, h


def _associative_full(
    combine: Callable, a: Array, b: Array, shared: bool, reverse: bool
) -> Array:
    if shared:
        a = jnp.broadcast_to(a, (b.shape[0],) + a.shape)
    _, hs = jax.lax.associative_scan(combine, (a, b), reverse=reverse)
    return hs


def _first(x: Array, reverse: bool) -> Array:
    """The element processed first: x[0], or x[-1] when running from the end."""
    return x[-1] if reverse else x[0]


def _forward(a: Array, b: Array, h0: Array, cfg: _Config) -> Array:
    algebra, storage = cfg.algebra, cfg.storage
    if cfg.method == "sequential":

        def step(a_k, h, x):
            return algebra.apply(a_k, h) + x

        hs, _ = _sequential(
            step, storage.load, storage.store, a, b, h0, cfg.shared, cfg.reverse, cfg.unroll
        )
        return hs

    def combine(earlier, later):
        a_i, b_i = earlier
        a_j, b_j = later
        return algebra.compose(a_j, a_i), algebra.apply(a_j, b_i) + b_j

    x = storage.load(b)
    # Fold h_init into the first input: h_0 = a_0 ⊗ h_init + b_0.
    first = -1 if cfg.reverse else 0
    x = x.at[first].add(algebra.apply(a if cfg.shared else a[first], h0))
    return storage.store(_associative_full(combine, a, x, cfg.shared, cfg.reverse))


def _backward(a: Array, hs: Array, h0: Array, g: Array, cfg: _Config):
    """(ct_a, ct_b, ct_h0) for cotangents `g` of the stored states `hs`."""
    algebra, storage, shared, reverse = cfg.algebra, cfg.storage, cfg.shared, cfg.reverse
    if shared:
        a_next = a
    else:
        # Step k of the backward recurrence uses the transition of the step after k in the
        # forward order; past the last step the cotangent is zero, so any value will do.
        pad = jnp.zeros_like(a[:1])
        a_next = jnp.concatenate([pad, a[:-1]]) if reverse else jnp.concatenate([a[1:], pad])

    if cfg.method == "sequential":

        def step(a_k, lam, x):
            return algebra.apply_transpose(a_k, lam) + x

        lam_stored, lam_first = _sequential(
            step,
            storage.load_cotangent,
            storage.store_cotangent,
            a_next,
            g,
            jnp.zeros_like(h0),
            shared,
            not reverse,
            cfg.unroll,
        )
        lam = storage.load_cotangent(lam_stored)
    else:

        def combine(earlier, later):
            # Elements are the maps λ ↦ p^T λ + x; "earlier then later" is
            # λ ↦ (p_i ∘ p_j)^T λ + p_j^T x_i + x_j.
            p_i, x_i = earlier
            p_j, x_j = later
            return algebra.compose(p_i, p_j), algebra.apply_transpose(p_j, x_i) + x_j

        lam = _associative_full(combine, a_next, storage.load_cotangent(g), shared, not reverse)
        lam_stored = storage.store_cotangent(lam)
        lam_first = _first(lam, reverse)

    ct_h0 = algebra.apply_transpose(_first(a, reverse) if not shared else a, lam_first)
    # ā_k = λ_k ⊗ h_{k-1}ᵀ, with h_{k-1} the state before step k in the forward order.
    if shared:
        ct_a = _shifted_cotangent_sum(algebra, storage, lam_stored, hs, reverse)
        ct_a = ct_a + algebra.transition_cotangent(lam_first, h0)
    else:
        h = storage.load(hs)
        h_prev = (
            jnp.concatenate([h[1:], h0[None]]) if reverse else jnp.concatenate([h0[None], h[:-1]])
        )
        ct_a = jax.vmap(algebra.transition_cotangent)(lam, h_prev)
    return ct_a.astype(a.dtype), lam_stored, ct_h0.astype(h0.dtype)


# Steps per iteration of the loop that sums the transition's cotangent.
_REDUCE_BLOCK = 64


def _shifted_cotangent_sum(
    algebra: AbstractAlgebra, storage: Storage, lam_stored: Array, hs: Array, reverse: bool
) -> Array:
    """Σ_k λ_k ⊗ h_{k-1}ᵀ over the steps k ≥ 1 (forward order), from the stored arrays.

    A loop over blocks that reads both arrays in place: written as one sum over shifted
    slices, XLA on CPU materialises the two shifted copies (two more passes over the
    sequence) instead of fusing the slices into the reduction.
    """
    # Pairs (λ[j + dl], h[j + dh]) for j in [0, length - 1).
    dl, dh = (0, 1) if reverse else (1, 0)
    count = hs.shape[0] - 1

    def block_sum(start, size):
        lam = storage.load_cotangent(jax.lax.dynamic_slice_in_dim(lam_stored, start + dl, size, 0))
        h = storage.load(jax.lax.dynamic_slice_in_dim(hs, start + dh, size, 0))
        return algebra.transition_cotangent_sum(lam, h)

    shape = jax.eval_shape(lambda: block_sum(0, 1))
    total = jnp.zeros(shape.shape, shape.dtype)
    block = max(1, min(_REDUCE_BLOCK, count))
    n_blocks, tail = divmod(count, block)
    if n_blocks:
        total = jax.lax.fori_loop(
            0, n_blocks, lambda i, total: total + block_sum(i * block, block), total
        )
    if tail:
        total = total + block_sum(n_blocks * block, tail)
    return total


def _recurrence_fwd(a, b, h0, cfg):
    hs = _forward(a, b, h0, cfg)
    return hs, (a, hs, h0)


def _recurrence_bwd(cfg, residuals, g):
    a, hs, h0 = residuals
    return _backward(a, hs, h0, g, cfg)


_recurrence = jax.custom_vjp(_forward, nondiff_argnums=(3,))
_recurrence.defvjp(_recurrence_fwd, _recurrence_bwd)


def recurrence(
    a: Array,
    b: Array,
    *,
    algebra: AbstractAlgebra,
    storage: Storage = Storage(),
    initial_state: Array | None = None,
    reverse: bool = False,
    method: str = "auto",
) -> Array:
    """`linear_recurrence` without argument checks, over stored states (see `Storage`).

    Internal entry point for the layers: `b` and the result are in the stored form,
    `a` and `initial_state` in the algebra's. Shapes are the caller's responsibility.
    """
    if method == "auto":
        method = default_method()
    # Storage maps act on arrays with a leading length (or block) axis.
    state = jax.eval_shape(storage.load, jax.ShapeDtypeStruct((1,) + b.shape[1:], b.dtype))
    state_shape = state.shape[1:]
    shared = a.ndim == len(algebra.transition_shape(state_shape))
    if initial_state is None:
        initial_state = jnp.zeros(state_shape, state.dtype)
    cfg = _Config(algebra, storage, method, shared, reverse, SEQUENTIAL_UNROLL)
    return _recurrence(a, b, initial_state, cfg)


@jaxtyped(typechecker=beartype)
def linear_recurrence(
    a: Inexact[Array, "..."],
    b: Inexact[Array, "length ..."],
    *,
    algebra: AbstractAlgebra,
    initial_state: Inexact[Array, "..."] | None = None,
    reverse: bool = False,
    method: ScanMethod = "auto",
) -> Inexact[Array, "length ..."]:
    r"""All states of the linear recurrence $h_k = a_k \otimes h_{k-1} + b_k$.

    **Arguments:**

    - `a`: the transitions. Either one transition shared by every step, of shape
        `algebra.transition_shape(b.shape[1:])`, or one per step, with an extra
        leading length axis. Never broadcast otherwise.
    - `b`: the inputs, shape `(length, *state_shape)`.
    - `algebra`: `Diagonal()` or `Block2x2()` (or any `AbstractAlgebra`).
    - `initial_state`: $h_{-1}$, shape `state_shape`; zeros if `None`.
    - `reverse`: run from the end: $h_k = a_k \otimes h_{k+1} + b_k$ with
        $h_\text{length} = $ `initial_state`.
    - `method`: `"sequential"` (an in-place `jax.lax.fori_loop`, `SEQUENTIAL_UNROLL` steps
        per iteration), `"associative"` (`jax.lax.associative_scan`, $O(\log L)$ depth), or
        `"auto"` (sequential on CPU, associative on accelerators; see `default_method`).
        All are exact. All share one custom VJP whose backward is the reverse recurrence
        with the transposed transitions, so reverse-mode memory is the states alone;
        forward-mode autodiff (`jax.jvp`) is not available through it.

    **Returns:**

    All states $h_0, \dots, h_{L-1}$, shape `b.shape`.
    """
    if method not in _METHODS:
        raise ValueError(f"`method` must be one of {_METHODS}, got {method!r}.")
    if b.ndim < 1 or b.shape[0] == 0:
        raise ValueError(
            f"`b` must have a non-empty leading length axis; got shape {b.shape}."
        )
    state_shape = b.shape[1:]
    algebra.check_state_shape(state_shape)
    transition = algebra.transition_shape(state_shape)
    if a.shape != transition and a.shape != (b.shape[0],) + transition:
        raise ValueError(
            f"`a` must have shape {transition} (one transition shared by all steps) or "
            f"{(b.shape[0],) + transition} (one per step) for `b` of shape {b.shape} "
            f"under {type(algebra).__name__}; got {a.shape}."
        )
    if a.dtype != b.dtype:
        raise ValueError(
            f"`a` and `b` must have the same dtype; got a: {a.dtype}, b: {b.dtype}. "
            "Cast one of them explicitly."
        )
    if initial_state is not None:
        if initial_state.shape != state_shape:
            raise ValueError(
                f"`initial_state` must have the state shape {state_shape} (= b.shape[1:]); "
                f"got {initial_state.shape}."
            )
        if initial_state.dtype != b.dtype:
            raise ValueError(
                f"`initial_state` must have dtype {b.dtype} like `b`; got "
                f"{initial_state.dtype}."
            )
    return recurrence(
        a, b, algebra=algebra, initial_state=initial_state, reverse=reverse, method=method
    )
