"""Argument checks shared by every layer of the library, so that one mistake gets one message
wherever it is made: each raises at construction (or at the call, for inputs), names the
argument, and says how to fix it."""

import math
import os
from typing import TYPE_CHECKING, Any, Literal

import jax
import jax.core
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array

from ._runtime_check import check_integers, check_range, check_values, known

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


def check_size(name: str, value: object, meaning: str | None = None) -> int:
    """`value` as an `int`; a `ValueError` naming `name` (and its `meaning` for the caller,
    e.g. `"ComplexLRU: the complex modes N"` for a `d_state`) unless it is a positive
    integer (Python or NumPy; `bool` is not a size)."""
    what = "" if meaning is None else f" ({meaning})"
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"`{name}` must be a positive integer{what}, got {value!r}.")
    if value <= 0:
        raise ValueError(f"`{name}` must be a positive integer{what}, got {value!r}.")
    return int(value)


def device_memory() -> tuple[int, str]:
    """`(bytes, where)`: the memory of JAX's default device (an accelerator's limit, the
    host's physical memory for the CPU; 2**63 - 1 if neither is known). The default device
    is this process's first: in a multi-process run `jax.devices()[0]` may be another
    process's, whose memory cannot be read from here."""
    device = jax.local_devices()[0]
    stats = device.memory_stats() if hasattr(device, "memory_stats") else None
    if stats and stats.get("bytes_limit"):
        return int(stats["bytes_limit"]), f"the {device.platform} device"
    if device.platform == "cpu" and hasattr(os, "sysconf"):
        try:
            return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"), "this host"
        except (ValueError, OSError):
            pass
    return 2**63 - 1, "an int64 byte count"


def check_fits(owner: str, dtype, elements: int) -> None:
    """A `ValueError` naming `owner` if `elements` numbers of `dtype` (its parameters) need
    more bytes than the default device has (`device_memory`): refused before anything is
    allocated (XLA would abort the process, or fail at the first read)."""
    dtype = jnp.dtype(dtype)
    needed = elements * dtype.itemsize
    limit, where = device_memory()
    if needed > limit:
        raise ValueError(
            f"{owner} would hold {elements:.4g} {dtype.name} parameters ({needed / 2**30:.4g} "
            f"GiB), more than the {limit / 2**30:.4g} GiB of {where}: choose smaller sizes."
        )


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


def check_float(
    name: str,
    value: Any,
    *,
    low: int | float | None = None,
    high: int | float | None = None,
    low_open: bool = False,
    high_open: bool = False,
    dtype=None,
    owner: str = "",
) -> float:
    """`value` as a `float`, or an error naming `name`: a `TypeError` unless a real number,
    a `ValueError` unless finite, within `[low, high]` (an end open where `low_open` /
    `high_open`), and representable once used as a `dtype` number (default JAX's float):
    neither beyond its largest finite value (overflow to infinity) nor, when nonzero,
    below its smallest normal one (a subnormal or zero). `owner` prefixes the message."""
    number = _check_number(name, value)
    where = f"{owner}: " if owner else ""
    lo = "" if low is None else ("(" if low_open else "[") + f"{low:g}"
    hi = "" if high is None else f"{high:g}" + (")" if high_open else "]")
    span = f" in {lo or '(-inf'}, {hi or 'inf)'}" if lo or hi else ""
    if not math.isfinite(number):
        raise ValueError(f"{where}`{name}` must be a finite number{span}, got {value!r}.")
    if (low is not None and (number < low or (low_open and number == low))) or (
        high is not None and (number > high or (high_open and number == high))
    ):
        raise ValueError(f"{where}`{name}` must be{span}, got {value!r}.")
    info = jnp.finfo(float_dtype(dtype))
    if abs(number) > float(info.max) or 0 < abs(number) < float(info.tiny):
        raise ValueError(
            f"{where}`{name}`={value!r} is not a normal {info.dtype.name} number "
            f"(magnitudes from {float(info.tiny):.3g} to {float(info.max):.3g}): it would "
            f"{'overflow to infinity' if abs(number) > 1 else 'underflow'} once used. Use "
            "a value within that range."
        )
    return number


