r"""The manual mesh axes an array varies over, inside `jax.shard_map`.

With `check_vma=True` (`jax.shard_map`'s default) every array's type records the manual
mesh axes over which its value differs from device to device, and a loop's carry must
keep its type. A scan started from a zero state (or from a replicated `initial_state`)
over inputs sharded along a mesh axis (a batch split across devices, data parallelism;
or a sequence, `SequenceParallel`) would change type on the first step, so the scan's
inputs are first cast to the union of their axes (`jax.lax.pcast(..., to="varying")`, a
no-op on the values, whose transpose sums a replicated input's cotangent over the
devices). Outside `shard_map`, or with `check_vma=False`, no array varies: a no-op.
"""

from collections.abc import Hashable

import jax
from jaxtyping import Array


def varying_axes(x: Array) -> tuple[Hashable, ...]:
    """The manual mesh axes `x` varies over (empty outside `jax.shard_map`)."""
    aval = jax.typeof(x)
    mat = getattr(aval, "manual_axis_type", None)  # JAX 0.10
    axes = getattr(mat, "varying", None) if mat is not None else getattr(aval, "vma", None)
    return tuple(axes or ())


def vary_like(*xs: Array) -> tuple[Array, ...]:
    """`xs`, each cast to vary over every manual mesh axis any of them varies over."""
    union: dict[Hashable, None] = {}
    for x in xs:
        union.update(dict.fromkeys(varying_axes(x)))
    return tuple(vary_over(x, tuple(union)) for x in xs)


def vary_over(x: Array, axes: tuple[Hashable, ...]) -> Array:
    """`x`, cast to vary over the manual mesh `axes` (those it varies over already kept)."""
    have = varying_axes(x)
    missing = tuple(a for a in axes if a not in have)
    return jax.lax.pcast(x, missing, to="varying") if missing else x
