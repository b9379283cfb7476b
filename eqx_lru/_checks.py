"""Argument checks shared by every layer of the library, so that one mistake gets one message
wherever it is made: each raises at construction (or at the call, for inputs), names the
argument, and says how to fix it."""

import math
from typing import TYPE_CHECKING, Any, Literal

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array

#: A size argument: a Python or NumPy integer.
Size = int | np.integer

#: A dimension read off a traced array's shape: an `int`, or, under `jax.export` with
#: symbolic shapes, a symbolic dimension. JAX does not export that class (it is the private
#: `jax._src.export.shape_poly._DimExpr` in JAX 0.10 and 0.12), so its type is taken once
#: from the public `jax.export.symbolic_shape`. For the type checker, which cannot evaluate
#: a call in a type, a dimension is an `int`, as JAX's own `Array.shape` types it.
if TYPE_CHECKING:
    Dim = int
else:
    Dim = int | type(jax.export.symbolic_shape("d")[0])

#: The forms a core may have: complex states, or the same recurrence in real arithmetic.
Form = Literal["complex", "real"]
FORMS: tuple[Form, ...] = ("complex", "real")


def check_size(name: str, value: object) -> int:
    """`value` as an `int`; a `ValueError` naming `name` unless it is a positive integer
    (Python or NumPy; `bool` is not a size)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"`{name}` must be a positive integer, got {value!r}.")
    if value <= 0:
        raise ValueError(f"`{name}` must be a positive integer, got {value!r}.")
    return int(value)


def check_key(key) -> None:
    """A `TypeError` naming `key` unless it is a JAX PRNG key (typed, or raw `uint32`)."""
    if isinstance(key, jax.Array):
        if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
            return
        if key.dtype == jnp.uint32 and key.ndim >= 1 and key.shape[-1] in (2, 4):
            return
    raise TypeError(
        "`key` must be a JAX PRNG key such as `jax.random.key(0)` or "
        f"`jax.random.PRNGKey(0)`; got {key!r}."
    )


def _check_number(name: str, value: Any) -> float:
    """`value` as a `float`; a `TypeError` naming `name` unless it is a real number."""
    if isinstance(value, (bool, np.bool_, str, complex)):
        raise TypeError(f"`{name}` must be a real number, got {value!r}.")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise TypeError(f"`{name}` must be a real number, got {value!r}.") from None


def check_ring(r_min: float, r_max: float, max_phase: float) -> None:
    """Raise a `ValueError` naming the argument if the ring hyperparameters are invalid."""
    for name, value in (("r_min", r_min), ("r_max", r_max), ("max_phase", max_phase)):
        value = _check_number(name, value)
        if not math.isfinite(value):
            raise ValueError(f"`{name}` must be a finite number, got {value}.")
    if r_min < 0:
        raise ValueError(f"`r_min` must be >= 0 (a modulus), got r_min={r_min}.")
    if r_max > 1:
        raise ValueError(f"`r_max` must be <= 1 so the recurrence is stable, got r_max={r_max}.")
    if r_min > r_max:
        raise ValueError(f"`r_min` must be <= `r_max`, got r_min={r_min} > r_max={r_max}.")
    if max_phase <= 0:
        raise ValueError(
            f"`max_phase` must be > 0 (phases are sampled in [0, max_phase]), got "
            f"max_phase={max_phase}."
        )


def check_steps(dt_min: float, dt_max: float) -> None:
    """A `ValueError` naming `dt_min`/`dt_max` unless `0 < dt_min <= dt_max` (finite)."""
    for name, value in (("dt_min", dt_min), ("dt_max", dt_max)):
        value = _check_number(name, value)
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"`{name}` must be a finite step size > 0, got {value}.")
    if dt_min > dt_max:
        raise ValueError(f"`dt_min` must be <= `dt_max`, got {dt_min} > {dt_max}.")


def _as_dtype(dtype, name: str) -> jnp.dtype:
    try:
        return jnp.dtype(dtype)
    except TypeError:
        raise TypeError(f"`{name}` must be a dtype such as jnp.float32, got {dtype!r}.") from None


def float_dtype(dtype, name: str = "dtype") -> jnp.dtype:
    """The floating dtype to initialise in: `dtype`, or JAX's default float if `None`."""
    dtype = _as_dtype(dtype, name) if dtype is not None else jnp.zeros(()).dtype
    if not jnp.issubdtype(dtype, jnp.floating):
        raise ValueError(
            f"`{name}` must be a real floating dtype (parameters are stored real), got {dtype}."
        )
    return dtype


def complex_float_dtype(dtype, core: str, real_form: str) -> jnp.dtype:
    """`float_dtype(dtype)` for a core that computes with complex numbers: a `ValueError`
    for a 16-bit dtype, which has no complex type (JAX would fail at the first call),
    naming the real-arithmetic form `real_form` that runs the same function."""
    dtype = float_dtype(dtype)
    if dtype.itemsize < 4:
        raise ValueError(
            f"{core} computes with complex numbers, and `dtype={dtype.name}` has no complex "
            f"type (complex64 is the smallest). Use {real_form}, the same function in real "
            "arithmetic, or a float32/float64 `dtype`."
        )
    return dtype


