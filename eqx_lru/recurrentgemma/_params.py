"""recurrentgemma's parameter trees: unwrapping, and the checks of every leaf (its path, its
shape, its kind, one floating dtype for the whole tree) before any leaf is used."""

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array

Params = Mapping[str, Any]


def unwrap(params: Params, what: str) -> Params:
    """`params`, or `params["params"]` when the tree is a Flax variables dict, after
    `check_leaves`."""
    if not isinstance(params, Mapping):
        raise TypeError(
            f"{what}: expected recurrentgemma's parameters as nested dicts; got "
            f"{type(params).__name__}."
        )
    if set(params) == {"params"}:
        params = params["params"]
    check_leaves(params)
    return params


def _path(keys) -> str:
    return "/".join(str(getattr(k, "key", getattr(k, "idx", k))) for k in keys)


def check_leaves(params: Params) -> None:
    """A `ValueError` naming the first leaf (by its path "a/b/c") that is not an array of
    floating-point numbers (a string, integers, booleans, `None`), or whose floating dtype
    differs from the first leaf's: recurrentgemma's parameters share one dtype, and a
    converted module holds them in it."""
    flat = jax.tree_util.tree_flatten_with_path(params, is_leaf=lambda x: x is None)[0]
    first: tuple[str, Any] | None = None
    for keys, leaf in flat:
        path = _path(keys)
        dtype = _dtype(leaf)
        if dtype is None or not jnp.issubdtype(dtype, jnp.floating):
            kind = type(leaf).__name__ if dtype is None else str(dtype)
            raise ValueError(
                f"recurrentgemma's `{path}` must be an array of floating-point numbers; got {kind}."
            )
        if first is None:
            first = (path, dtype)
        elif dtype != first[1]:
            raise ValueError(
                f"recurrentgemma's parameters share one floating dtype, but `{path}` is "
                f"{dtype} and `{first[0]}` is {first[1]}; cast the tree first, e.g. "
                f"`jax.tree.map(lambda a: a.astype({first[1]}), params)`."
            )


def _dtype(leaf) -> Any:
    """The NumPy dtype of an array-like leaf, `None` for anything else."""
    if leaf is None or isinstance(leaf, (str, bytes, Mapping)):
        return None
    dtype = getattr(leaf, "dtype", None)
    if dtype is not None:
        return np.dtype(dtype)
    try:
        return np.asarray(leaf).dtype
    except (TypeError, ValueError):
        return None


def leaf(
    params: Params, path: str, shape: tuple[int, ...] | None = None, ndim=None, prefix=""
) -> Array:
    """The array at `path` ("a/b/c"), with a `ValueError` naming the path (after `prefix`,
    where `params` sits in a larger tree) when it is missing, not an array, or (with
    `shape`, or `ndim`) of another shape."""
    node = subtree(params, path, prefix)
    path = prefix + path
    if isinstance(node, Mapping):
        raise ValueError(
            f"recurrentgemma's `{path}` must be an array; got a dict with keys "
            f"{sorted(map(str, node))}."
        )
    array = jnp.asarray(node)
    if shape is not None and array.shape != shape:
        raise ValueError(f"recurrentgemma's `{path}` must have shape {shape}; got {array.shape}.")
    if ndim is not None and array.ndim != ndim:
        raise ValueError(
            f"recurrentgemma's `{path}` must have {ndim} dimension(s); got shape {array.shape}."
        )
    return array


def subtree(params: Params, path: str, prefix: str = "") -> Any:
    """The node at `path`, with a `ValueError` naming what is missing."""
    node: Any = params
    for name in path.split("/"):
        if not isinstance(node, Mapping) or name not in node:
            raise ValueError(
                f"recurrentgemma's parameters have no `{prefix}{path}` (missing `{name}`); "
                "expected the `params` of a recurrent `ResidualBlock` (or of an `RGLRU`)."
            )
        node = node[name]
    return node
