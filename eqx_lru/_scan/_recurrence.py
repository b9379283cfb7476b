r"""The generic linear-recurrence scan and its custom VJP.

Computes, over the leading (length) axis,

$$h_k = a_k \otimes h_{k-1} + b_k, \qquad h_{-1} = h_\text{init} \ (\text{default } 0),$$

where $\otimes$ is the action of an *algebra* of transitions on states (`_algebra.py`),
with a *scan method* (`_methods.py`) and a *storage* of the length-long arrays
(`_storage.py`). The pairs $(a, b)$ form a monoid under

$$(a_j, b_j) \bullet (a_i, b_i) = (a_j \circ a_i,\ a_j \otimes b_i + b_j)$$

("first $i$, then $j$"), which is what `jax.lax.associative_scan` needs. The composition
order matters for non-commuting algebras such as `Block2x2`.

**Backward pass.** Every method has the same hand-written VJP (`jax.custom_vjp`). With
cotangents $g_k$ of $h_k$, the cotangents $\lambda_k$ of the inputs $b_k$ obey the reverse
recurrence with the transposed transitions,

$$\lambda_k = g_k + a_{k+1}^\top \otimes \lambda_{k+1}, \qquad \lambda_{L} = 0,$$

and then $\bar b_k = \lambda_k$, $\bar a_k = \lambda_k \otimes h_{k-1}^\top$ (summed over $k$
for a shared $a$) and $\bar h_\text{init} = a_0^\top \otimes \lambda_0$. The backward is
therefore the *same method* on the adjoint recurrence — transitions from
`algebra.transposed`, cotangents stored by `storage.cotangent()`, run from the other end —
and needs only the states $h$ (which a layer keeps anyway for its output projection), not
the tree of intermediates that autodiff of `lax.associative_scan` stores. "Transposed"
follows JAX's convention for cotangents (the linear transpose, no complex conjugation:
`jax.grad` of a real loss with respect to a complex input is the conjugate of the usual
gradient), so for the complex `Diagonal` algebra $a^\top = a$.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
from beartype import beartype
from jaxtyping import Array, Inexact, Integer, jaxtyped

from ._algebra import AbstractAlgebra as AbstractAlgebra
from ._algebra import Block2x2 as Block2x2
from ._algebra import Diagonal as Diagonal
from ._algebra import RotationScaling as RotationScaling
from ._methods import (
    AbstractScanMethod,
    Auto,
    Sequential,
    as_local,
    holds_start,
    preceding,
    scan_method,
)
from ._storage import AbstractStorage, Identity
from ._varying import vary_like

# What `method=` accepts: an `AbstractScanMethod` or a string shortcut (see `scan_method`).
ScanMethod = str | AbstractScanMethod


def default_method() -> AbstractScanMethod:
    """The concrete method `"auto"` (`eqx_lru.Auto()`) resolves to on the default backend:
    `Sequential()` on CPU, `Associative()` on GPUs and TPUs (measurements in `Auto`)."""
    return Auto().resolve()


class _Config(NamedTuple):
    algebra: AbstractAlgebra
    storage: AbstractStorage
    method: AbstractScanMethod
    shared: bool
    reverse: bool


def _first(x: Array, reverse: bool) -> Array:
    """The element processed first: x[0], or x[-1] when running from the end."""
    return x[-1] if reverse else x[0]


def _forward(a: Array, b: Array, h0: Array, cfg: _Config) -> Array:
    return cfg.method.scan(
        cfg.algebra, cfg.storage, a, b, h0, shared=cfg.shared, reverse=cfg.reverse
    )


def _backward(a: Array, hs: Array, h0: Array, g: Array, cfg: _Config):
    """(ct_a, ct_b, ct_h0) for cotangents `g` of the stored states `hs`.

    Over one chunk of a sequence split across devices (`SequenceParallel`), the one-step
    shifts read the neighbouring chunk's boundary element (`_methods.preceding`), the
    cotangent of `h0` is the first chunk's, and a shared transition's cotangent is this
    chunk's contribution (JAX sums the contributions of a replicated input)."""
    algebra, storage, shared, reverse = cfg.algebra, cfg.storage, cfg.shared, cfg.reverse
    method = cfg.method
    if shared:
        a_next = a
    else:
        # Step k of the backward recurrence uses the transition of the step after k in the
        # forward order; past the last step the cotangent is zero, so any value will do.
        a_next = shift(method, a, jnp.zeros_like(a[0]), reverse=not reverse)
    algebra_t, a_t = algebra.transposed(a_next)
    cotangents = storage.cotangent()
    # A method may sum a shared transition's cotangent inside its adjoint scan (one pass).
    fused = None
    if shared:
        fused = method.adjoint_scan_shared(
            algebra, storage, algebra_t, a_t, g, hs, reverse=not reverse
        )
    if fused is None:
        lam_stored = method.scan(
            algebra_t, cotangents, a_t, g, jnp.zeros_like(h0), shared=shared, reverse=not reverse
        )
        ct_fused = None
    else:
        lam_stored, ct_fused = fused
    first = slice(-1, None) if reverse else slice(0, 1)
    lam_first = cotangents.load(lam_stored[first])[0]
    ct_h0 = algebra.apply_transpose(_first(a, reverse) if not shared else a, lam_first)
    starts = holds_start(method, reverse=reverse)
    if starts is not True:  # a chunk of a sequence split across devices
        ct_h0 = jnp.where(starts, ct_h0, jnp.zeros_like(ct_h0))
    # ā_k = λ_k ⊗ h_{k-1}ᵀ, with h_{k-1} the state before step k in the forward order.
    if shared:
        if ct_fused is None:
            ct_a = _shifted_cotangent_sum(algebra, storage, lam_stored, hs, reverse)
        else:
            ct_a = ct_fused
        last = slice(0, 1) if reverse else slice(-1, None)
        h_before = preceding(method, storage.load(hs[last])[0], h0, reverse=reverse)
        ct_a = ct_a + algebra.transition_cotangent(lam_first, h_before)
    else:
        lam, h = cotangents.load(lam_stored), storage.load(hs)
        h_prev = shift(method, h, h0, reverse=reverse)
        ct_a = jax.vmap(algebra.transition_cotangent)(lam, h_prev)
    return ct_a.astype(a.dtype), lam_stored, ct_h0.astype(h0.dtype)


