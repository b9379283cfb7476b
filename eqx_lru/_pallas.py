r"""A Pallas kernel for the diagonal linear recurrence, for NVIDIA GPUs (Pallas' Triton lowering).

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

**Backend.** JAX 0.11 deprecated the Triton backend of Pallas (Mosaic GPU is its
supported NVIDIA backend; Triton users are pointed to `jax_triton`). This kernel stays on
Pallas' Triton lowering, deliberately, because on every JAX this package supports
(0.10.2 to the newest) it is the only route that

- lowers for CUDA on a machine without a GPU (`jax_triton` needs the CUDA plugin and a
  device to lower, and Python ≥ 3.12 and JAX ≥ 0.11 to install), so CI checks the GPU
  code without a GPU, and its Triton IR compiles with the `triton` package's `ptxas`
  for a register and spill check (tests/lib/test_pallas.py);
- expresses the kernel as written: masked loads and stores of partial channel tiles,
  one program per 32 channels (Mosaic GPU works on 128-thread warpgroups and its
  `plgpu.kernel` has no masked memory ops), and runs on the A100s of the paper as well
  as on Hopper (Mosaic GPU's pipelining targets sm_90+);
- batches under `jax.vmap` (pallas_call's batching rule).

The deprecation is handled explicitly rather than passed on to every user at every
lowering: the kernel's compiler parameters are a subclass of the Triton ones, registered
with Pallas' per-backend lowering hook, and that lowering calls the Triton backend with
the deprecation warning (only that one) silenced. When JAX removes the Triton backend,
`PallasScan` says so at the call (`pallas_backend_error()`), and a port to Mosaic GPU is
the way on; the other scan methods are unaffected.

On backends other than GPUs the kernel runs in Pallas interpret mode (slow; for tests).
The defaults `chunk`, `block` are chosen by compiling the kernel for sm_90 (no spilled
registers); they are not yet tuned by timing on a GPU. Pallas' Triton lowering computes
offsets in int32: one call's arrays (batch included) must hold fewer than 2**31 elements.
"""

import contextlib
import dataclasses
import functools
import warnings
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jaxtyping import Array

from ._algebra import Diagonal, RotationScaling
from ._checks import Size
from ._methods import AbstractScanMethod, register_shortcut
from ._storage import Cast, ComplexPairs, Identity

try:  # the Triton backend's masked memory ops (names vary across versions)
    from jax.experimental.pallas import triton as _pltriton
except ImportError:  # pragma: no cover
    _pltriton = None

try:  # the Triton lowering and Pallas' per-backend lowering hook (private, JAX >= 0.10)
    from jax._src.pallas import core as _pallas_core
    from jax._src.pallas.triton import core as _triton_core
    from jax._src.pallas.triton import pallas_call_registration as _triton_registration
except ImportError:  # pragma: no cover  (a JAX without the Triton backend)
    _pallas_core = _triton_core = _triton_registration = None

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

_DEPRECATION = "The Pallas Triton backend is deprecated"


def pallas_backend_error() -> str | None:
    """Why the kernel cannot be lowered for GPUs with this JAX (`None` when it can)."""
    if _triton_registration is None or not hasattr(_pallas_core, "register_lowering_rule"):
        return (
            f"this JAX ({jax.__version__}) has no Pallas Triton backend, which PallasScan's "
            "GPU kernel needs; use method='associative' on GPUs (or an older JAX)."
        )
    return None


if pallas_backend_error() is None:

    @dataclasses.dataclass(frozen=True)
    class _ScanCompilerParams(_triton_core.CompilerParams):
        """Triton parameters of this kernel: their own type, so that Pallas lowers the
        kernel through `_lower_scan` below."""

    def _lower_scan(ctx, *args, **params):
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", _DEPRECATION, DeprecationWarning)
            return _triton_registration.pallas_call_lowering(ctx, *args, **params)

    _pallas_core.register_lowering_rule(_ScanCompilerParams, _lower_scan, "gpu")
else:  # pragma: no cover
    _ScanCompilerParams = None


