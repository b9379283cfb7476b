r"""Run-time checks of input values that survive `jax.export`.

`eqx.error_if` raises from inside a compiled program through a host callback, which
`jax.export` cannot serialise (and, with symbolic shapes, cannot lower). Every run-time
check of the library (valid lengths, token ids, the number of packed sequences) goes
through `runtime_check` instead: a primitive that is `eqx.error_if(x, pred, message)`
everywhere — eagerly, under `jax.jit`, `eqx.filter_jit`, `jax.vmap`, `jax.grad` — except
when a program is lowered for export (`jax.export.export`, and so `eqx_lru.export`),
where it is the identity $x \mapsto x$: the exported program does not perform the check.
`skipped_checks(jaxpr)` names the checks a traced program holds, which is what its export
does not perform (the export manifest records them).

**Known or traced.** Every value check of the library decides once, by `known(x)` on the
value it reads, whether that value is known while the program is traced — a Python or
NumPy value, a JAX array that is not a tracer (one closed over inside `jit` included) —
and then checks it at once in NumPy (a `ValueError` naming the argument, before any
conversion), or else it is a tracer (under `jit`, `vmap`, `grad`, `checkpoint`, `scan`,
`jax.export`) and the check is a `runtime_check`. Deciding on the input and then
converting a value derived from it with NumPy fails inside `jit`, where every derived
value is a tracer.
"""

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.core
import jax.numpy as jnp
import numpy as np
from jax.extend.core import Primitive, jaxprs_in_params
from jax.interpreters import ad, batching, mlir


def known(x: Any) -> np.ndarray | None:
    """The value of `x` as a NumPy array in its own dtype (a Python int beyond int64 gives
    an `object` array) when it is known while tracing: a Python or NumPy value, or a JAX
    array that is not a tracer (also when closed over inside `jit`). `None` for a tracer,
    or an array whose value this process cannot read (not fully addressable)."""
    if isinstance(x, jax.core.Tracer):
        return None
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
        return None
    try:
        return np.asarray(x)
    except (jax.errors.TracerArrayConversionError, jax.errors.ConcretizationTypeError):
        return None  # a container holding a tracer


_check_p = Primitive("eqx_lru_runtime_check")


def runtime_check(x: Any, pred: Any, message: str, *, check: str) -> Any:
    """`x`, with an error carrying `message` at run time if any element of `pred` holds
    (as `eqx.error_if`); skipped in an exported program. `check` is the check's short name
    (`"length"`, `"token_ids"`, ...), as export manifests list it."""
    return _check_p.bind(x, pred, check=check, message=message)


def _impl(x, pred, *, check, message):
    # Run eagerly (outside `jit`, also under an eager `vmap` or `grad`): the predicate is
    # known, so the error is the one a known value gets, a `ValueError`.
    del check
    if np.any(np.asarray(pred)):
        raise ValueError(message)
    return x


def _abstract_eval(x, pred, *, check, message):
    del pred, check, message
    return x


def _lowering(ctx, x, pred, *, check, message):
    del check
    parameters = getattr(ctx.module_context, "lowering_parameters", None)
    if getattr(parameters, "for_export", False):
        return [x]  # an exported program cannot raise: the check is skipped
    lowered = mlir.lower_fun(lambda x, pred: eqx.error_if(x, pred, message), False)
    # Inside `jax.shard_map` (`check_vma=True`, its default) the operands' types say over
    # which manual axes they vary, and `eqx.error_if`'s `lax.cond` returns its callback's
    # output without them ("cond branches must have equal output types"). The lowered
    # program is per device either way: the check is lowered on the types without them.
    ctx = ctx.replace(
        avals_in=[_invariant(a) for a in ctx.avals_in],
        avals_out=[_invariant(a) for a in ctx.avals_out],
    )
    return lowered(ctx, x, pred)


def _invariant(aval: Any) -> Any:
    """`aval` without the manual mesh axes it varies over (`jax.shard_map`'s types)."""
    mat = getattr(aval, "manual_axis_type", None)
    if mat is not None and getattr(mat, "varying", None):
        return aval.update(manual_axis_type=type(mat)())
    if getattr(aval, "vma", None):  # JAX versions that name the axes `vma`
        return aval.update(vma=frozenset())
    return aval


def _jvp(primals, tangents, **params):
    # The check passes `x` through unchanged: so does its derivative.
    return _check_p.bind(*primals, **params), tangents[0]


def _batch(args, dims, **params):
    # `eqx.error_if` raises if `pred` holds anywhere, batch included: no axis to move.
    return _check_p.bind(*args, **params), dims[0]


_check_p.def_impl(_impl)
_check_p.def_abstract_eval(_abstract_eval)
mlir.register_lowering(_check_p, _lowering)
ad.primitive_jvps[_check_p] = _jvp
batching.primitive_batchers[_check_p] = _batch


def is_runtime_check(eqn) -> bool:
    """Whether the jaxpr equation `eqn` is a `runtime_check` (its output is its first
    input; the predicate is needed only by the check)."""
    return eqn.primitive is _check_p


