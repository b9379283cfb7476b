r"""A Pallas kernel for the diagonal linear recurrence, for GPUs (Triton backend).

Computes, over a leading length axis and independently for every channel,

$$h_k = a_k \odot h_{k-1} + x_k \quad\text{(real)}, \qquad
h_k = (a_k + i\,b_k)(h_{0,k-1} + i\,h_{1,k-1}) + (x_{0,k} + i\,x_{1,k}) \quad\text{(pairs)},$$

with $h_{-1}$ an initial state; from the end when `reverse`. The pair form is the
`RotationScaling` algebra on planar pairs `(..., 2, M)`, and the complex `Diagonal`
algebra stored as `ComplexPairs`.

**Design.** One program per (leading index, tile of `block` channels); the batch of
`jax.vmap` becomes one more grid axis (pallas_call's batching rule). A program keeps its
running state in registers (a loop carry) and walks the sequence in chunks of `chunk`
steps: per chunk it issues the `chunk` row loads first (coalesced rows of `block`
contiguous channels, all in flight at once), then runs the steps and stores each state.
The drive is read once and the states written once: one pass over memory per direction,
against the $O(\log L)$ passes of the associative scan. The backward pass of the custom VJP
is this same kernel on the reverse adjoint recurrence.

On backends other than GPUs the kernel runs in Pallas interpret mode (slow; for tests).
The defaults `chunk`, `block` have not been tuned on a GPU yet. Pallas' Triton lowering
computes offsets in int32: one call's arrays (batch included) must hold fewer than 2**31
elements.
"""

import functools
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jaxtyping import Array

from ._algebra import Diagonal, RotationScaling
from ._methods import AbstractScanMethod
from ._storage import Cast, ComplexPairs, Storage

try:  # the Triton backend's parameters and masked memory ops (names vary across versions)
    from jax.experimental.pallas import triton as _pltriton
except ImportError:  # pragma: no cover
    _pltriton = None

# Channels per program and steps per chunk: a choice by reasoning, not yet measured on a
# GPU. 32 channels (one warp, one channel per thread) give the most programs: the layer at
# batch 16, N = 256 has 4096 complex channels, 128 one-warp programs for an H100's 132
# SMs, so about one warp per SM, and memory latency is hidden only by the loads each warp
# has in flight: `chunk` rows × 2 parts × 128 bytes, 16 KiB for 64 steps (about what one
# SM needs in flight to stream at its share of the bandwidth). 64 steps × 2 parts keep
# 128 values per thread in registers with a shared transition.
DEFAULT_CHUNK = 64
DEFAULT_BLOCK = 32


def _use_interpret(interpret: bool | None) -> bool:
    """`interpret`, or when `None`: interpret everywhere but on GPUs."""
    return jax.default_backend() != "gpu" if interpret is None else interpret


