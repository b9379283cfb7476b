r"""A Pallas kernel for the diagonal linear recurrence, for NVIDIA GPUs (Pallas' Triton
lowering; the backend is `eqx_lru._scan._pallas_backend`, the scan method `eqx_lru._scan._pallas`).

Computes, over a leading length axis and independently for every channel,

$$h_k = a_k \odot h_{k-1} + x_k \quad\text{(real)}, \qquad
h_k = (a_k + i\,b_k)(h_{0,k-1} + i\,h_{1,k-1}) + (x_{0,k} + i\,x_{1,k}) \quad\text{(pairs)},$$

with $h_{-1}$ an initial state; from the end when `reverse`. The pair form is the
`RotationScaling` algebra on planar pairs `(..., 2, M)`, and the complex `Diagonal`
algebra stored as `ComplexPairs`.

**Design.** One program per (leading index, tile of `block` channels, segment of
`segment` steps); the batch of `jax.vmap` becomes one more grid axis (pallas_call's
batching rule). A program keeps its running state in registers (a loop carry) and walks
its segment in chunks of `chunk` steps; the loads of the next chunk are issued before the
steps of the current one run, so they are in flight while it computes. With one segment
the drive is read once and the states written once: one pass over memory per direction,
against the $O(\log L)$ passes of the associative scan. With $S > 1$ segments (a
two-level scan, for parallelism: a batch of 16 sequences of 256 complex channels is only
128 one-warp programs), a first kernel computes each segment's end state from zero and
the product of its transitions, a short scan over the $S$ segments gives each segment's
initial state, and the second kernel writes the states: the drive is read twice.

The backward pass (the custom VJP of `eqx_lru.linear_recurrence`) is this same kernel on
the reverse adjoint recurrence. For a transition shared by every step it also
accumulates the transition's cotangent $\sum_k \lambda_k \otimes h_{k-1}^\top$ in
registers while it runs (reading the forward states once), instead of a separate pass
over both sequence-long arrays after it (`AbstractScanMethod.adjoint_scan_shared`).
"""

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jaxtyping import Array

from ._pallas_backend import (
    compiler_params,
    masked_load,
    masked_store,
    pallas_backend_error,
    use_interpret,
)

# Steps per chunk and channels per program: chosen by compiling the kernel for sm_90
# (tests/lib/test_pallas.py::test_compiles_for_hopper; the registers and compile times are in
# experiments/bench/HOPPER.md). The time loop inside a chunk is unrolled and the next
# chunk's rows are held while it runs, so registers and compile time grow with `chunk`:
# 8 steps (16 rows in flight per program) compile quickly with no spills for every
# variant; 16 took several times longer for the fused backward. 32 channels: one warp,
# one channel per thread, the most programs.
DEFAULT_CHUNK = 8
DEFAULT_BLOCK = 32
# Steps per segment of the two-level scan: at L = 16384 eight segments, so batch 16 ×
# 256 complex channels give 1024 one-warp programs (about eight warps per SM of an H100)
# instead of 128. Shorter sequences run as one segment (one pass over memory).
DEFAULT_SEGMENT = 2048


def _mul(a: tuple, h: tuple) -> tuple:
    """`a ⊗ h` on the parts: real (one part) or a complex pair (two)."""
    if len(h) == 1:
        return (a[0] * h[0],)
    (a0, a1), (h0, h1) = a, h
    return (a0 * h0 - a1 * h1, a0 * h1 + a1 * h0)


def _step(a: tuple, h: tuple, x: tuple) -> tuple:
    return tuple(p + q for p, q in zip(_mul(a, h), x, strict=True))


def _gate(valid, new: tuple, old: tuple) -> tuple:
    """`new` where the traced bool `valid` holds, else `old`; `new` when `valid` is `None`."""
    if valid is None:
        return new
    return tuple(jnp.where(valid, n, o) for n, o in zip(new, old, strict=True))


class _Plan(NamedTuple):
    """The static layout of one kernel run on `x[L, K, P, M]`: the grid is (K, tiles of
    `block` of the M channels, `n_segments` segments of `segment` steps), each program
    walking its segment in chunks of `chunk` steps."""

    length: int  # L
    lead: int  # K
    parts: int  # P: 1 (real) or 2 (planar pairs)
    width: int  # M
    shared: bool  # one transition `a[K, P, M]` for every step
    reverse: bool
    chunk: int
    block: int
    segment: int
    n_segments: int
    interpret: bool