def shift(method: AbstractScanMethod, x: Array, fill: Array, *, reverse: bool) -> Array:
    """`y[k] = x[k - 1]` (or `x[k + 1]` if `reverse`): at each step, the element processed
    just before it; at the chunk's first step the previous chunk's boundary element, or
    `fill` at the sequence's first step (see `AbstractChunkMethod.preceding`)."""
    if reverse:
        return jnp.concatenate([x[1:], preceding(method, x[0], fill, reverse=True)[None]])
    return jnp.concatenate([preceding(method, x[-1], fill, reverse=False)[None], x[:-1]])


# Steps per iteration of the loop that sums the transition's cotangent.
_REDUCE_BLOCK = 64


def _shifted_cotangent_sum(
    algebra: AbstractAlgebra, storage: AbstractStorage, lam_stored: Array, hs: Array, reverse: bool
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
        lam = storage.load_cotangent(_slice(lam_stored, start + dl, size))
        h = storage.load(_slice(hs, start + dh, size))
        return algebra.transition_cotangent_sum(lam, h)

    block = max(1, min(_REDUCE_BLOCK, count))
    n_blocks, tail = divmod(count, block)
    # From zeros of the arrays' per-device type (`zeros_like`: inside `shard_map` a loop
    # carry must keep its type), read by no one. Not from the first block's sum: computed
    # outside the loop, it let XLA on CPU postpone the loop, so the states and their
    # adjoint stayed live through the other direction's backward pass of a bidirectional
    # block (two more state-sized buffers).
    shape = jax.eval_shape(lambda: block_sum(0, 1))
    total = jnp.zeros_like(hs, shape=shape.shape, dtype=shape.dtype)
    if n_blocks:
        total = jax.lax.fori_loop(
            0, n_blocks, lambda i, total: total + block_sum(i * block, block), total
        )
    if tail:
        total = total + block_sum(n_blocks * block, tail)
    return total


def _slice(x: Array, start, size: int) -> Array:
    """`x[start:start + size]` for a traced `start`. A 16-bit float array is sliced as its
    bits: under `vmap` the slice is a gather, which XLA on the CPU cannot do in bfloat16,
    so it would first convert the whole sequence to float32 (a copy the size of two)."""
    if jnp.issubdtype(x.dtype, jnp.floating) and x.dtype.itemsize == 2:
        bits = jax.lax.bitcast_convert_type(x, jnp.uint16)
        bits = jax.lax.dynamic_slice_in_dim(bits, start, size, 0)
        return jax.lax.bitcast_convert_type(bits, x.dtype)
    return jax.lax.dynamic_slice_in_dim(x, start, size, 0)


def _recurrence_fwd(a, b, h0, cfg):
    hs = _forward(a, b, h0, cfg)
    return hs, (a, hs, h0)


def _recurrence_bwd(cfg, residuals, g):
    a, hs, h0 = residuals
    return _backward(a, hs, h0, g, cfg)


_recurrence = jax.custom_vjp(_forward, nondiff_argnums=(3,))
_recurrence.defvjp(_recurrence_fwd, _recurrence_bwd)


def segment_starts(
    segment_ids: Array, *, reverse: bool, method: AbstractScanMethod | None = None
) -> Array:
    """`True` at each position whose state must not depend on the position processed just
    before it: where the segment id differs from the previous one (forward) or the next
    one (reverse). The first position processed is never a start (the initial state enters
    the first segment). Over a chunk of a sequence split across devices (`method` a
    `SequenceParallel`), the chunk's first step compares with the neighbouring chunk's id."""
    ids = jnp.asarray(segment_ids)
    method = Auto() if method is None else method
    first = ids[-1] if reverse else ids[0]
    return ids != shift(method, ids, first, reverse=reverse)


def reset_transitions(
    a: Array,
    segment_ids: Array,
    *,
    shared: bool,
    reverse: bool,
    method: AbstractScanMethod | None = None,
) -> Array:
    r"""One transition per step, zero at segment starts: $h_k = 0 \otimes h_{k-1} + b_k$
    there, so no state crosses a segment boundary, for every algebra and method (and the
    custom VJP, whose adjoint recurrence then stops at the same boundaries)."""
    starts = segment_starts(segment_ids, reverse=reverse, method=method)
    length = starts.shape[0]
    if shared:
        a = jnp.broadcast_to(a, (length,) + a.shape)
    starts = starts.reshape((length,) + (1,) * (a.ndim - 1))
    return jnp.where(starts, jnp.zeros((), a.dtype), a)


# The default storage: one shared instance (a stateless module), as a default argument is.
_IDENTITY = Identity()


def recurrence(
    a: Array,
    b: Array,
    *,
    algebra: AbstractAlgebra,
    storage: AbstractStorage = _IDENTITY,
    initial_state: Array | None = None,
    reverse: bool = False,
    method: ScanMethod = "auto",
    segment_ids: Array | None = None,
) -> Array:
    """`linear_recurrence` without argument checks, over stored states (see `AbstractStorage`).

    Internal entry point for the layers: `b` and the result are in the stored form,
    `a` and `initial_state` in the algebra's. Shapes are the caller's responsibility.
    """
    method = scan_method(method)
    if isinstance(method, Auto) and not isinstance(b.shape[0], int):
        # A symbolic length (a program traced for `jax.export`): `lax.scan` is the one
        # method that takes it, so "auto" scans sequentially there on every backend.
        method = Sequential()
    method = method.resolve()
    # Storage maps act on arrays with a leading length (or block) axis.
    state = jax.eval_shape(storage.load, jax.ShapeDtypeStruct((1,) + b.shape[1:], b.dtype))
    state_shape = state.shape[1:]
    shared = a.ndim == len(algebra.transition_shape(state_shape))
    if segment_ids is not None:
        a = reset_transitions(a, segment_ids, shared=shared, reverse=reverse, method=method)
        shared = False
    if initial_state is None:
        initial_state = jnp.zeros(state_shape, state.dtype)
    a, b, initial_state = (as_local(method, x) for x in (a, b, initial_state))
    # Inside `jax.shard_map`: one type for the loop's carry (see `_varying`).
    a, b, initial_state = vary_like(a, b, initial_state)
    cfg = _Config(algebra, storage, method, shared, reverse)
    if forward_mode(a, b, initial_state):
        # `jax.jvp`, `jax.jacfwd`, `jax.hessian`: a custom VJP has no forward mode, and the
        # scan is plain JAX code (loops, `associative_scan`, collectives) that JAX
        # differentiates in either mode. Reverse mode keeps the custom VJP.
        return _forward(a, b, initial_state, cfg)
    return _recurrence(a, b, initial_state, cfg)


def forward_mode(*xs: Array) -> bool:
    """Whether any of `xs` is being differentiated in forward mode (`jax.jvp`, and so
    `jax.jacfwd` and `jax.hessian`): a JVP tracer, possibly under the tracers of `vmap` or
    of reverse mode (`jax.grad` linearises with its own tracers, which are not JVP ones).

    Seen through the tracers of the transformations applied *around* the call: a
    `jax.jvp` applied to an already traced program (a `jax.jit` or `jax.checkpoint` inside
    the differentiated function) meets the custom VJP, which JAX refuses."""
    for x in xs:
        while isinstance(x, jax.core.Tracer):  # pyright: ignore[reportAttributeAccessIssue]
            if type(x).__name__ == "JVPTracer":
                return True
            x = getattr(x, "primal", getattr(x, "val", None))
    return False


@jaxtyped(typechecker=beartype)
def linear_recurrence(
    a: Inexact[Array, "..."],
    b: Inexact[Array, "length ..."],
    *,
    algebra: AbstractAlgebra,
    initial_state: Inexact[Array, "..."] | None = None,
    reverse: bool = False,
    method: ScanMethod = "auto",
    segment_ids: Integer[Array, " length"] | None = None,
) -> Inexact[Array, "length ..."]:
    r"""All states of the linear recurrence $h_k = a_k \otimes h_{k-1} + b_k$.

    **Arguments:**

    - `a`: the transitions. Either one transition shared by every step, of shape
        `algebra.transition_shape(b.shape[1:])`, or one per step, with an extra
        leading length axis. Never broadcast otherwise.
    - `b`: the inputs, shape `(length, *state_shape)`.
    - `algebra`: `Diagonal()`, `RotationScaling()`, `Block2x2()` (or any
        `AbstractAlgebra`).
    - `initial_state`: $h_{-1}$, shape `state_shape`; zeros if `None`.
    - `reverse`: run from the end: $h_k = a_k \otimes h_{k+1} + b_k$ with
        $h_\text{length}$ = `initial_state`.
    - `method`: an `AbstractScanMethod` — `Sequential(unroll=1)` (an in-place
        `jax.lax.fori_loop`), `Associative()` (`jax.lax.associative_scan`, $O(\log L)$
        depth), `PallasScan()` (a GPU kernel), `Auto()` (sequential on CPU, associative on
        accelerators) — or the string shortcuts `"sequential"`, `"associative"`,
        `"pallas"`, `"auto"`. All are exact. All share one custom VJP
        whose backward is the same method on the reverse recurrence with the transposed
        transitions, so reverse-mode memory is the states alone. Forward mode (`jax.jvp`,
        `jax.jacfwd`, `jax.hessian`) differentiates the method's own code instead (every
        method but `PallasScan`), as long as the forward-mode transformation is applied
        around the call, not to a program traced already (`jax.jvp(jax.jit(f))`: apply
        `jit` outside, `jax.jit(jax.jvp(f, ...))`).
    - `segment_ids`: packed sequences: integers of shape `(length,)`, a new segment where
        the value changes. No state crosses a segment boundary (in either direction): the
        transition into each segment's first step is replaced by zero. `initial_state`
        enters the first segment processed.

    **Returns:**

    All states $h_0, \dots, h_{L-1}$, shape `b.shape`.
    """
    method = scan_method(method)
    if b.ndim < 1 or b.shape[0] == 0:
        raise ValueError(f"`b` must have a non-empty leading length axis; got shape {b.shape}.")
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
                f"`initial_state` must have dtype {b.dtype} like `b`; got {initial_state.dtype}."
            )
    if segment_ids is not None and segment_ids.shape != b.shape[:1]:
        raise ValueError(
            f"`segment_ids` must have shape ({b.shape[0]},), one integer per step of `b`; "
            f"got {segment_ids.shape}."
        )
    return recurrence(
        a,
        b,
        algebra=algebra,
        initial_state=initial_state,
        reverse=reverse,
        method=method,
        segment_ids=segment_ids,
    )
