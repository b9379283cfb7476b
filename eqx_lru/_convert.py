"""Conversion between the LRU's two forms, for one layer or every layer in a pytree."""

import jax
from jaxtyping import PyTree

from ._lru import AbstractLRU, ComplexLRU, RealLRU


def _is_lru(x) -> bool:
    return isinstance(x, AbstractLRU)


def to_real(tree: PyTree) -> PyTree:
    """`tree` with every `ComplexLRU` replaced by `RealLRU.from_complex` of it.

    Works on any pytree (a layer, `LRUBlock`, `LRUModel`, gradients, …); exact, the
    parameters are shared, so the outputs are equal up to float rounding.
    """
    return jax.tree_util.tree_map(
        lambda x: RealLRU.from_complex(x) if isinstance(x, ComplexLRU) else x,
        tree,
        is_leaf=_is_lru,
    )


def to_complex(tree: PyTree) -> PyTree:
    """`tree` with every `RealLRU` replaced by `ComplexLRU.from_real` of it (see `to_real`)."""
    return jax.tree_util.tree_map(
        lambda x: ComplexLRU.from_real(x) if isinstance(x, RealLRU) else x,
        tree,
        is_leaf=_is_lru,
    )