def _plan(shape, *, shared, reverse, chunk, block, segment, interpret) -> _Plan:
    """The `_Plan` of `x` of `shape` (L, K, P, M) for `PallasScan`'s settings: `block`
    clamped to a power of two at most ~M, `chunk` to L, `segment` rounded up to a multiple
    of `chunk` (`None` or ≥ L: one segment), `interpret` resolved (`None`: everywhere but
    on GPUs; compiling needs the Triton backend)."""
    length, lead, parts, width = shape
    block = min(block, 1 << (width - 1).bit_length())
    chunk = max(1, min(chunk, length))
    if segment is None or segment >= length:
        segment, n_segments = length, 1
    else:
        segment = -(-max(segment, chunk) // chunk) * chunk
        n_segments = -(-length // segment)
    interpret = use_interpret(interpret)
    if not interpret and (why := pallas_backend_error()) is not None:
        raise RuntimeError(f"PallasScan: {why}")
    return _Plan(
        length, lead, parts, width, shared, reverse, chunk, block, segment, n_segments, interpret
    )


def _kernel(*refs, mode: str, plan: _Plan):
    """One program: `block` channels (refs `(parts, block)`; length-long ones with a leading
    length axis) over one segment of the sequence, in processing order `q` (row `q`, or
    row `length - 1 - q` when `plan.reverse`).

    `mode`: `"states"` writes every state (refs a, x, h0 → out); `"sum"` also accumulates
    `Σ_q h_q ⊗ p_{q+1}ᵀ` over the part pairs, with `p` the rows of a further length-long
    input (refs a, x, h0, p → out, acc); `"ends"` writes only the segment's end state from
    zero and the product of its transitions (refs a, x → end, product). Only `mode`'s refs
    are bound, which the type checker cannot see: its possibly-unbound reports are silenced.
    """
    if mode == "ends":
        a_ref, x_ref, end_ref, prod_ref = refs
        parts, block = end_ref.shape
        compute = end_ref.dtype
    else:
        a_ref, x_ref, h0_ref, *rest = refs
        p_ref, o_ref, acc_ref = rest if mode == "sum" else (None, rest[0], None)
        parts, block = h0_ref.shape
        compute = h0_ref.dtype
    length, chunk, shared, interpret = plan.length, plan.chunk, plan.shared, plan.interpret
    mask = None
    if plan.width % block:  # the last tile is partial: mask its loads and stores
        lanes = pl.program_id(1) * block + jax.lax.broadcasted_iota(jnp.int32, (block,), 0)
        mask = lanes < plan.width

    def load(ref, *idx):
        """The parts of `ref[idx]` in the compute dtype."""
        values = [masked_load(ref, (*idx, p, slice(None)), mask, interpret) for p in range(parts)]
        return tuple(v.astype(compute) for v in values)

    def row(q):  # the memory row of processing position q (clamped into the sequence)
        q = jnp.minimum(q, length - 1)
        return length - 1 - q if plan.reverse else q

    def rows(q0, size):
        """The inputs of positions q0..q0+size-1, loaded (all in flight at once)."""
        xs = [load(x_ref, row(q0 + t)) for t in range(size)]
        as_ = None if shared else [load(a_ref, row(q0 + t)) for t in range(size)]
        ps = (
            [load(p_ref, row(q0 + t + 1)) for t in range(size)]  # pyright: ignore[reportPossiblyUnboundVariable]
            if mode == "sum"
            else None
        )
        return xs, as_, ps

    a_shared = load(a_ref) if shared else ()  # () when unused

    def run(q0, size, loaded, carry, valid=None):
        """The steps of positions q0..q0+size-1; `valid` (a traced bool) gates the tail."""
        xs, as_, ps = loaded
        h, acc, prod = carry
        for t in range(size):
            q = q0 + t
            a = a_shared if shared else as_[t]
            h = _gate(valid, _step(a, h, xs[t]), h)
            if mode == "ends":
                prod = _gate(valid, _mul(a, prod), prod)
                continue
            store_mask = mask
            if valid is not None:
                full = jnp.broadcast_to(valid, (block,))
                store_mask = full if mask is None else mask & full
            out_ref = o_ref  # pyright: ignore[reportPossiblyUnboundVariable]
            for p in range(parts):
                value = h[p].astype(out_ref.dtype)
                masked_store(out_ref, (row(q), p, slice(None)), value, store_mask, interpret)
            if mode == "sum":
                use = q + 1 < length  # the last position has no successor
                if valid is not None:
                    use = use & valid
                acc = tuple(
                    acc[i * parts + j] + jnp.where(use, h[i] * ps[t][j], zeros)
                    for i in range(parts)
                    for j in range(parts)
                )
        return h, acc, prod

    s = pl.program_id(2)
    start = s * plan.segment
    n_full = (jnp.minimum(plan.segment, length - start)) // chunk
    zeros = jnp.zeros((block,), compute)
    if mode == "ends":
        h = (zeros,) * parts
        prod = (zeros + 1,) + (zeros,) * (parts - 1)
    else:
        h = load(h0_ref)  # pyright: ignore[reportPossiblyUnboundVariable]
        prod = ()
    acc = (zeros,) * (parts * parts) if mode == "sum" else ()

    def body(i, state):
        carry, loaded = state
        # The next chunk's loads first (clamped into the sequence past the last chunk).
        ahead = rows(start + (i + 1) * chunk, chunk)
        return run(start + i * chunk, chunk, loaded, carry), ahead

    carry = (h, acc, prod)
    carry, _ = jax.lax.fori_loop(0, n_full, body, (carry, rows(start, chunk)))
    tail = length % chunk
    if tail:  # only the last segment has one; the others run it masked out
        last = None if plan.n_segments == 1 else s == plan.n_segments - 1
        carry = run(length - tail, tail, rows(length - tail, tail), carry, valid=last)
    h, acc, prod = carry

    def put(ref, values):
        for i, v in enumerate(values):
            masked_store(ref, (i, slice(None)), v.astype(ref.dtype), mask, interpret)

    if mode == "ends":
        put(end_ref, h)  # pyright: ignore[reportPossiblyUnboundVariable]
        put(prod_ref, prod)  # pyright: ignore[reportPossiblyUnboundVariable]
    elif mode == "sum":
        put(acc_ref, acc)  # pyright: ignore[reportPossiblyUnboundVariable]


def _pallas_call(mode: str, plan: _Plan, ins: tuple, out_shape, aliases: dict):
    """The kernel in `mode` (see `_kernel`) over `plan`'s grid."""
    length, parts, block = plan.length, plan.parts, plan.block
    long_spec = pl.BlockSpec((length, None, parts, block), lambda i, j, s: (0, i, 0, j))
    shared_spec = pl.BlockSpec((None, parts, block), lambda i, j, s: (i, 0, j))

    def per_segment(rows):
        return pl.BlockSpec((None, None, rows, block), lambda i, j, s: (i, s, 0, j))

    in_specs = [shared_spec if plan.shared else long_spec, long_spec]
    if mode != "ends":
        in_specs.append(per_segment(parts))
    if mode == "sum":
        in_specs.append(long_spec)
    out_specs = {
        "states": long_spec,
        "sum": [long_spec, per_segment(parts * parts)],
        "ends": [per_segment(parts), per_segment(parts)],
    }[mode]
    return pl.pallas_call(
        functools.partial(_kernel, mode=mode, plan=plan),
        out_shape=out_shape,
        grid=(plan.lead, pl.cdiv(plan.width, block), plan.n_segments),
        in_specs=in_specs,
        out_specs=out_specs,
        input_output_aliases=aliases,
        interpret=plan.interpret,
        compiler_params=None if plan.interpret else compiler_params(block),
        name=f"eqx_lru_scan_{mode}",
    )(*ins)


def _pallas_scan(a, x, h0, *, partner=None, **settings) -> tuple[Array, Array | None]:
    """The kernel on `x[L, K, P, M]` (P = 1 real part or 2 planar pair parts), transitions
    `a[K, P, M]` (shared) or `a[L, K, P, M]`, `h0[K, P, M]` in the compute dtype;
    `settings` are `_plan`'s keywords.

    Returns the states (shape and dtype of `x`) and, with `partner` (`[L, K, P, M]`),
    `Σ_q h_q ⊗ partner_{q+1}ᵀ` over processing positions, `[K, P, P, M]` in the compute
    dtype (`None` without)."""
    plan = _plan(x.shape, **settings)
    _, lead, parts, width = x.shape
    compute = h0.dtype
    state = jax.ShapeDtypeStruct((lead, plan.n_segments, parts, width), compute)
    if plan.n_segments == 1:
        inits = h0[:, None]
    else:
        # Level one: each segment's end state from zero and its transitions' product,
        # then each segment's initial state by a scan over the segments.
        ends, prods = _pallas_call("ends", plan, (a, x), [state, state], aliases={})

        def carry_over(h, end_prod):
            end, prod = end_prod
            parts_of = lambda v: tuple(v[:, p] for p in range(parts))  # noqa: E731
            nxt = _step(parts_of(prod), parts_of(h), parts_of(end))
            return jnp.stack(nxt, axis=1), h

        _, inits = jax.lax.scan(
            carry_over, h0, (jnp.moveaxis(ends, 1, 0), jnp.moveaxis(prods, 1, 0))
        )
        inits = jnp.moveaxis(inits, 0, 1)
    out = jax.ShapeDtypeStruct(x.shape, x.dtype)
    # States written over the drive, as the sequential method does: each row is read
    # before it is written, by the one program that owns its channels. XLA copies the
    # drive first where it is still needed.
    if partner is None:
        return _pallas_call("states", plan, (a, x, inits), out, aliases={1: 0}), None
    acc = jax.ShapeDtypeStruct((lead, plan.n_segments, parts * parts, width), compute)
    hs, sums = _pallas_call("sum", plan, (a, x, inits, partner), [out, acc], aliases={1: 0})
    return hs, jnp.sum(sums, axis=1).reshape(lead, parts, parts, width)


def _scan_as(
    state: tuple[int, int, int], a, x, h0, *, shared: bool, partner=None, **kw
) -> tuple[Array, Array | None]:
    """`_pallas_scan` with each step's state viewed as `state` = (K, P, M); the states
    have the shape of `x`."""
    length = x.shape[0]
    a = a.reshape(state if shared else (length,) + state)
    if partner is not None:
        partner = partner.reshape((length,) + state)
    hs, sums = _pallas_scan(
        a, x.reshape((length,) + state), h0.reshape(state), shared=shared, partner=partner, **kw
    )
    return hs.reshape(x.shape), sums
