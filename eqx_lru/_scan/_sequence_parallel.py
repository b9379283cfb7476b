r"""A linear recurrence over a length axis split across devices.

Inside `jax.shard_map`, each device holds one contiguous chunk of the sequence (device $d$
of the mesh axis holds steps $[d\ell, (d + 1)\ell)$). The recurrence
$h_k = a_k \otimes h_{k-1} + b_k$ is affine in the state entering a chunk, so a chunk is
summarised by two things: the composition of its transitions $A_d = a_{\text{last}} \circ
\dots \circ a_{\text{first}}$ and its final state $s_d$ from a zero initial state. The state
entering chunk $d$ is the exclusive scan of the summaries over the devices,

$$h^\text{in}_0 = h_\text{init},\qquad h^\text{in}_{d+1} = A_d \otimes h^\text{in}_d + s_d,$$

after which each chunk is an ordinary recurrence from its own initial state.
"""

from collections.abc import Hashable

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array

from ._algebra import AbstractAlgebra
from ._methods import AbstractChunkMethod, AbstractScanMethod, scan_method
from ._varying import vary_over


class SequenceParallel(AbstractChunkMethod):
    r"""A scan method for a length axis sharded over the devices of the mesh axis
    `axis_name`, for use inside `jax.shard_map` (each device passes its own chunk of the
    sequence; every chunk has the same length).

    Each device runs `local` twice over its chunk:

    1. from a zero state, keeping only its final state $s_d$; beside it the composition
       $A_d$ of the chunk's transitions (a power by repeated squaring for a shared
       transition, a pairwise tree of `algebra.compose` for one per step);
    2. after an `all_gather` of the summaries $(A_d, s_d)$ and a fold over the devices
       before it in scan order (the exclusive scan
       $h^\text{in}_{d+1} = A_d \otimes h^\text{in}_d + s_d$, $O(\text{devices})$ small
       steps), from the state $h^\text{in}_d$ carried in.

    Both passes are exact for every algebra, shared or per-step transitions and both
    directions. Two passes cost twice the local scan's time, but no more memory than one
    scan (pass 1's states are dropped once its last state is read); correcting pass 1's
    states with the carried-in state instead ($h_k \mathrel{+}= A_{0..k} \otimes
    h^\text{in}$) would need every prefix composition $A_{0..k}$ of per-step transitions,
    one transition per step kept as long as the states. The communication is one
    `all_gather` of one transition and one state per device, independent of the length.

    `initial_state` enters the chunk holding the first step processed (device 0, or the
    last device with `reverse=True`). `segment_ids` compare across chunk boundaries (a
    `ppermute` of the boundary ids), and the custom VJP of `eqx_lru.linear_recurrence`
    runs this same method on the adjoint recurrence, with its one-step shifts crossing
    chunk boundaries the same way, so gradients are sequence-parallel too. The cotangent of
    a replicated input (a shared transition, the initial state) is returned per device,
    summed over the devices by JAX (`shard_map` with `check_vma` on or off).

    Lengths not divisible by the device count: pad the sequence at the end (the
    layers and `LRUModel` take `length=`, counted over the whole sequence). A reverse
    scan with `initial_state` then starts at the padding: zero the pads and the state
    stays zero only if `initial_state` is zero.

    **Models.** An `LRUBlock` or `LRUModel` whose cores scan with this method runs on one
    chunk of each sequence per device, inside `jax.shard_map` (the sequence axis in the
    `in_specs`, e.g. `P(None, axis_name)` for a batch of token sequences): padding masks
    use global positions, batch-norm statistics also sum over `axis_name`, mean/last
    pooling combine the chunks, dropout folds the chunk index into each example's key,
    and a core's `run` returns the final state of the whole sequence on every device
    (`eqx_lru._scan._sharding`). Refused at trace time with a `ValueError` (not across devices
    yet): pooling per packed sequence (`segment_ids=` with pooling), `LRUBlock.chunk` and
    `LRUModel.chunk` (`baselines.S4D(mode="convolution")` runs its recurrence instead of
    the convolution, which would see one chunk only); `step` is per position and
    runs as on one device. An axis name that no enclosing `jax.shard_map` binds is a
    `NameError` naming it. A concrete `length` beyond the whole sequence is a `ValueError`
    at trace time; a traced one (an argument of the `shard_map`) is checked at run time by
    `eqx.error_if`, whose message reads best under `eqx.filter_jit` (under `jax.jit` it is
    buried in an `INTERNAL` runtime error).

    **Arguments:**

    - `axis_name`: the mesh axis the length axis is sharded over (as in
        `jax.shard_map(..., in_specs=P(..., axis_name, ...))`).
    - `local`: the method each device runs over its chunk, an object or a string shortcut
        (default `"auto"`: sequential on CPU, associative on accelerators); any method but
        another `SequenceParallel`.

    ```python
    method = eqx_lru.SequenceParallel("seq")
    scan = jax.shard_map(
        lambda a, b: eqx_lru.linear_recurrence(a, b, algebra=eqx_lru.Diagonal(), method=method),
        mesh=jax.sharding.Mesh(jax.devices(), ("seq",)),
        in_specs=(P(), P("seq")), out_specs=P("seq"),
    )
    ```
    """

    axis_name: Hashable = eqx.field(static=True)
    local: AbstractScanMethod = eqx.field(static=True)

    def __init__(self, axis_name: Hashable, local: "str | AbstractScanMethod" = "auto"):
        self.axis_name = axis_name
        self.local = scan_method(local)

    def __check_init__(self):
        if isinstance(self.local, SequenceParallel):
            raise ValueError(
                "`local` of a SequenceParallel cannot be another SequenceParallel; to split "
                "over several mesh axes, shard the length axis over one axis only."
            )

    def resolve(self) -> "SequenceParallel":
        return SequenceParallel(self.axis_name, self.local.resolve())

    def _devices(self) -> int:
        return axis_size(self.axis_name)

    def as_local(self, x: Array) -> Array:
        self._devices()
        if self.axis_name not in jax.sharding.get_abstract_mesh().manual_axes:
            return x  # a `jax.vmap` axis: no per-device types to mark
        return vary_over(x, (self.axis_name,))

    def preceding(self, last: Array, fill: Array, *, reverse: bool) -> Array:
        n = self._devices()
        # A cyclic shift (the first chunk's value is replaced by `fill`): a full permutation
        # works under `jax.vmap` axes too.
        step = -1 if reverse else 1
        perm = [(d, (d + step) % n) for d in range(n)]
        received = jax.lax.ppermute(last, self.axis_name, perm)
        return jnp.where(self.holds_start(reverse=reverse), fill, received)

    def holds_start(self, *, reverse: bool) -> Array:
        n = self._devices()
        return jax.lax.axis_index(self.axis_name) == (n - 1 if reverse else 0)

    def scan(self, algebra, storage, a, b, h_init, *, shared, reverse):
        n = self._devices()
        local = self.local.resolve()
        length = b.shape[0]
        # Pass 1: this chunk's final state from a zero state, and its composed transition.
        h_init = self.as_local(h_init)
        zero = self.as_local(jnp.zeros_like(h_init))
        states = local.scan(algebra, storage, a, b, zero, shared=shared, reverse=reverse)
        last = slice(0, 1) if reverse else slice(-1, None)
        final = storage.load(states[last])[0]
        total = _power(algebra, a, length) if shared else _compose_all(algebra, a, reverse)
        # The exclusive scan over the devices, in scan order.
        totals = jax.lax.all_gather(total, self.axis_name)
        finals = jax.lax.all_gather(final, self.axis_name)
        carried = [h_init] * n
        h = h_init
        for d in reversed(range(n)) if reverse else range(n):
            carried[d] = h
            h = algebra.apply(totals[d], h) + finals[d]
        h_in = jnp.stack(carried)[jax.lax.axis_index(self.axis_name)]
        # Pass 2: the chunk from the state carried in.
        return local.scan(algebra, storage, a, b, h_in, shared=shared, reverse=reverse)