def _compiler_params(block: int) -> Any:
    """Triton parameters (one warp per 32 channels), which also select the Triton backend
    where Mosaic GPU is the default."""
    warps = max(1, min(8, block // 32))
    for name in ("CompilerParams", "TritonCompilerParams"):
        cls = getattr(_pltriton, name, None)
        if cls is not None:
            return cls(num_warps=warps, num_stages=1)
    return dict(triton=dict(num_warps=warps, num_stages=1))  # pragma: no cover


def _interpretable(idx: tuple, size: int) -> tuple:
    """`idx` for a masked load or store in interpret mode: every index an int32 scalar and
    the whole last axis an int32 `pl.ds`, since the interpreter's discharge of masked
    loads and stores (JAX 0.10) fails on Python ints and on mixed integer dtypes (int64
    loop indices under x64). The Triton lowering takes `idx` as it is."""

    def scalar(i):
        return jnp.int32(i) if isinstance(i, int) else jnp.asarray(i).astype(jnp.int32)

    *ints, _ = idx  # the last index is always the whole (channel) axis
    return (*map(scalar, ints), pl.ds(jnp.int32(0), size))


def _load(ref, idx: tuple, mask: Array | None, interpret: bool) -> Array:
    if mask is None:
        return ref[idx]
    idx = _interpretable(idx, mask.shape[0]) if interpret else idx
    if hasattr(_pltriton, "load"):
        return _pltriton.load(ref.at[idx], mask=mask, other=0)
    return pl.load(ref, idx, mask=mask, other=0)  # pragma: no cover  (older JAX)


def _store(ref, idx: tuple, value: Array, mask: Array | None, interpret: bool) -> None:
    if mask is None:
        ref[idx] = value
        return
    idx = _interpretable(idx, mask.shape[0]) if interpret else idx
    if hasattr(_pltriton, "store"):
        _pltriton.store(ref.at[idx], value, mask=mask)
    else:  # pragma: no cover  (older JAX)
        pl.store(ref, idx, value, mask=mask)


def _step(a: tuple, h: tuple, x: tuple) -> tuple:
    """One step on the parts of the state: real (one part) or a complex pair (two)."""
    if len(h) == 1:
        return (a[0] * h[0] + x[0],)
    (a0, a1), (h0, h1), (x0, x1) = a, h, x
    return (a0 * h0 - a1 * h1 + x0, a0 * h1 + a1 * h0 + x1)


def _kernel(a_ref, x_ref, h0_ref, o_ref, *, length, chunk, shared, reverse, width, interpret):
    """One program: `block` channels (refs `(parts, block)`, length-long ones with a
    leading length axis) over the whole sequence."""
    parts, block = h0_ref.shape
    compute = h0_ref.dtype
    mask = None
    if width % block:  # the last tile is partial: mask its loads and stores
        lanes = pl.program_id(1) * block + jax.lax.broadcasted_iota(jnp.int32, (block,), 0)
        mask = lanes < width

    def load(ref, *idx):
        return tuple(_load(ref, (*idx, p, slice(None)), mask, interpret) for p in range(parts))

    def row(ref, k):
        return tuple(part.astype(compute) for part in load(ref, k))

    a_shared = load(a_ref) if shared else None

    def run(start, size, h):
        # Rows start..start+size-1, walked backwards when `reverse`; all loads first.
        rows = [start + t for t in (reversed(range(size)) if reverse else range(size))]
        xs = [row(x_ref, k) for k in rows]
        as_ = [a_shared] * size if shared else [row(a_ref, k) for k in rows]
        for k, a, x in zip(rows, as_, xs, strict=True):
            h = _step(a, h, x)
            for p in range(parts):
                _store(o_ref, (k, p, slice(None)), h[p].astype(o_ref.dtype), mask, interpret)
        return h

    n_chunks, tail = divmod(length, chunk)
    # Forward: full chunks from 0, the tail at the end; reverse: the tail at the start.
    offset = tail if reverse else 0

    def body(i, h):
        c = n_chunks - 1 - i if reverse else i
        return run(offset + c * chunk, chunk, h)

    h = load(h0_ref)
    if n_chunks:
        h = jax.lax.fori_loop(0, n_chunks, body, h)
    if tail:
        run(0 if reverse else n_chunks * chunk, tail, h)


def _pallas_scan(a, x, h0, *, shared, reverse, chunk, block, interpret):
    """The kernel on `x[L, K, P, M]` (P = 1 real part or 2 planar pair parts), transitions
    `a[K, P, M]` (shared) or `a[L, K, P, M]`, `h0[K, P, M]` in the compute dtype."""
    length, lead, parts, width = x.shape
    block = min(block, 1 << (width - 1).bit_length())  # a power of two, at most ~width
    long_spec = pl.BlockSpec((length, None, parts, block), lambda i, j: (0, i, 0, j))
    state_spec = pl.BlockSpec((None, parts, block), lambda i, j: (i, 0, j))
    interpret = _use_interpret(interpret)
    kernel = functools.partial(
        _kernel, length=length, chunk=max(1, min(chunk, length)), shared=shared,
        reverse=reverse, width=width, interpret=interpret,
    )
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(lead, pl.cdiv(width, block)),
        in_specs=[state_spec if shared else long_spec, long_spec, state_spec],
        out_specs=long_spec,
        # States written over the drive, as the sequential method does: each row is read
        # before it is written, by the one program that owns its channels. XLA copies the
        # drive first where it is still needed.
        input_output_aliases={1: 0},
        interpret=interpret,
        compiler_params=None if interpret else _compiler_params(block),
        name="eqx_lru_scan",
    )(a, x, h0)


def _scan_as(state: tuple[int, int, int], a, x, h0, *, shared: bool, **kw) -> Array:
    """`_pallas_scan` with each step's state viewed as `state` = (K, P, M); the result
    has the shape of `x`."""
    length = x.shape[0]
    a = a.reshape(state if shared else (length,) + state)
    out = _pallas_scan(a, x.reshape((length,) + state), h0.reshape(state), shared=shared, **kw)
    return out.reshape(x.shape)


def _check(a, x, h0, *, pair: bool, chunk: int, block: int, name: str) -> tuple[bool, Array]:
    """Validate the plain-array arguments; return (shared, h0)."""
    if x.ndim < (3 if pair else 2) or x.shape[0] == 0:
        want = "(length, ..., 2, M)" if pair else "(length, ...)"
        raise ValueError(f"{name}: `x` must have shape {want} with length > 0; got {x.shape}.")
    if pair and x.shape[-2] != 2:
        raise ValueError(
            f"{name}: `x` must hold planar pairs, shape (length, ..., 2, M); got {x.shape}."
        )
    state = x.shape[1:]
    if a.shape not in (state, x.shape):
        raise ValueError(
            f"{name}: `a` must have shape {state} (shared by every step) or {x.shape} (one "
            f"per step) for `x` of shape {x.shape}; got {a.shape}."
        )
    if not (jnp.issubdtype(a.dtype, jnp.floating) and jnp.issubdtype(x.dtype, jnp.floating)):
        raise ValueError(f"{name}: `a` and `x` must be real floating; got {a.dtype}, {x.dtype}.")
    if h0 is None:
        h0 = jnp.zeros(state, a.dtype)
    elif h0.shape != state or h0.dtype != a.dtype:
        raise ValueError(
            f"{name}: `h0` must have shape {state} and the dtype of `a` ({a.dtype}); got "
            f"{h0.shape}, {h0.dtype}."
        )
    if not (isinstance(chunk, int) and chunk > 0):
        raise ValueError(f"{name}: `chunk` must be a positive int; got {chunk!r}.")
    if not (isinstance(block, int) and block > 0 and block & (block - 1) == 0):
        raise ValueError(f"{name}: `block` must be a power of two; got {block!r}.")
    return a.shape != x.shape, h0


def diagonal_scan(
    a: Array,
    x: Array,
    h0: Array | None = None,
    *,
    reverse: bool = False,
    chunk: int = DEFAULT_CHUNK,
    block: int = DEFAULT_BLOCK,
    interpret: bool | None = None,
) -> Array:
    r"""All states of $h_k = a_k \odot h_{k-1} + x_k$ (real), by the Pallas kernel.

    - `x`: the drive, `(length, ...)`, any real floating dtype (the stored dtype, e.g.
        bfloat16): the result has its shape and dtype.
    - `a`: the transitions, shape `x.shape[1:]` (one shared by every step) or `x.shape`.
        The state is carried in `a.dtype` (e.g. float32 over bfloat16 storage).
    - `h0`: $h_{-1}$ (`x.shape[1:]`, dtype of `a`); zeros if `None`.
    - `reverse`: run from the end, $h_k = a_k \odot h_{k+1} + x_k$.
    - `chunk`: steps per chunk; `block`: channels per program (a power of two).
    - `interpret`: Pallas interpret mode; `None`: everywhere but on GPUs.
    """
    shared, h0 = _check(a, x, h0, pair=False, chunk=chunk, block=block, name="diagonal_scan")
    return _scan_as(
        (1, 1, x[0].size), a, x, h0, shared=shared, reverse=reverse, chunk=chunk, block=block,
        interpret=interpret,
    )


def rotation_scan(
    a: Array,
    x: Array,
    h0: Array | None = None,
    *,
    reverse: bool = False,
    chunk: int = DEFAULT_CHUNK,
    block: int = DEFAULT_BLOCK,
    interpret: bool | None = None,
) -> Array:
    r"""All states of the rotation-scaling recurrence on planar pairs, by the Pallas kernel.

    With $h = (h_0, h_1)$ = `h[..., 0, :]`, `h[..., 1, :]` and the transition $(a, b)$ =
    `a[..., 0, :]`, `a[..., 1, :]`: $h_0 + i h_1 \leftarrow (a + ib)(h_0 + i h_1) +
    (x_0 + i x_1)$, i.e. multiplication by the block $\begin{pmatrix}a&-b\\b&a\end{pmatrix}$.
    `x` has shape `(length, ..., 2, M)`; the other arguments as in `diagonal_scan`.
    """
    shared, h0 = _check(a, x, h0, pair=True, chunk=chunk, block=block, name="rotation_scan")
    width = x.shape[-1]
    return _scan_as(
        (x[0].size // (2 * width), 2, width), a, x, h0, shared=shared, reverse=reverse,
        chunk=chunk, block=block, interpret=interpret,
    )


# --- the scan method ---------------------------------------------------------------------


def _pairs(z: Array, axis: int, conjugate: bool) -> Array:
    """Complex `z` as planar real pairs (Re z, ±Im z) along a new `axis`."""
    return jnp.stack([z.real, -z.imag if conjugate else z.imag], axis=axis)


class PallasScan(AbstractScanMethod):
    r"""The recurrence by a Pallas kernel (`eqx_lru._pallas`): one pass over memory per
    direction, the running state in registers, programs tiled over (batch × channels),
    the sequence walked in chunks of `chunk` steps.

    Supports `Diagonal` (real; complex, either as `ComplexPairs` planar pairs — the
    layout `ComplexLRU` uses — or as complex arrays, converted to pairs and back) and
    `RotationScaling` (`RealLRU`), with the plain `Storage` or `Cast` (e.g. bfloat16
    states and inputs with a float32 carry). The backward pass is the same kernel on the
    adjoint recurrence (the custom VJP of `eqx_lru.linear_recurrence`).

    Written for GPUs (Pallas' Triton backend). Elsewhere it runs in Pallas interpret mode:
    exact, and tested there against a loop, but slow — for tests, not for training. On a
    GPU it has been lowered (in tests, without a GPU) but not yet timed, so `"auto"` does
    not choose it.

    **Arguments:**

    - `chunk`: steps per chunk (row loads each program has in flight). Untuned.
    - `block`: channels per program, a power of two (one warp per 32). Untuned.
    - `interpret`: force Pallas interpret mode on (`True`) or off (`False`); `None`
        (default) interprets on every backend but GPUs.
    """

    chunk: int = eqx.field(default=DEFAULT_CHUNK, static=True)
    block: int = eqx.field(default=DEFAULT_BLOCK, static=True)
    interpret: bool | None = eqx.field(default=None, static=True)

    def __check_init__(self):
        if not isinstance(self.chunk, int) or isinstance(self.chunk, bool) or self.chunk < 1:
            raise ValueError(f"PallasScan: `chunk` must be a positive integer, got {self.chunk!r}.")
        block = self.block
        if not isinstance(block, int) or isinstance(block, bool) or block < 1 or block & block - 1:
            raise ValueError(f"PallasScan: `block` must be a power of two, got {block!r}.")
        if self.interpret not in (None, True, False):
            raise ValueError(
                f"PallasScan: `interpret` must be None, True or False, got {self.interpret!r}."
            )

    def scan(self, algebra, storage, a, b, h_init, *, shared, reverse):
        kw = dict(reverse=reverse, chunk=self.chunk, block=self.block, interpret=self.interpret)
        kind, store = type(algebra), type(storage)
        if kind is Diagonal and store is ComplexPairs:
            return _complex_pairs_scan(a, b, h_init, shared, storage.conjugate, kw)
        if store in (Storage, Cast):
            a = a.astype(h_init.dtype)
            if kind is Diagonal and jnp.issubdtype(b.dtype, jnp.complexfloating):
                pairs = ComplexPairs()
                hs = _complex_pairs_scan(a, pairs.store(b), h_init, shared, False, kw)
                return pairs.load(hs)
            if kind is Diagonal and jnp.issubdtype(b.dtype, jnp.floating):
                return diagonal_scan(a, b, h_init, **kw)
            if kind is RotationScaling and jnp.issubdtype(b.dtype, jnp.floating):
                return rotation_scan(a, b, h_init, **kw)
        raise ValueError(
            f"PallasScan supports the Diagonal (real or complex) and RotationScaling algebras "
            f"with Storage, Cast or (Diagonal only) ComplexPairs storage; got algebra "
            f"{algebra!r} with storage {storage!r} and inputs of dtype {b.dtype}. Use "
            "method='sequential' or 'associative' for it."
        )


def _complex_pairs_scan(
    a: Array, b: Array, h_init: Array, shared: bool, conjugate: bool, kw: dict
) -> Array:
    """The complex diagonal recurrence on stored pairs `b[L, 2, *state]` holding
    (Re h, ±Im h): the stored pairs obey the pair recurrence with the transition
    (Re a, ±Im a), since conj(h_k) = conj(a) conj(h_{k-1}) + conj(x_k)."""
    length = b.shape[0]
    channels = b[0, 0].size
    shape = (2, channels) if shared else (length, 2, channels)
    a_pairs = _pairs(a, 0 if shared else 1, conjugate).reshape(shape)
    h0 = _pairs(h_init, 0, conjugate).reshape(2, channels)
    out = rotation_scan(a_pairs, b.reshape(length, 2, channels), h0, **kw)
    return out.reshape(b.shape)
