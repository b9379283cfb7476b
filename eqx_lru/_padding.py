r"""Padding: which positions of a right-padded sequence are valid, and zeroing the rest.

A sequence of shape `(size, ...)` with `length = ℓ` has valid positions `t < ℓ`; positions
`t >= ℓ` are padding with any content. Every layer of this library keeps padding out of the
values at valid positions (see `LRUBlock`).
"""

import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Bool, Integer

from ._checks import Dim
from ._checks import check_length as check_length_value


def valid_mask(length: Integer[ArrayLike, ""] | None, size: Dim) -> Bool[Array, " size"] | None:
    """`arange(size) < length`, or `None` when `length` is `None` (every position valid).

    `length` is a scalar integer of any integer dtype (signed or unsigned, JAX, NumPy or
    Python). A `length` outside `[1, size]` raises a `ValueError` when it is concrete, and
    at run time via `eqx.error_if` when it is traced (see `_checks.check_length`).
    """
    if length is None:
        return None
    length = check_length_value(length, size, "the padded length")
    return jnp.arange(size, dtype=jnp.int32) < length


def where_valid(mask: Bool[Array, " length"] | None, x: Array) -> Array:
    """`x` with the padded positions (leading axis) set to zero; `x` itself if no mask.

    A select, not a product: garbage such as `nan` in the pads cannot leak into values or
    gradients.
    """
    if mask is None:
        return x
    return jnp.where(mask.reshape(mask.shape + (1,) * (x.ndim - 1)), x, 0)


def check_length(x: Array, name: str) -> None:
    """A `ValueError` naming `name` if the sequence `x` has no position at all."""
    if x.ndim == 0 or x.shape[0] == 0:
        raise ValueError(
            f"`{name}` has length 0 (shape {x.shape}); a sequence needs at least one position."
        )


def segment_index(segment_ids: Integer[Array, " size"]) -> Integer[Array, " size"]:
    """The position's segment, numbered `0, 1, 2, …` in order: a new segment starts at
    position 0 and wherever the id differs from the previous position's (so the ids
    `[7, 7, 3, 7]` are three segments, `[0, 0, 1, 2]`)."""
    starts = jnp.concatenate([jnp.ones(1, bool), segment_ids[1:] != segment_ids[:-1]])
    return jnp.cumsum(starts, dtype=jnp.int32) - 1
