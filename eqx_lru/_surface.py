"""One-line errors where users compose blocks and models: the checks of an input's shape,
width and dtype, and of a stream's carry against `init_carry()`, run before the type
checker of the public methods, so a common mistake (a batch given to a one-example call,
a carry from elsewhere) gets one line naming the argument and the fix instead of
jaxtyping's report of the whole signature or an error from inside JAX."""

import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp


def checks_first(check: Callable[..., None]) -> Callable[[Callable], Callable]:
    """Decorate a public method so that `check(self, *args, **kwargs)` runs before it
    (and before its `jaxtyped` type check, which stays as the method's decorator)."""

    def decorate(method: Callable) -> Callable:
        @functools.wraps(method)
        def checked(self, *args, **kwargs):
            check(self, *args, **kwargs)
            return method(self, *args, **kwargs)

        return checked

    return decorate


def check_features(x, d_model: int, *, name: str, owner: str, position: bool = False) -> None:
    """A `ValueError` unless `x` is one sequence `(length, d_model)` (or, with `position`,
    one position `(d_model,)`) of real floats. Objects that are not arrays are left to the
    type checker."""
    if not (hasattr(x, "shape") and hasattr(x, "dtype")):
        return
    shape = tuple(x.shape)
    expected = f"({d_model},)" if position else f"(length, {d_model})"
    one = "one position" if position else "one sequence"
    ndim = 1 if position else 2
    if len(shape) > ndim and shape[-1] == d_model:
        raise ValueError(
            f"`{name}` has shape {shape}, but {owner} takes {one} of shape {expected}: "
            "batch with `jax.vmap` (one example per call, as in Equinox)."
        )
    if len(shape) >= 1 and shape[-1] != d_model:
        raise ValueError(
            f"`{name}` has {shape[-1]} features (shape {shape}), but {owner}'s d_model is "
            f"{d_model}: give {one} of shape {expected}, or build it with d_model={shape[-1]}."
        )
    if len(shape) != ndim:
        raise ValueError(f"`{name}` must have shape {expected} ({one}); got shape {shape}.")
    if not jnp.issubdtype(x.dtype, jnp.floating):
        raise ValueError(
            f"`{name}` must hold real floats (features); got {x.dtype}. {_dtype_hint(x.dtype)}"
        )


def _dtype_hint(dtype) -> str:
    if jnp.issubdtype(dtype, jnp.complexfloating):
        return (
            "Blocks and cores take real features (the complex LRU's state is internal): "
            "pass the real and imaginary parts as separate features."
        )
    return (
        "Token ids go through a model's embedding (`LRUModel(encoder='embedding')`); cast "
        "features with `x.astype(jnp.float32)`."
    )


def check_carry(carry, init_carry: Callable[[], object], owner: str) -> None:
    """A `ValueError` unless `carry` has the structure, shapes and dtypes of
    `init_carry()` (compared without running it, by `jax.eval_shape`), naming the first
    path that differs."""
    expected = jax.eval_shape(init_carry)
    mismatch = _first_mismatch(carry, expected, "carry")
    if mismatch is None:
        return
    path, want, got = mismatch
    source = (
        f"pass `{owner}.init_carry()` to start a stream, or the carry that this "
        "stream's previous `step`/`chunk` returned"
    )
    if carry is None:
        raise ValueError(f"`carry` is None: {source}.")
    raise ValueError(
        f"`{path}` is {got}, but {owner}.init_carry() has {want} there; {source} "
        "(not another block's or model's)."
    )


def _describe(x) -> str:
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        return f"an array of shape {tuple(x.shape)} and dtype {x.dtype}"
    if isinstance(x, dict):
        return f"a dict with keys {sorted(map(str, x))}"
    if isinstance(x, (tuple, list)):
        return f"a {type(x).__name__} of {len(x)} entries"
    return f"{type(x).__name__} {x!r}" if x is None else type(x).__name__


def _first_mismatch(carry, expected, path: str) -> tuple[str, str, str] | None:
    """`(path, expected, found)` at the first difference between the pytrees `carry` and
    `expected` (of `jax.ShapeDtypeStruct` leaves), in `expected`'s order; `None` if none."""
    if isinstance(expected, dict):
        if not isinstance(carry, dict) or set(carry) != set(expected):
            return path, _describe(expected), _describe(carry)
        pairs = [(f"{path}[{k!r}]", carry[k], expected[k]) for k in expected]
    elif isinstance(expected, (tuple, list)):
        if not isinstance(carry, (tuple, list)) or len(carry) != len(expected):
            return path, _describe(expected), _describe(carry)
        pairs = [
            (f"{path}[{i}]", c, e) for i, (c, e) in enumerate(zip(carry, expected, strict=True))
        ]
    elif isinstance(expected, jax.ShapeDtypeStruct):
        same = hasattr(carry, "shape") and hasattr(carry, "dtype")
        if not same or tuple(carry.shape) != expected.shape or carry.dtype != expected.dtype:
            return path, _describe(expected), _describe(carry)
        return None
    else:  # another pytree node (or None): the same structure, then leaf by leaf
        leaves, treedef = jax.tree_util.tree_flatten(expected)
        if jax.tree_util.tree_structure(carry) != treedef:
            return path, f"a pytree {treedef}", _describe(carry)
        carry_leaves = jax.tree_util.tree_leaves(carry)
        pairs = [
            (f"{path} leaf {i}", c, e)
            for i, (c, e) in enumerate(zip(carry_leaves, leaves, strict=True))
        ]
    for child_path, child, child_expected in pairs:
        mismatch = _first_mismatch(child, child_expected, child_path)
        if mismatch is not None:
            return mismatch
    return None
