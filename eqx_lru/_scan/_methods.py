r"""Scan methods: how the recurrence $h_k = a_k \otimes h_{k-1} + b_k$ is computed.

Small objects in the lineax style (`AutoLinearSolver` resolving to a concrete solver):
`Sequential`, `Associative`, `eqx_lru.PallasScan` (a GPU kernel) and `Auto`, which resolves
per backend. Each method owns its forward; the custom VJP of `eqx_lru.linear_recurrence`
runs the *same* method on the adjoint recurrence (the transposed transitions, from the
end), so a method never writes a backward pass of its own. Strings are shortcuts, see
`scan_method`.
"""

import abc
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array

from .._checks import Size, check_size
from ._algebra import AbstractAlgebra
from ._storage import AbstractStorage


class AbstractScanMethod(eqx.Module):
    """A way of computing all states of a linear recurrence.

    A method is an `eqx.Module` with static fields only (hashable: it is a static argument
    of `jax.jit` and of the custom VJP). Subclasses implement `scan`; `resolve` lets a
    method choose a concrete one when the computation is traced (see `Auto`).
    """

    def resolve(self) -> "AbstractScanMethod":
        """The concrete method to run (itself, except for methods such as `Auto`)."""
        return self

    def adjoint_scan_shared(
        self,
        algebra: AbstractAlgebra,
        storage: AbstractStorage,
        algebra_t: AbstractAlgebra,
        a_t: Array,
        g: Array,
        hs: Array,
        *,
        reverse: bool,
    ) -> tuple[Array, Array] | None:
        r"""The backward pass's adjoint scan for a transition shared by every step, with the
        transition's cotangent summed in the same pass: `(λ, Σ_k λ_k ⊗ h_{k-1}ᵀ)` over the
        steps k ≥ 1 of the forward order, `λ` stored as `self.scan(algebra_t,
        storage.cotangent(), a_t, g, 0, shared=True, reverse=reverse)` would, `hs` the
        stored forward states. `None` (the default): the scan runs alone and a loop over
        `λ` and `hs` sums the cotangent after it. `eqx_lru.PallasScan` fuses the two."""
        del algebra, storage, algebra_t, a_t, g, hs, reverse
        return None

    @abc.abstractmethod
    def scan(
        self,
        algebra: AbstractAlgebra,
        storage: AbstractStorage,
        a: Array,
        b: Array,
        h_init: Array,
        *,
        shared: bool,
        reverse: bool,
    ) -> Array:
        r"""All stored states $h_k = a_k \otimes h_{k-1} + \text{load}(b)_k$, written with
        `storage.store`.

        **Arguments:**

        - `algebra`: how transitions act on states.
        - `storage`: `b` and the result are in its stored form (`storage.load` gives the
            algebra's form, with a leading length axis).
        - `a`: one transition (`shared=True`) or one per step (leading length axis), in the
            algebra's form.
        - `b`: the stored inputs, leading length axis.
        - `h_init`: $h_{-1}$ in the algebra's form (zeros for no initial state).
        - `reverse`: run from the last step to the first.

        **Returns:** the stored states, shape and dtype of `b`.
        """


class AbstractChunkMethod(AbstractScanMethod):
    """A method that runs another (`local`) over one chunk of a longer sequence split
    across devices (`eqx_lru.SequenceParallel`): abstract only. The scan's backward pass,
    its segment resets, the shared transition's cotangent and the RG-LRU's document
    starts look one step back across the chunk boundary through its three methods, by
    way of the functions `preceding`, `holds_start` and `as_local` below, which give a
    method over the whole length (any other) their plain meaning."""

    local: eqx.AbstractVar[AbstractScanMethod]

    @abc.abstractmethod
    def preceding(self, last: Array, fill: Array, *, reverse: bool) -> Array:
        """The element processed just before this chunk's first step, given `last`, this
        chunk's element processed last (`x[-1]`, or `x[0]` if `reverse`): the previous
        chunk's `last`, or `fill` for the chunk holding the sequence's first step."""

    @abc.abstractmethod
    def holds_start(self, *, reverse: bool) -> bool | Array:
        """Whether this chunk holds the first step processed."""

    @abc.abstractmethod
    def as_local(self, x: Array) -> Array:
        """`x` as an input of this chunk's computation (marked per-device, so that the
        cotangent of a replicated value is a per-device contribution JAX sums)."""


def preceding(method: AbstractScanMethod, last: Array, fill: Array, *, reverse: bool) -> Array:
    """`method.preceding` for a method over one chunk (`AbstractChunkMethod`); `fill`
    otherwise (the whole sequence is one chunk: nothing precedes its first step)."""
    if isinstance(method, AbstractChunkMethod):
        return method.preceding(last, fill, reverse=reverse)
    return fill


def holds_start(method: AbstractScanMethod, *, reverse: bool) -> bool | Array:
    """`method.holds_start` for a method over one chunk; `True` otherwise."""
    if isinstance(method, AbstractChunkMethod):
        return method.holds_start(reverse=reverse)
    return True