def _compiler_params(block: int) -> Any:
    """One warp per 32 channels; no Triton software pipelining (the kernel prefetches)."""
    warps = max(1, min(8, block // 32))
    return _ScanCompilerParams(num_warps=warps, num_stages=1)


@contextlib.contextmanager
def cuda_target(device_kind: str = "NVIDIA H100"):
    """Lower for a GPU of `device_kind` on a machine without one.

    JAX ≥ 0.12 reads the GPU's compute capability from an abstract device
    (`jax.sharding.use_abstract_mesh`); older versions assume sm_90 without a GPU, and
    this is a no-op there. Use it around `jax.jit(f).trace(...).lower(lowering_platforms=
    ("cuda",))`.
    """
    try:
        from jax._src.pallas.triton import gpu_info  # noqa: F401  (JAX >= 0.12)
    except ImportError:
        yield
        return
    device = jax.sharding.AbstractDevice(device_kind=device_kind, num_cores=None, platform="gpu")
    mesh = jax.sharding.AbstractMesh((1,), ("_",), abstract_device=device)
    with jax.sharding.use_abstract_mesh(mesh):
        yield


def _use_interpret(interpret: bool | None) -> bool:
    """`interpret`, or when `None`: interpret everywhere but on GPUs."""
    return jax.default_backend() != "gpu" if interpret is None else interpret


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
    interpret = _use_interpret(interpret)
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
    zero and the product of its transitions (refs a, x → end, product).
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
        values = [_load(ref, (*idx, p, slice(None)), mask, interpret) for p in range(parts)]
        return tuple(v.astype(compute) for v in values)

    def row(q):  # the memory row of processing position q (clamped into the sequence)
        q = jnp.minimum(q, length - 1)
        return length - 1 - q if plan.reverse else q

    def rows(q0, size):
        """The inputs of positions q0..q0+size-1, loaded (all in flight at once)."""
        xs = [load(x_ref, row(q0 + t)) for t in range(size)]
        as_ = None if shared else [load(a_ref, row(q0 + t)) for t in range(size)]
        ps = [load(p_ref, row(q0 + t + 1)) for t in range(size)] if mode == "sum" else None
        return xs, as_, ps

    a_shared = load(a_ref) if shared else None

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
            for p in range(parts):
                _store(
                    o_ref, (row(q), p, slice(None)), h[p].astype(o_ref.dtype), store_mask, interpret
                )
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
        h = load(h0_ref)
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
            _store(ref, (i, slice(None)), v.astype(ref.dtype), mask, interpret)

    if mode == "ends":
        put(end_ref, h)
        put(prod_ref, prod)
    elif mode == "sum":
        put(acc_ref, acc)


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
        compiler_params=None if plan.interpret else _compiler_params(block),
        name=f"eqx_lru_scan_{mode}",
    )(*ins)


def _pallas_scan(a, x, h0, *, partner=None, **settings):
    """The kernel on `x[L, K, P, M]` (P = 1 real part or 2 planar pair parts), transitions
    `a[K, P, M]` (shared) or `a[L, K, P, M]`, `h0[K, P, M]` in the compute dtype;
    `settings` are `_plan`'s keywords.

    Returns the states (shape and dtype of `x`); with `partner` (`[L, K, P, M]`), also
    `Σ_q h_q ⊗ partner_{q+1}ᵀ` over processing positions, `[K, P, P, M]` in the compute
    dtype."""
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
        return _pallas_call("states", plan, (a, x, inits), out, aliases={1: 0})
    acc = jax.ShapeDtypeStruct((lead, plan.n_segments, parts * parts, width), compute)
    hs, sums = _pallas_call("sum", plan, (a, x, inits, partner), [out, acc], aliases={1: 0})
    return hs, jnp.sum(sums, axis=1).reshape(lead, parts, parts, width)


def _scan_as(state: tuple[int, int, int], a, x, h0, *, shared: bool, partner=None, **kw):
    """`_pallas_scan` with each step's state viewed as `state` = (K, P, M); the states
    have the shape of `x`."""
    length = x.shape[0]
    a = a.reshape(state if shared else (length,) + state)
    if partner is not None:
        partner = partner.reshape((length,) + state)
    out = _pallas_scan(
        a, x.reshape((length,) + state), h0.reshape(state), shared=shared, partner=partner, **kw
    )
    if partner is None:
        return out.reshape(x.shape)
    return out[0].reshape(x.shape), out[1]


def _check_sizes(name: str, chunk, block, segment) -> None:
    def positive_int(v):  # Python or NumPy integers, as every size of the library
        return isinstance(v, int | np.integer) and not isinstance(v, bool | np.bool_) and v > 0

    if not positive_int(chunk):
        raise ValueError(f"{name}: `chunk` must be a positive integer; got {chunk!r}.")
    if not positive_int(block) or block & (block - 1):
        raise ValueError(f"{name}: `block` must be a power of two; got {block!r}.")
    if segment is not None and not positive_int(segment):
        raise ValueError(
            f"{name}: `segment` must be a positive integer or None (one segment); got {segment!r}."
        )


# --- the scan method ---------------------------------------------------------------------


def _pairs(z: Array, axis: int, conjugate: bool) -> Array:
    """Complex `z` as planar real pairs (Re z, ±Im z) along a new `axis`."""
    return jnp.stack([z.real, -z.imag if conjugate else z.imag], axis=axis)


class PallasScan(AbstractScanMethod):
    r"""The recurrence by a Pallas kernel (`eqx_lru._pallas`): the running state in
    registers, programs tiled over (batch × channels × segments of the sequence), each
    walking its segment in chunks of `chunk` steps with the next chunk's loads in flight.

    Supports `Diagonal` (real; complex, either as `ComplexPairs` planar pairs — the
    layout `ComplexLRU` uses — or as complex arrays, converted to pairs and back) and
    `RotationScaling` (`RealLRU`), with the plain `Identity` storage or `Cast` (e.g. bfloat16
    states and inputs with a float32 carry). The backward pass is the same kernel on the
    adjoint recurrence (the custom VJP of `eqx_lru.linear_recurrence`); for a shared
    transition it also sums the transition's cotangent in the same pass.

    Written for NVIDIA GPUs (Pallas' Triton lowering; why, in the module docstring).
    Elsewhere it runs in Pallas interpret mode: exact, and tested there against a loop,
    but slow — for tests, not for training. On a GPU it has been compiled (for sm_90, in
    tests, without a GPU) but not yet timed, so `"auto"` does not choose it.

    **Arguments:**

    - `chunk`: steps per chunk (row loads each program has in flight), unrolled.
    - `block`: channels per program, a power of two (one warp per 32).
    - `segment`: steps per segment of the two-level scan, or `None` for one segment. With
        $S = \lceil L / \text{segment} \rceil > 1$ segments there are $S$ times more
        programs, at the price of reading the drive twice.
    - `interpret`: force Pallas interpret mode on (`True`) or off (`False`); `None`
        (default) interprets on every backend but GPUs.
    """

    chunk: int = eqx.field(default=DEFAULT_CHUNK, static=True)
    block: int = eqx.field(default=DEFAULT_BLOCK, static=True)
    segment: int | None = eqx.field(default=DEFAULT_SEGMENT, static=True)
    interpret: bool | None = eqx.field(default=None, static=True)

    def __init__(
        self,
        chunk: Size = DEFAULT_CHUNK,
        block: Size = DEFAULT_BLOCK,
        segment: Size | None = DEFAULT_SEGMENT,
        interpret: bool | None = None,
    ):
        _check_sizes("PallasScan", chunk, block, segment)
        self.chunk, self.block = int(chunk), int(block)
        self.segment = None if segment is None else int(segment)
        self.interpret = interpret

    def __check_init__(self):
        _check_sizes("PallasScan", self.chunk, self.block, self.segment)
        if self.interpret not in (None, True, False):
            raise ValueError(
                f"PallasScan: `interpret` must be None, True or False, got {self.interpret!r}."
            )

    def _kw(self, reverse: bool) -> dict:
        return dict(
            reverse=reverse,
            chunk=self.chunk,
            block=self.block,
            segment=self.segment,
            interpret=self.interpret,
        )

    def _layout(self, algebra, storage, b):
        """How the kernel sees `b`'s states: (kind, (K, P, M), conjugate) with kind one of
        "pairs" (stored `ComplexPairs`), "complex" (complex arrays), "real", "rotation";
        `None` if unsupported."""
        kind, store = type(algebra), type(storage)
        if kind is Diagonal and store is ComplexPairs:
            return "pairs", (1, 2, b[0, 0].size), storage.conjugate
        if store in (Identity, Cast):
            if kind is Diagonal and jnp.issubdtype(b.dtype, jnp.complexfloating):
                return "complex", (1, 2, b[0].size), False
            if kind is Diagonal and jnp.issubdtype(b.dtype, jnp.floating):
                return "real", (1, 1, b[0].size), False
            if kind is RotationScaling and jnp.issubdtype(b.dtype, jnp.floating):
                width = b.shape[-1]
                return "rotation", (b[0].size // (2 * width), 2, width), False
        return None

    def _unsupported(self, algebra, storage, b) -> ValueError:
        return ValueError(
            f"PallasScan supports the Diagonal (real or complex) and RotationScaling algebras "
            f"with Identity, Cast or (Diagonal only) ComplexPairs storage; got algebra "
            f"{algebra!r} with storage {storage!r} and inputs of dtype {b.dtype}. Use "
            "method='sequential' or 'associative' for it."
        )

    def _run(self, layout, a, b, h_init, shared, reverse, partner=None):
        kind, state, conjugate = layout
        length = b.shape[0]
        kw = dict(self._kw(reverse), shared=shared, partner=partner)
        if kind in ("real", "rotation"):
            a = a.astype(h_init.dtype)
            return _scan_as(state, a, b, h_init, **kw)
        # Complex numbers as planar pairs: the stored pairs (Re h, ±Im h) obey the pair
        # recurrence with the transition (Re a, ±Im a), since conj(h_k) = conj(a)
        # conj(h_{k-1}) + conj(x_k).
        a_pairs = _pairs(a, 0 if shared else 1, conjugate)
        h0 = _pairs(h_init, 0, conjugate)
        x = b if kind == "pairs" else ComplexPairs().store(b)
        if partner is not None and kind == "complex":
            kw["partner"] = ComplexPairs().store(partner)
        out = _scan_as(state, a_pairs, x, h0, **kw)
        hs, sums = (out, None) if partner is None else out
        if kind == "complex":
            hs = ComplexPairs().load(hs.reshape((length, 2) + b.shape[1:]))
        hs = hs.reshape(b.shape)
        return hs if partner is None else (hs, sums)

    def scan(self, algebra, storage, a, b, h_init, *, shared, reverse):
        layout = self._layout(algebra, storage, b)
        if layout is None:
            raise self._unsupported(algebra, storage, b)
        return self._run(layout, a, b, h_init, shared, reverse)

    def adjoint_scan_shared(
        self, algebra, storage, algebra_t, a_t, g, hs, *, reverse
    ) -> tuple[Array, Array] | None:
        """The adjoint scan of a shared transition with its cotangent summed in the same
        kernel pass (see `AbstractScanMethod.adjoint_scan_shared`)."""
        cotangents = storage.cotangent()
        layout = self._layout(algebra_t, cotangents, g)
        if layout is None or type(algebra_t) is not type(algebra):
            return None
        kind, state, _ = layout
        h_init = jnp.zeros(g.shape[2:] if kind == "pairs" else g.shape[1:], a_t.dtype)
        lam, sums = self._run(layout, a_t, g, h_init, True, reverse, partner=hs)
        # `sums[k, i, j, m]` = Σ λ_i h_j over the pairs (λ_k, h_{k-1}) in the kernel's parts.
        # The transition's cotangent is bilinear in (λ, h) and acts channel by channel, so
        # it is Σ_ij of the cotangent of (S_ij e_i, e_j): exact, for every layout.
        if kind == "pairs":
            load_lam, load_h = cotangents.load, storage.load
        elif kind == "complex":
            load_lam = load_h = ComplexPairs().load
        else:
            load_lam = load_h = Identity().load
        parts = state[1]
        stored_state = (2,) + g.shape[1:] if kind == "complex" else g.shape[1:]
        sums = sums.reshape(state[0], parts, parts, state[2])
        total = None
        for i in range(parts):
            for j in range(parts):
                unit = jnp.zeros(state, sums.dtype)
                lam_ij = unit.at[:, i].set(sums[:, i, j]).reshape((1,) + stored_state)
                h_j = unit.at[:, j].set(1).reshape((1,) + stored_state)
                term = algebra.transition_cotangent_sum(load_lam(lam_ij), load_h(h_j))
                total = term if total is None else total + term
        return lam, total


register_shortcut("pallas", PallasScan)


# --- the kernel on plain arrays ------------------------------------------------------------


def _check(a, x, h0, *, pairs: bool) -> tuple[bool, Array]:
    """Validate `kernel_scan`'s arrays; return (shared, h0)."""
    if x.ndim < (3 if pairs else 2) or x.shape[0] == 0:
        want = "(length, ..., 2, M)" if pairs else "(length, ...)"
        raise ValueError(f"kernel_scan: `x` must have shape {want} with length > 0; got {x.shape}.")
    if pairs and x.shape[-2] != 2:
        raise ValueError(
            f"kernel_scan: `x` must hold planar pairs, shape (length, ..., 2, M); got {x.shape}."
        )
    state = x.shape[1:]
    if a.shape not in (state, x.shape):
        raise ValueError(
            f"kernel_scan: `a` must have shape {state} (shared by every step) or {x.shape} "
            f"(one per step) for `x` of shape {x.shape}; got {a.shape}."
        )
    if not (jnp.issubdtype(a.dtype, jnp.floating) and jnp.issubdtype(x.dtype, jnp.floating)):
        raise ValueError(
            f"kernel_scan: `a` and `x` must be real floating; got {a.dtype}, {x.dtype}."
        )
    if h0 is None:
        return a.shape != x.shape, jnp.zeros(state, a.dtype)
    if h0.shape != state or h0.dtype != a.dtype:
        raise ValueError(
            f"kernel_scan: `h0` must have shape {state} and the dtype of `a` ({a.dtype}); got "
            f"{h0.shape}, {h0.dtype}."
        )
    return a.shape != x.shape, h0


def kernel_scan(
    a: Array,
    x: Array,
    h0: Array | None = None,
    *,
    pairs: bool = False,
    reverse: bool = False,
    chunk: int = DEFAULT_CHUNK,
    block: int = DEFAULT_BLOCK,
    segment: int | None = DEFAULT_SEGMENT,
    interpret: bool | None = None,
) -> Array:
    r"""All states of the diagonal recurrence on plain arrays, by the Pallas kernel:
    `PallasScan` with the `Diagonal` algebra (real) or, when `pairs`, `RotationScaling`.

    Real: $h_k = a_k \odot h_{k-1} + x_k$. Planar pairs, with $h = (h_0, h_1)$ =
    `h[..., 0, :]`, `h[..., 1, :]` and the transition $(a, b)$ = `a[..., 0, :]`,
    `a[..., 1, :]`: $h_0 + i h_1 \leftarrow (a + ib)(h_0 + i h_1) + (x_0 + i x_1)$, i.e.
    multiplication by the block $\begin{pmatrix}a&-b\\b&a\end{pmatrix}$.

    **Arguments:**

    - `a`: the transitions, shape `x.shape[1:]` (one shared by every step) or `x.shape`.
        The state is carried in `a.dtype` (e.g. float32 over bfloat16 storage).
    - `x`: the drive, `(length, ...)`, or `(length, ..., 2, M)` when `pairs`; any real
        floating dtype (the stored dtype, e.g. bfloat16).
    - `h0`: $h_{-1}$ (`x.shape[1:]`, dtype of `a`); zeros if `None`.
    - `pairs`: the planar pair (rotation-scaling) recurrence instead of the real one.
    - `reverse`: run from the end, $h_k = a_k \odot h_{k+1} + x_k$.
    - `chunk`, `block`, `segment`, `interpret`: as `PallasScan`'s.

    **Returns:** the states $h_0, \ldots, h_{L-1}$, with the shape and dtype of `x`.
    """
    shared, h0 = _check(a, x, h0, pairs=pairs)
    _check_sizes("kernel_scan", chunk, block, segment)
    method = PallasScan(chunk=chunk, block=block, segment=segment, interpret=interpret)
    algebra = RotationScaling() if pairs else Diagonal()
    return method.scan(algebra, Identity(), a, x, h0, shared=shared, reverse=reverse)