def check_ring(r_min: float, r_max: float, max_phase: float, dtype=None) -> None:
    """Raise a `ValueError` naming the argument unless the ring hyperparameters give a
    finite initialisation in `dtype` (default JAX's float): `0 <= r_min <= r_max <= 1`,
    `r_max**2` representable (not underflowing to zero), `0 < max_phase` finite in
    `dtype` (and not underflowing to zero either)."""
    r_min, r_max, max_phase = (
        _check_number(name, value)
        for name, value in (("r_min", r_min), ("r_max", r_max), ("max_phase", max_phase))
    )
    for name, value in (("r_min", r_min), ("r_max", r_max), ("max_phase", max_phase)):
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
    info = jnp.finfo(float_dtype(dtype))
    # |λ|² is sampled in [r_min², r_max²] and ν = -½ log |λ|²: a zero |λ|² is ν = +inf.
    smallest = math.sqrt(float(info.tiny))
    if r_max < smallest:
        raise ValueError(
            f"`r_max` must be at least {smallest:.3g}: the initialisation samples |λ|² in "
            f"[r_min², r_max²], and r_max={r_max} squared underflows to zero in "
            f"{info.dtype.name} (log|λ| = -inf). Use r_max >= {smallest:.3g} (λ = 0 has no "
            "log-parameterisation)."
        )
    if not float(info.tiny) <= max_phase <= float(info.max):
        raise ValueError(
            f"`max_phase` must be between {float(info.tiny):.3g} and {float(info.max):.3g} "
            f"to be a finite positive {info.dtype.name} (θ_log = log θ); got {max_phase}."
        )


def check_steps(dt_min: float, dt_max: float, dtype=None) -> None:
    """A `ValueError` naming `dt_min`/`dt_max` unless `0 < dt_min <= dt_max`, both finite
    normal numbers of `dtype` (default JAX's float; the steps are sampled in it)."""
    for name, value in (("dt_min", dt_min), ("dt_max", dt_max)):
        check_float(name, value, low=0, low_open=True, dtype=dtype)
    if dt_min > dt_max:
        raise ValueError(f"`dt_min` must be <= `dt_max`, got {dt_min} > {dt_max}.")


def as_dtype(dtype, name: str = "dtype") -> jnp.dtype:
    """`dtype` (a dtype object, a scalar type such as `jnp.float32`, or a name such as
    `"float32"`) as a `jnp.dtype`; a `TypeError` naming `name` otherwise."""
    try:
        return jnp.dtype(dtype)
    except (TypeError, ValueError):
        raise TypeError(
            f"`{name}` must be a dtype such as jnp.float32 or 'float32', got {dtype!r}."
        ) from None


