r"""`PallasScan`: the scan method that runs the recurrence by the Pallas kernel of
`eqx_lru._scan._pallas_kernel` (its design there; its backend, Pallas' Triton lowering, and why,
in `eqx_lru._scan._pallas_backend`), and `kernel_scan`, the kernel on plain arrays.
"""

import functools
import operator

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array

from .._checks import Size
from ._algebra import Diagonal, RotationScaling
from ._methods import AbstractScanMethod, register_shortcut
from ._pallas_backend import _triton_registration as _triton_registration
from ._pallas_backend import cuda_target as cuda_target
from ._pallas_backend import pallas_backend_error as pallas_backend_error
from ._pallas_kernel import DEFAULT_BLOCK, DEFAULT_CHUNK, DEFAULT_SEGMENT, _scan_as
from ._storage import Cast, ComplexPairs, Identity


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
    r"""The recurrence by a Pallas kernel (`eqx_lru._scan._pallas_kernel`): the running state in
    registers, programs tiled over (batch × channels × segments of the sequence), each
    walking its segment in chunks of `chunk` steps with the next chunk's loads in flight.

    Supports `Diagonal` (real; complex, either as `ComplexPairs` planar pairs — the
    layout `ComplexLRU` uses — or as complex arrays, converted to pairs and back) and
    `RotationScaling` (`RealLRU`), with the plain `Identity` storage or `Cast` (e.g. bfloat16
    states and inputs with a float32 carry). The backward pass is the same kernel on the
    adjoint recurrence (the custom VJP of `eqx_lru.linear_recurrence`); for a shared
    transition it also sums the transition's cotangent in the same pass.

    Written for NVIDIA GPUs (Pallas' Triton lowering; why, in `eqx_lru._scan._pallas_backend`).
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

    def _run(
        self, layout, a, b, h_init, shared, reverse, partner=None
    ) -> tuple[Array, Array | None]:
        """The states of the shape of `b`, and `_pallas_scan`'s sums with `partner`."""
        kind, state, conjugate = layout
        length = b.shape[0]
        kw = self._kw(reverse)
        if kind in ("real", "rotation"):
            a = a.astype(h_init.dtype)
            return _scan_as(state, a, b, h_init, shared=shared, partner=partner, **kw)
        # Complex numbers as planar pairs: the stored pairs (Re h, ±Im h) obey the pair
        # recurrence with the transition (Re a, ±Im a), since conj(h_k) = conj(a)
        # conj(h_{k-1}) + conj(x_k).
        a_pairs = _pairs(a, 0 if shared else 1, conjugate)
        h0 = _pairs(h_init, 0, conjugate)
        x = b if kind == "pairs" else ComplexPairs().store(b)
        if partner is not None and kind == "complex":
            partner = ComplexPairs().store(partner)
        hs, sums = _scan_as(state, a_pairs, x, h0, shared=shared, partner=partner, **kw)
        if kind == "complex":
            hs = ComplexPairs().load(hs.reshape((length, 2) + b.shape[1:]))
        return hs.reshape(b.shape), sums

    def scan(self, algebra, storage, a, b, h_init, *, shared, reverse):
        layout = self._layout(algebra, storage, b)
        if layout is None:
            raise self._unsupported(algebra, storage, b)
        return self._run(layout, a, b, h_init, shared, reverse)[0]

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
        assert sums is not None  # for the type checker: a `partner` was given
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
        terms = []
        for i in range(parts):
            for j in range(parts):
                unit = jnp.zeros(state, sums.dtype)
                lam_ij = unit.at[:, i].set(sums[:, i, j]).reshape((1,) + stored_state)
                h_j = unit.at[:, j].set(1).reshape((1,) + stored_state)
                terms.append(algebra.transition_cotangent_sum(load_lam(lam_ij), load_h(h_j)))
        return lam, functools.reduce(operator.add, terms)


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
