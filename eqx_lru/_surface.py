"""One-line errors where users call cores, blocks and models: the checks of the arguments
against the method's signature (a positional slip, an unknown keyword, a PRNG key where an
array goes), of an input's shape, width and dtype, and of a stream's carry against
`init_carry()`, run before the type checker of the public methods, so a common mistake (a
keyword given by position, a batch given to a one-example call, a carry from elsewhere)
gets one line naming the method, the argument and the fix instead of jaxtyping's report of
the whole signature or an error from inside JAX or an internal function."""

import difflib
import functools
import inspect
from collections.abc import Callable

import jax
import jax.numpy as jnp


def checks_first(check: Callable[..., None] | None = None) -> Callable[[Callable], Callable]:
    """Decorate a public method so that its arguments are checked before it runs (and
    before its `jaxtyped` type check, which stays as the method's decorator): first against
    the method's own signature (`check_arguments`: a positional slip, an unknown or missing
    argument, a PRNG key where an array goes, each one line naming the method and the
    argument), then by `check(self, *args, **kwargs)` if given."""

    def decorate(method: Callable) -> Callable:
        signature = inspect.signature(method)  # through `jaxtyped`'s `__wrapped__`

        @functools.wraps(method)
        def checked(self, *args, **kwargs):
            check_arguments(self, method.__name__, signature, args, kwargs)
            if check is not None:
                check(self, *args, **kwargs)
            return method(self, *args, **kwargs)

        return checked

    return decorate


_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def check_arguments(
    owner: object, method: str, signature: inspect.Signature, args: tuple, kwargs: dict
) -> None:
    """A `TypeError` of one line naming `owner`'s `method` unless `args` and `kwargs`
    fit its `signature` (whose first parameter is `self`), and naming the argument that
    holds a PRNG key where an array of numbers goes (any argument but `key`)."""
    params = list(signature.parameters.values())[1:]
    positional = [p.name for p in params if p.kind in _POSITIONAL]
    by_name = [p.name for p in params if p.kind == inspect.Parameter.KEYWORD_ONLY]
    where = f"`{type(owner).__name__}.{method}`"
    takes = _takes(positional, by_name)
    variadic = any(
        p.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD) for p in params
    )
    if not variadic:
        if len(args) > len(positional):
            n = len(positional)
            raise TypeError(
                f"{where} takes {n} positional argument{'s' if n != 1 else ''} "
                f"({_names(positional)}) but {len(args)} were given: pass the rest by name "
                f"({', '.join(f'`{k}=`' for k in by_name)})."
            )
        for name in kwargs:
            if name not in positional and name not in by_name:
                close = difflib.get_close_matches(name, positional + by_name, n=1)
                hint = f" (did you mean `{close[0]}`?)" if close else ""
                raise TypeError(f"{where} has no argument `{name}`{hint}: it takes {takes}.")
        for name in positional[: len(args)]:
            if name in kwargs:
                raise TypeError(f"{where} got `{name}` twice, by position and by name.")
        given = set(positional[: len(args)]) | set(kwargs)
        for p in params:
            if p.default is inspect.Parameter.empty and p.name not in given:
                raise TypeError(f"{where} is missing `{p.name}`: it takes {takes}.")
    try:
        bound = signature.bind(owner, *args, **kwargs)
    except TypeError as error:
        raise TypeError(f"{where}: {error}; it takes {takes}.") from None
    for name, value in list(bound.arguments.items())[1:]:
        if name != "key" and _is_prng_key(value):
            hint = "pass a key by name as `key=`" if "key" in by_name else "it takes no key"
            raise TypeError(
                f"`{name}` of {where} is a PRNG key ({value.dtype}), where an array of "
                f"numbers goes: {hint}."
            )


def _names(names: list[str]) -> str:
    return ", ".join(f"`{n}`" for n in names)


def _takes(positional: list[str], by_name: list[str]) -> str:
    keywords = ", ".join(f"`{k}=`" for k in by_name)
    if not by_name:
        return _names(positional)
    return f"{_names(positional)} and, by name, {keywords}" if positional else keywords


def _is_prng_key(x: object) -> bool:
    """Whether `x` is a typed PRNG key array (`jax.random.key`)."""
    dtype = getattr(x, "dtype", None)
    return dtype is not None and jnp.issubdtype(dtype, jax.dtypes.prng_key)


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