def float_dtype(dtype, name: str = "dtype") -> jnp.dtype:
    """The floating dtype to initialise in: `dtype`, or JAX's default float if `None`."""
    dtype = as_dtype(dtype, name) if dtype is not None else jnp.zeros(()).dtype
    if not jnp.issubdtype(dtype, jnp.floating):
        raise ValueError(
            f"`{name}` must be a real floating dtype (parameters are stored real), got {dtype}."
        )
    if dtype.itemsize == 8 and jnp.asarray(0.0).dtype.itemsize < 8:  # 64-bit mode is off
        raise ValueError(
            f"`{name}={dtype.name}` needs 64-bit mode, which is off (JAX would store "
            "float32): call `jax.config.update('jax_enable_x64', True)` first, or use float32."
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
    check_real_input(u.dtype, dtype, name)


def check_real_input(dtype, expected, name: str) -> None:
    """A `ValueError` naming `name` unless its `dtype` is real floating (and `expected`,
    the parameters' dtype, if given): a core maps real inputs to real outputs."""
    if not jnp.issubdtype(dtype, jnp.floating):
        hint = (
            f" Pass `{name}.real`, or the real and imaginary parts as separate features."
            if jnp.issubdtype(dtype, jnp.complexfloating)
            else " Cast it with `.astype(jnp.float32)`, or embed tokens first (LRUModel)."
        )
        raise ValueError(
            f"`{name}` must be a real floating array (a core maps real inputs to real "
            f"outputs); got {jnp.dtype(dtype).name}.{hint}"
        )
    if expected is not None and dtype != expected:
        raise ValueError(
            f"`{name}` must have the parameters' dtype {expected}; got {dtype}. Cast the "
            "input (or build the core with `dtype=`)."
        )


def check_not_complex(u, name: str = "u") -> None:
    """`check_real_input`'s error if the array `u` holds complex numbers (a core's input
    is real; integer inputs meet the same check once the call knows its dtype)."""
    if hasattr(u, "dtype") and jnp.issubdtype(u.dtype, jnp.complexfloating):
        check_real_input(u.dtype, None, name)


def check_token(u_t: Array, d_model: int, dtype=None, name: str = "u_t") -> None:
    """A `ValueError` naming `name` unless it is one position `(d_model,)` (of `dtype`)."""
    if u_t.shape != (d_model,):
        raise ValueError(
            f"`{name}` must have shape (d_model,) with d_model={d_model}; got shape "
            f"{u_t.shape}. Batch with `jax.vmap`: `step` takes one position of one sequence."
        )
    check_real_input(u_t.dtype, dtype, name)


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
    """`segment_ids` as an integer array of shape `(length,)`, or `None`; known ids beyond
    JAX's integer type (which would wrap, merging sequences) are a `ValueError`."""
    if segment_ids is None:
        return None
    shape, dtype = shape_and_dtype(segment_ids)
    if shape != (length,) or not _integer_dtype(dtype):
        raise ValueError(
            f"`segment_ids` must be integers of shape ({length},), one per position; got "
            f"{dtype} of shape {shape}."
        )
    return check_integers(segment_ids, "segment_ids")


def check_length(length, size: Dim, what: str = "") -> Array:
    """`length` (the number of valid leading positions of a sequence of `size`) as an int32
    scalar; a `ValueError` naming `length` unless it is a scalar integer with
    `1 <= length <= size`: at once when `length` is known (a Python, NumPy or JAX value,
    also one closed over inside `jit` or `jax.shard_map`; compared as given, never wrapped
    into int32), else a run-time error (`runtime_check`: as `eqx.error_if`, skipped in an
    exported program). `what` describes `size` in the message ("the padded length")."""
    check_integer_scalar(
        length,
        "`length` must be a scalar integer (the number of valid leading positions of one "
        "sequence; batch it with `jax.vmap`)",
    )
    bound = f"{what} {size}".strip()
    return check_range(length, 1, size, f"`length` must be between 1 and {bound}.", check="length")


def check_integer_scalar(given, message: str) -> None:
    """A `ValueError` with `message` (and what `given` is) unless `given` is one integer
    (Python, NumPy or JAX; not a bool)."""
    shape, dtype = shape_and_dtype(given)
    if shape != () or not _integer_dtype(dtype):
        raise ValueError(f"{message}; got {dtype} of shape {shape}.")


def shape_and_dtype(given) -> tuple[tuple, Any]:
    """The shape and dtype of `given` as JAX would see it, without converting it (a known
    Python int beyond int64 has NumPy's `object` dtype, shown as `int`)."""
    values = known(given)
    if values is None:
        return tuple(given.shape), given.dtype
    if (
        values.dtype == object
        and values.size
        and all(isinstance(v, int) and not isinstance(v, bool) for v in values.reshape(-1))
    ):
        return values.shape, np.dtype(int)
    return values.shape, values.dtype


def _integer_dtype(dtype) -> bool:
    return dtype != np.dtype(object) and bool(jnp.issubdtype(dtype, jnp.integer))


def check_token_ids(x, vocab_size: int, *, valid=None, value=None):
    """`value` (default `x` as an array), with an error if a token id of `x` at a valid
    position (before `valid`, a length; all if `None`) is outside `[0, vocab_size)`: a
    `ValueError` naming the first bad id when `x` is known (compared as given: an int64 id
    beyond int32 is refused, never wrapped), a run-time error otherwise (`runtime_check`:
    an exported program does not check it). See `_runtime_check.check_values`."""

    def message(first: str | None) -> str:
        return (
            f"Token ids must be in [0, {vocab_size}) — `in_size`, the vocabulary size of the "
            "embedding (JAX would silently clamp them); got "
            + ("an id out of that range" if first is None else f"id {first}")
            + ". Positions at or after `length` are not checked."
        )

    def bad(xp, ids):
        return (ids < 0) | (ids >= vocab_size)

    return check_values(x, bad, message, check="token_ids", value=value, valid=valid)


def check_num_segments(segment_ids, length, num_segments: int) -> None:
    """A `ValueError` when known `segment_ids` (and `length`) hold more packed sequences
    over the valid positions than `num_segments` (traced ones are checked at run time where
    the sequences are pooled)."""
    ids, limit = known(segment_ids), None if length is None else known(length)
    if ids is None or ids.ndim != 1 or (length is not None and limit is None):
        return
    ids = ids[: ids.shape[0] if limit is None else max(int(limit), 0)]
    found = int(ids.size > 0) + int(np.count_nonzero(ids[1:] != ids[:-1]))
    if found > num_segments:
        raise ValueError(num_segments_message(num_segments) + f" Got {found} sequences.")


def num_segments_message(num_segments: int) -> str:
    return (
        f"`segment_ids` holds more packed sequences than `num_segments={num_segments}`: "
        "raise `num_segments` (the number of pooled outputs)."
    )