def complex_dtype(real_dtype) -> jnp.dtype:
    """complex128 for float64 parameters, complex64 otherwise."""
    return jnp.dtype(jnp.complex128 if real_dtype == jnp.float64 else jnp.complex64)


def check_form(form: object) -> Form:
    """`form` if it is `"complex"` or `"real"`, else a `ValueError` naming `form`."""
    if form not in FORMS:
        raise ValueError(
            "`form` must be 'complex' (complex states) or 'real' (the same recurrence as 2x2 "
            f"rotation-scaling blocks, real arithmetic only); got {form!r}."
        )
    return form


def check_choice(name: str, value: object, choices: tuple) -> None:
    """A `ValueError` naming `name` unless `value` is one of `choices`."""
    if value not in choices:
        raise ValueError(f"`{name}` must be one of {choices}, got {value!r}.")


def check_sequence(u: Array, d_model: int, dtype=None, name: str = "u") -> None:
    """A `ValueError` naming `name` unless it is one sequence `(length >= 1, d_model)` (of
    `dtype`, if given)."""
    if u.ndim == 2 and u.shape[1] == d_model and u.shape[0] == 0:
        raise ValueError(
            f"`{name}` has length 0; a sequence needs at least one position (shape "
            "(length, d_model) with length >= 1)."
        )
    if u.ndim != 2 or u.shape[1] != d_model:
        raise ValueError(
            f"`{name}` must have shape (length, d_model) with d_model={d_model} (length "
            f">= 1); got shape {u.shape}. Batch with `jax.vmap`: a core acts on "
            "one sequence."
        )
    check_not_complex(u, name)
    if dtype is not None and u.dtype != dtype:
        raise ValueError(
            f"`{name}` must have the parameters' dtype {dtype}; got {u.dtype}. Cast the "
            "input (or build the core with `dtype=`)."
        )


def check_not_complex(u, name: str = "u") -> None:
    """A `ValueError` naming `name` if the array `u` holds complex numbers (a core's input
    is real)."""
    if hasattr(u, "dtype") and jnp.issubdtype(u.dtype, jnp.complexfloating):
        raise ValueError(
            f"`{name}` must hold real numbers; got {u.dtype}. A core's input is real (the "
            "complex LRU's states are internal): pass the real and imaginary parts as "
            "separate features."
        )


def check_token(u_t: Array, d_model: int, dtype=None, name: str = "u_t") -> None:
    """A `ValueError` naming `name` unless it is one position `(d_model,)` (of `dtype`)."""
    if u_t.shape != (d_model,):
        raise ValueError(
            f"`{name}` must have shape (d_model,) with d_model={d_model}; got shape "
            f"{u_t.shape}. Batch with `jax.vmap`: `step` takes one position of one sequence."
        )
    if dtype is not None and u_t.dtype != dtype:
        raise ValueError(
            f"`{name}` must have the parameters' dtype {dtype}; got {u_t.dtype}. Cast the "
            "input (or build the core with `dtype=`)."
        )


def check_state(state, expected, core: str, hint: str = "") -> None:
    """A `ValueError` unless `state` has the shape and dtype of `expected` (the core's
    `init_state()`); `hint` is appended (e.g. a layout note)."""
    if state.shape != expected.shape or state.dtype != expected.dtype:
        raise ValueError(
            f"`initial_state`/`state` must have shape {expected.shape} and dtype "
            f"{expected.dtype} for {core} (see `init_state()`); got shape {state.shape}, "
            f"dtype {state.dtype}.{hint}"
        )


def check_segment_ids(segment_ids, length: Dim):
    """`segment_ids` as an integer array of shape `(length,)`, or `None`."""
    if segment_ids is None:
        return None
    segment_ids = jnp.asarray(segment_ids)
    if segment_ids.shape != (length,) or not jnp.issubdtype(segment_ids.dtype, jnp.integer):
        raise ValueError(
            f"`segment_ids` must be integers of shape ({length},), one per position; got "
            f"{segment_ids.dtype} of shape {segment_ids.shape}."
        )
    return segment_ids


def check_length(length, size: Dim) -> Array:
    """`length` (the number of valid leading positions of a sequence of `size`) as an int32
    scalar; a `ValueError` naming `length` unless it is a scalar integer, and inside `jit` an
    `eqx.error_if` unless `1 <= length <= size`."""
    length = jnp.asarray(length)
    if length.shape != () or not jnp.issubdtype(length.dtype, jnp.integer):
        raise ValueError(
            "`length` must be a scalar integer (the number of valid leading positions); got "
            f"{length.dtype} of shape {length.shape}."
        )
    length = length.astype(jnp.int32)
    return eqx.error_if(
        length, (length < 1) | (length > size), f"`length` must be between 1 and {size}."
    )