def skipped_checks(closed: Any) -> list[dict[str, str]]:
    """The run-time checks in the (closed) jaxpr `closed`, sub-jaxprs included, each once:
    `[{"check": name, "message": message}, ...]` in order of appearance. These are the
    checks a `jax.export` of the program does not perform."""
    found: dict[tuple[str, str], None] = {}

    def walk(jaxpr):
        for eqn in jaxpr.eqns:
            if is_runtime_check(eqn):
                found[(eqn.params["check"], eqn.params["message"])] = None
            for sub in jaxprs_in_params(eqn.params):
                walk(sub)

    walk(getattr(closed, "jaxpr", closed))
    return [{"check": name, "message": message} for name, message in found]


def check_values(
    given: Any,
    bad: Callable[[Any, Any], Any],
    message: Callable[[str | None], str],
    *,
    check: str,
    value: Any = None,
    valid: Any = None,
) -> Any:
    """`value` (default `jnp.asarray(given)`), checked: `bad(xp, v)` is true at the invalid
    elements of `v`, written once for both array modules `xp` (`numpy`, `jax.numpy`).

    When `given` (and `valid`) are known (`known`), the check runs now in NumPy on the
    values as given, in their own dtype (before any conversion narrows them): a
    `ValueError` with `message(first)` for the first invalid element (`first` reads
    `"9"`, or `"9 (at 3)"` with its flat index in an array). Otherwise it is a
    `runtime_check` on `value` with `message(None)`. `valid`: only the leading `valid`
    positions (axis 0) are checked (a sequence's length); `None`: all."""
    values, limit = known(given), None if valid is None else known(valid)
    if values is not None and (valid is None or limit is not None):
        flags = np.broadcast_to(np.asarray(bad(np, values)), values.shape)
        if limit is not None:
            flags = flags & _leading(np, values.shape, int(limit))
        if flags.any():
            index = int(np.argmax(flags.reshape(-1)))
            first = f"{values.reshape(-1)[index]}" + (f" (at {index})" if values.ndim else "")
            raise ValueError(message(first))
        return jnp.asarray(given) if value is None else value
    value = jnp.asarray(given) if value is None else value
    flags = bad(jnp, value)
    if valid is not None:
        flags = flags & _leading(jnp, value.shape, jnp.asarray(valid))
    return runtime_check(value, flags, message(None), check=check)


def _leading(xp, shape: tuple, limit) -> Any:
    """`True` at the positions (axis 0) before `limit`, broadcast to `shape`."""
    limit = xp.asarray(limit)
    positions = xp.arange(shape[0], dtype=limit.dtype)  # one dtype: strict promotion holds
    return (positions < limit).reshape((shape[0],) + (1,) * (len(shape) - 1))


def check_range(given: Any, low: int, high: Any, message: str, *, check: str) -> Any:
    """A scalar integer `given` (its dtype checked by the caller) as int32, with a check
    that `low <= given <= high` (`high` may be a symbolic dimension, then checked at run
    time only): `message` is said with `; got {value}.` appended when `given` is known
    (compared as given, so 2**40 is out of range, never wrapped), and as is at run time."""
    values = known(given)
    if values is not None:
        bound = high if isinstance(high, int) else np.iinfo(np.int32).max
        if not low <= int(values) <= bound:
            raise ValueError(f"{message.rstrip('.')}; got {int(values)}.")
        if isinstance(high, int):
            return jnp.asarray(int(values), jnp.int32)
    given = jnp.asarray(given)
    # Compared in the caller's dtype when at least 32 bits wide (an int64 or uint32 value
    # beyond int32 would wrap into range on the cast), in int32 otherwise.
    wide = given if given.dtype.itemsize >= 4 else given.astype(jnp.int32)
    bad = (wide < low) | (wide > high)
    return runtime_check(given.astype(jnp.int32), bad, message, check=check)


def check_integers(given: Any, name: str) -> jax.Array:
    """`jnp.asarray(given)`, or a `ValueError` naming `name` when `given` is a known integer
    value that the conversion would change: beyond JAX's integer type (int32 unless 64-bit
    mode is on), where it would wrap silently."""
    values = known(given)
    if values is None or not _integer(values):
        return jnp.asarray(given)
    target = jax.dtypes.canonicalize_dtype(values.dtype if values.dtype != object else np.int64)
    info = np.iinfo(target)
    outside = (values < info.min) | (values > info.max)
    if np.any(outside):
        first = values.reshape(-1)[np.argmax(np.reshape(outside, -1))]
        raise ValueError(
            f"`{name}` holds {first}, outside {target.name} [{info.min}, {info.max}]: JAX's "
            f"integers are {target.name} here, and the value would wrap. Use values within "
            "that range (or turn on 64-bit mode: `jax.config.update('jax_enable_x64', True)`)."
        )
    return jnp.asarray(values.astype(target) if values.dtype == object else given)


def _integer(values: np.ndarray) -> bool:
    """Whether a known value holds integers (a Python int beyond int64 is an `object`)."""
    if values.dtype == object:
        return all(isinstance(v, int) and not isinstance(v, bool) for v in values.reshape(-1))
    return bool(np.issubdtype(values.dtype, np.integer))
