"""Conversion between the two forms of the recurrent cores in a pytree."""

from typing import Literal

import jax
from jaxtyping import PyTree

from ._core import AbstractRecurrentCore


def _is_core(x) -> bool:
    return isinstance(x, AbstractRecurrentCore)


def _to_form(tree: PyTree, form: Literal["complex", "real"]) -> PyTree:
    return jax.tree_util.tree_map(
        lambda x: x.to_form(form) if _is_core(x) else x, tree, is_leaf=_is_core
    )


def to_real(tree: PyTree) -> PyTree:
    """`tree` with every recurrent core in its real form (`core.to_form("real")`): a
    `ComplexLRU` becomes `RealLRU.from_complex` of it, `baselines.S4D`/`S5` get
    `form="real"`; cores in real form already are kept.

    Works on any pytree (a layer, `LRUBlock`, `LRUModel`, gradients, …); exact, the
    parameters are shared, so the outputs are equal up to float rounding. A core with one
    form only (the ablation cores, the LDS cores, a core of your own without `to_form`)
    raises a `TypeError` naming it: nothing is converted silently in part.
    """
    return _to_form(tree, "real")


def to_complex(tree: PyTree) -> PyTree:
    """`tree` with every recurrent core in its complex form (`core.to_form("complex")`);
    see `to_real`."""
    return _to_form(tree, "complex")