def axis_size(axis_name: Hashable) -> int:
    """The number of devices of the mesh axis `axis_name`; a `NameError` in the library's
    words if no enclosing `jax.shard_map` (or named `jax.vmap`) binds it."""
    try:
        return jax.lax.axis_size(axis_name)
    except NameError as e:
        raise NameError(
            f"SequenceParallel({axis_name!r}) scans a length axis sharded over the mesh "
            f"axis {axis_name!r}, and no enclosing `jax.shard_map` binds that name: call "
            "the model inside `jax.shard_map` over a mesh with that axis (the mesh's "
            "`axis_names`), name the axis the mesh has in `SequenceParallel(axis_name)`, "
            "or use a single-device method such as eqx_lru.Sequential()."
        ) from e


def _power(algebra: AbstractAlgebra, a: Array, count: int) -> Array:
    """`a ∘ a ∘ … ∘ a` (`count >= 1` times), by repeated squaring."""
    result, base = None, a
    while count:
        if count & 1:
            result = base if result is None else algebra.compose(base, result)
        count >>= 1
        if count:
            base = algebra.compose(base, base)
    assert result is not None, "`count` must be at least 1"
    return result


def _compose_all(algebra: AbstractAlgebra, a: Array, reverse: bool) -> Array:
    """The composition of all transitions `a[k]` in scan order (`a[0]` first, or `a[-1]`
    first if `reverse`), as a pairwise tree: $O(\\log L)$ depth, no length-long scan."""
    while a.shape[0] > 1:
        even = a.shape[0] - a.shape[0] % 2
        left, right = a[0:even:2], a[1:even:2]
        pairs = algebra.compose(left, right) if reverse else algebra.compose(right, left)
        a = jnp.concatenate([pairs, a[even:]]) if even < a.shape[0] else pairs
    return a[0]