def as_local(method: AbstractScanMethod, x: Array) -> Array:
    """`method.as_local(x)` for a method over one chunk; `x` otherwise."""
    if isinstance(method, AbstractChunkMethod):
        return method.as_local(x)
    return x


class Sequential(AbstractScanMethod):
    """One step after the other: a `jax.lax.fori_loop` over blocks of `unroll` steps that
    reads a block of inputs and writes the block of states back *into the same buffer*, in
    place: no second length-long array, and under `jax.vmap` the batch axis stays in front
    (`lax.scan` would move it behind the length axis, which costs a transpose of the whole
    input and output). $O(L)$ depth; the fastest and lightest method on CPUs.

    **Arguments:**

    - `unroll`: steps per loop iteration. The loop is memory-bound, not overhead-bound, so
        the default 1 writes each state straight back; larger blocks stack their states
        first, were no faster on CPU and compile more slowly (measured: see the
        documentation's performance page).
    """

    unroll: int = eqx.field(default=1, static=True)

    def __init__(self, unroll: Size = 1):
        self.unroll = check_size("unroll", unroll)

    def __check_init__(self):
        if not isinstance(self.unroll, int) or self.unroll < 1:
            raise ValueError(f"`unroll` must be a positive integer, got {self.unroll!r}.")

    def scan(self, algebra, storage, a, b, h_init, *, shared, reverse):
        def step(a_k, h, x):
            return algebra.apply(a_k, h) + x

        hs, _ = _sequential(
            step, storage.load, storage.store, a, b, h_init, shared, reverse, self.unroll
        )
        return hs

    def adjoint_scan_shared(self, algebra, storage, algebra_t, a_t, g, hs, *, reverse):
        """The adjoint scan with the shared transition's cotangent summed in the same loop
        (see `AbstractScanMethod.adjoint_scan_shared`): each step adds `λ ⊗ hᵀ` of the
        adjoint state it starts from and the forward state it reads, so neither `λ` nor
        `hs` is read again after the loop (and neither stays live for a separate sum)."""
        cotangents = storage.cotangent()

        def step(a_k, lam, x):
            return algebra_t.apply(a_k, lam) + x

        lam_init = jnp.zeros_like(cotangents.load(g[:1])[0])
        partner = (hs, storage.load, algebra.transition_cotangent)
        lam, _, total = _sequential(
            step, cotangents.load, cotangents.store, a_t, g, lam_init, True, reverse,
            self.unroll, partner,
        )  # fmt: skip
        return lam, total


class Associative(AbstractScanMethod):
    r"""The parallel scan `jax.lax.associative_scan` over the pairs $(a, b)$ under
    $(a_j, b_j) \bullet (a_i, b_i) = (a_j \circ a_i,\ a_j \otimes b_i + b_j)$: $O(\log L)$
    depth, the scan the paper trains with on accelerators (App. A)."""

    def scan(self, algebra, storage, a, b, h_init, *, shared, reverse):
        def combine(earlier, later):
            a_i, b_i = earlier
            a_j, b_j = later
            return algebra.compose(a_j, a_i), algebra.apply(a_j, b_i) + b_j

        x = storage.load(b)
        # Fold h_init into the first input: h_0 = a_0 ⊗ h_init + b_0.
        first = -1 if reverse else 0
        x = x.at[first].add(algebra.apply(a if shared else a[first], h_init))
        if shared:
            a = jnp.broadcast_to(a, (x.shape[0],) + a.shape)
        _, hs = jax.lax.associative_scan(combine, (a, x), reverse=reverse)
        return storage.store(hs)


class Auto(AbstractScanMethod):
    """The method measured fastest on the backend in use, chosen when the computation is
    traced (`jax.default_backend()`).

    CPU: `Sequential()`, the fastest and lightest method at every size of the benchmark,
    forward and forward+backward. GPUs and TPUs: `Associative()`; there the sequential loop
    launches one kernel per step. The measurements are on the documentation's performance
    page.
    """

    def resolve(self) -> AbstractScanMethod:
        return Sequential() if jax.default_backend() == "cpu" else Associative()

    def scan(self, algebra, storage, a, b, h_init, *, shared, reverse):
        return self.resolve().scan(algebra, storage, a, b, h_init, shared=shared, reverse=reverse)

    def adjoint_scan_shared(self, algebra, storage, algebra_t, a_t, g, hs, *, reverse):
        return self.resolve().adjoint_scan_shared(
            algebra, storage, algebra_t, a_t, g, hs, reverse=reverse
        )


_SHORTCUTS: dict[str, Callable[[], AbstractScanMethod]] = {
    "auto": Auto,
    "sequential": Sequential,
    "associative": Associative,
}


def register_shortcut(name: str, make: Callable[[], AbstractScanMethod]) -> None:
    """Make `scan_method(name)` return `make()`. The module that defines a method registers
    its shortcut (`eqx_lru._scan._pallas` registers `"pallas"`), so this module imports none of
    them."""
    _SHORTCUTS[name] = make


