r"""Blocks and models over a sequence split across devices.

A model whose recurrent cores scan with `eqx_lru.SequenceParallel(axis_name)` runs inside
`jax.shard_map` on one chunk of each sequence per device (device $d$ of the mesh axis holds
positions $[d\ell, (d + 1)\ell)$). Everything per position (encoder, projections, GELU,
GLU, layer norm, head) is local; what looks along the sequence goes through this module:

- `valid_mask`: `length=` counts positions of the whole sequence, so the mask of a chunk
    compares global positions $d\ell + t$ with it;
- batch-norm statistics are sums over the batch *and* the sequence, so a
    `MaskedBatchNorm` also reduces over the sequence axis (`with_sequence_axis`, beside
    the norm in the blocks' folder);
- `pool`: the mean over valid positions is a `psum` of the chunks' sums, the last valid
    position is read on the device holding it and broadcast with a `psum`;
- `final_state`: a core's state after the last valid position of the whole sequence is
    read on the device holding it and broadcast with a `psum`;
- `chunk_key`: dropout draws each chunk's mask from the example's key folded with the
    chunk's index, so chunks get independent masks (not the masks of the same sequence
    on one device: a sequence-parallel run with dropout follows another random stream).

The sequence axis of a model is found from its cores (`sequence_axis`): one declaration,
the scan method, marks the whole model as sequence-parallel.
"""

import dataclasses
from collections.abc import Hashable

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array

from .. import _padding
from .._checks import Dim, check_length
from ._sequence_parallel import SequenceParallel, axis_size


def sequence_axis(tree) -> Hashable | None:
    """The mesh axis of the `SequenceParallel` scan methods in `tree` (e.g. a model's
    cores), or `None` if it has none. Raises a `ValueError` if they name several axes, and
    a `NameError` if no enclosing `jax.shard_map` binds the axis (checked at trace time,
    before any collective meets it)."""
    axis = declared_axis(tree)
    if axis is not None:
        axis_size(axis)  # a `NameError` in our words if no `shard_map` binds it
    return axis


def declared_axis(tree) -> Hashable | None:
    """The mesh axis the `SequenceParallel` methods in `tree` name, or `None`, without
    checking that it is bound (`sequence_axis` checks)."""
    names: set = set()
    _collect(tree, names, set())
    if len(names) > 1:
        raise ValueError(
            "The recurrent cores of one model must split the sequence over one mesh axis; "
            f"their SequenceParallel methods name {sorted(map(str, names))}."
        )
    return next(iter(names), None)


def refuse(tree, what: str) -> None:
    """A `ValueError` naming `what` (a call that does not split over devices yet) if the
    cores of `tree` scan with `SequenceParallel`."""
    axis = declared_axis(tree)
    if axis is None:
        return
    raise ValueError(
        f"{what} does not run over a sequence split across devices: its cores scan with "
        f"SequenceParallel({axis!r}). Use a copy of the model whose cores scan on one "
        "device (built with method='auto', say), sharing the parameters: "
        "`eqx.combine(eqx.filter(model, eqx.is_array), eqx.filter(local, eqx.is_array, "
        "inverse=True))`."
    )


def _collect(x, names: set, seen: set) -> None:
    if isinstance(x, SequenceParallel):
        names.add(x.axis_name)
    elif isinstance(x, eqx.Module):
        if id(x) in seen:
            return
        seen.add(id(x))
        for field in dataclasses.fields(x):
            _collect(getattr(x, field.name, None), names, seen)
    elif isinstance(x, tuple | list):
        for y in x:
            _collect(y, names, seen)
    elif isinstance(x, dict):
        for y in x.values():
            _collect(y, names, seen)


def _offset(axis: Hashable, size: Dim) -> Array:
    return jax.lax.axis_index(axis).astype(jnp.int32) * size


def valid_mask(length, size: Dim, axis: Hashable | None) -> Array | None:
    """`_padding.valid_mask` of this device's chunk of `size` positions: `True` where the
    global position is below `length` (a length of the whole sequence)."""
    if axis is None or length is None:
        return _padding.valid_mask(length, size)
    total = size * jax.lax.axis_size(axis)
    length = check_length(length, total, "the padded length of the whole sequence")
    return _offset(axis, size) + jnp.arange(size, dtype=jnp.int32) < length


def pool(h: Array, mask: Array | None, length, pooling: str, axis: Hashable | None) -> Array:
    """The mean over valid positions (`"mean"`) or the last valid position (`"last"`) of
    the whole sequence, from this device's chunk `h` (zero at padded positions)."""
    size = h.shape[0]
    if axis is None:  # one device: exactly the model's own pooling
        if pooling == "mean":
            if length is None:
                return jnp.mean(h, axis=0)
            return jnp.sum(_padding.where_valid(mask, h), axis=0) / jnp.asarray(length, h.dtype)
        return h[-1] if length is None else h[jnp.asarray(length).astype(jnp.int32) - 1]
    total_size = size * jax.lax.axis_size(axis)
    if pooling == "mean":
        total = jax.lax.psum(jnp.sum(_padding.where_valid(mask, h), axis=0), axis)
        return total / jnp.asarray(total_size if length is None else length, h.dtype)
    last = total_size - 1 if length is None else jnp.asarray(length).astype(jnp.int32) - 1
    return at_position(h, last, axis)


def at_position(x: Array, index, axis: Hashable) -> Array:
    """`x[index]` of the whole sequence (`x` is this device's chunk, `index` a global
    position), on every device: read on the device holding it, broadcast with a `psum`."""
    size = x.shape[0]
    local = index - _offset(axis, size)
    here = (local >= 0) & (local < size)
    value = jnp.where(here, x[jnp.clip(local, 0, size - 1)], jnp.zeros((), x.dtype))
    return jax.lax.psum(value, axis)


def final_state(states, *, reverse: bool, length, axis: Hashable | None):
    """A core's state after its last valid position (forward: `length - 1`, the last
    position if `None`; reverse: position 0) from `states`, a pytree of arrays whose leading
    axis is this device's chunk of the sequence, on every device: one `psum` per leaf."""
    size = jax.tree_util.tree_leaves(states)[0].shape[0]
    total = size * jax.lax.axis_size(axis)
    if reverse:
        index = jnp.zeros((), jnp.int32)
    elif length is None:
        index = jnp.asarray(total - 1, jnp.int32)
    else:
        index = check_length(length, total, "the padded length of the whole sequence") - 1
    return jax.tree_util.tree_map(lambda x: at_position(x, index, axis), states)


def chunk_key(key, axis: Hashable | None):
    """`key` folded with this device's chunk index (`key` itself on one device)."""
    if key is None or axis is None:
        return key
    return jax.random.fold_in(key, jax.lax.axis_index(axis))