def scan_method(method: "str | AbstractScanMethod") -> AbstractScanMethod:
    """The scan method object for `method`: an `AbstractScanMethod` is returned as it is;
    the shortcuts `"auto"`, `"sequential"`, `"associative"` and `"pallas"` give `Auto()`,
    `Sequential()`, `Associative()` and `PallasScan()`.

    Raises a `ValueError` for an unknown string and a `TypeError` for anything else.
    """
    if isinstance(method, AbstractScanMethod):
        return method
    if isinstance(method, str):
        if method not in _SHORTCUTS:
            raise ValueError(
                f"`method` must be one of {tuple(_SHORTCUTS)} or an "
                f"eqx_lru.AbstractScanMethod such as eqx_lru.Sequential(unroll=4); got "
                f"{method!r}."
            )
        return _SHORTCUTS[method]()
    raise TypeError(
        "`method` must be a string shortcut or an eqx_lru.AbstractScanMethod such as "
        f"eqx_lru.Associative(); got {type(method).__name__} {method!r}."
    )


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
    partner: tuple[Array, Callable[[Array], Array], Callable[[Array, Array], Array]] | None = None,
) -> Any:
    """`h ← step(a_k, h, load(xs[k]))` for every k (from the end if `reverse`), writing
    `store(h)` over `xs[k]` in place. Returns (all stored states, the last carry).

    With `partner = (ys, load_y, product)`: also `Σ_k product(h before step k, load_y(ys[k]))`
    over the steps, returned third (the first step's term is the product with the initial
    `h`)."""
    if partner is not None and _is_16_bit_float(partner[0]):
        ys, load_y, product = partner
        partner = (_bits(ys), lambda y: load_y(_from_bits(y, ys.dtype)), product)
    if _is_16_bit_float(xs):
        return _sequential_bits(step, load, store, a, xs, h, shared, reverse, unroll, partner)
    length = xs.shape[0]
    block = max(1, min(unroll, length))
    n_blocks, tail = divmod(length, block)
    # Forward: full blocks from 0, the tail at the end. Reverse: the tail at the start,
    # so that the full blocks are processed first.
    offset = tail if reverse else 0

    def run(carry, start, size, a_block):
        h, buffer, total = carry
        x = load(jax.lax.dynamic_slice_in_dim(buffer, start, size, axis=0))
        y = None
        if partner is not None:
            y = partner[1](jax.lax.dynamic_slice_in_dim(partner[0], start, size, axis=0))
        out = [None] * size
        for t in reversed(range(size)) if reverse else range(size):
            if partner is not None and y is not None:
                total = total + partner[2](h, y[t])
            h = step(a if shared else a_block[t], h, x[t])
            out[t] = h
        # The carry is the last state written, so the write depends on every read of
        # `buffer` in this block and XLA updates it in place.
        buffer = jax.lax.dynamic_update_slice_in_dim(buffer, store(jnp.stack(out)), start, 0)
        return h, buffer, total

    def body(i, carry):
        start = offset + ((n_blocks - 1 - i) if reverse else i) * block
        a_block = None if shared else jax.lax.dynamic_slice_in_dim(a, start, block, axis=0)
        return run(carry, start, block, a_block)

    total = None
    if partner is not None:
        # Zeros of the arrays' per-device type (inside `shard_map` a loop carry keeps it).
        shape = jax.eval_shape(lambda: partner[2](h, partner[1](partner[0][:1])[0]))
        total = jnp.zeros_like(partner[0], shape=shape.shape, dtype=shape.dtype)
    carry = (h, xs, total)
    if n_blocks:
        carry = jax.lax.fori_loop(0, n_blocks, body, carry)
    if tail:
        start = 0 if reverse else n_blocks * block
        carry = run(carry, start, tail, None if shared else a[start : start + tail])
    h, xs, total = carry
    return (xs, h) if partner is None else (xs, h, total)


def _is_16_bit_float(x: Array) -> bool:
    return x.dtype.itemsize == 2 and jnp.issubdtype(x.dtype, jnp.floating)


def _bits(x: Array) -> Array:
    return jax.lax.bitcast_convert_type(x, jnp.uint16)


def _from_bits(x: Array, dtype) -> Array:
    return jax.lax.bitcast_convert_type(x, dtype)


def _sequential_bits(step, load, store, a, xs, h, shared, reverse, unroll, partner):
    """`_sequential` on 16-bit floats `xs`, looping over their bit patterns: XLA on CPU
    upcasts a bfloat16 dynamic-update-slice to float32 over the whole buffer (a full copy
    per iteration). (A 16-bit `partner` is read as bits too, by `_sequential`.)"""
    dtype = xs.dtype

    def load_bits(x):
        return load(_from_bits(x, dtype))

    def store_bits(h):
        return _bits(store(h))

    bits = _bits(xs)
    out = _sequential(step, load_bits, store_bits, a, bits, h, shared, reverse, unroll, partner)
    return (_from_bits(out[0], dtype), *out[1:])
