r"""Irregular time steps: the `dt=` argument of the cores that take it.

A core with `takes_dt = True` (`ComplexLRU`, `RealLRU`, `RGLRU`, `baselines.S5`) accepts
`dt=` in `run`, `__call__` and `step`: the time $\Delta t_k > 0$ elapsed between the
position processed just before position $k$ and position $k$. A mode whose one-step
transition is $\lambda = e^{\mu}$ ($\mu = \log|\lambda| + i\theta$) moves by
$\lambda^{\Delta t} = e^{\mu \Delta t} = |\lambda|^{\Delta t} e^{i\theta\Delta t}$ over
$\Delta t$: a scaling by $|\lambda|^{\Delta t}$ and a rotation by $\theta\Delta t$.
$\Delta t \equiv 1$ is the core without `dt`.

What an input weighs at a step other than 1 is the core's `discretization`
(`eqx_lru._cores._discretization`).

**Direction.** `dt[k]` is the gap in the order of processing: forward,
$t_k - t_{k-1}$; reverse (`reverse=True`), $t_{k+1} - t_k$. `dt` at the first position
processed is the gap since `initial_state`. From the zero state it acts only through the
input's weight: no effect for the LRU under `"impulse"` (and the RG-LRU under
`"impulse"`); an effect for the LRU under `"zoh"`, the RG-LRU under `"zoh"` and
`"variance_preserving"` (its default), and S5. A bidirectional block gives its reverse
core `reverse_steps(dt, ...)`: the gap after each position, and at the end of each run
(the last valid position, a packed segment's last) the position's own step.
"""

from collections.abc import Hashable

import jax
import jax.core
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Float

from .._checks import Dim
from .._runtime_check import known, runtime_check


def check_dt(dt: ArrayLike, length: Dim | None, dtype) -> Float[Array, "*length"]:
    """`dt` as an array of the parameters' real floating `dtype`: shape `(length,)` (one
    step per position) or `()` (one step for every position); `length=None` (for `step`)
    accepts `()` only. Shape and dtype errors are `ValueError`s naming `dt`. Each step must
    be positive and finite in `dtype`: at least its smallest normal number (float32:
    1.2e-38; a smaller step underflows, XLA flushes it to zero) and at most its largest. A
    known `dt` (Python, NumPy, a JAX array, one closed over inside `jit`) is checked at
    once on its values as given, a `ValueError` that names the value and says whether it
    underflows or overflows `dtype`; a traced one at run time (`runtime_check`: an
    exported program skips it)."""
    values = known(dt)
    if values is not None:
        shape, kind = values.shape, values.dtype
    else:
        traced = jnp.asarray(dt)  # a tracer: itself
        shape, kind = traced.shape, traced.dtype
    shapes = "()" if length is None else f"({length},) (one per position) or ()"
    if shape not in ((), (length,)) or (length is None and shape != ()):
        raise ValueError(
            f"`dt` must have shape {shapes}: the time step of each position; got shape "
            f"{shape}."
            + (" `step` takes one position: pass that position's step." if length is None else "")
        )
    if kind == np.dtype(object) or not jnp.issubdtype(kind, jnp.floating):
        raise ValueError(
            f"`dt` must be real floating time steps (e.g. float32), got dtype {kind}. "
            "Cast it with `.astype(jnp.float32)`."
        )
    dtype = jnp.dtype(dtype)
    info = jnp.finfo(dtype)
    if values is not None:
        check_known_steps(values, dtype)
        if isinstance(dt, jax.Array):
            return dt.astype(dtype)
        return jnp.asarray(values.astype(dtype))
    dt = jnp.asarray(dt).astype(dtype)
    bad = ~(jnp.isfinite(dt) & (dt >= info.tiny))
    message = (
        f"`dt` must be positive and finite (a time step) in {dtype.name}, between "
        f"{float(info.tiny):.3g} and {float(info.max):.3g}; got a value that is not."
    )
    # A run-time check that an exported program skips (`jax.export` can neither serialise
    # `eqx.error_if`'s host callback nor lower it with a symbolic length).
    return runtime_check(dt, bad, message, check="dt")


def check_known_dt(dt, length, size: Dim | None, dtype) -> None:
    """`check_dt`'s value check at once, on a known `dt` (and `length`) given to a
    sequence of `size` positions (`None`: one position): the steps at positions at or
    after `length` are not read (`mask_steps`), so not checked. Nothing when `dt` or
    `length` is traced (the cores check the masked steps at run time) or `dt` has a shape
    or dtype `check_dt` refuses (it says so)."""
    values = None if dt is None else known(dt)
    limit = None if length is None else known(length)
    if values is None or (length is not None and limit is None):
        return
    if values.shape not in ((), (size,)) or not np.issubdtype(values.dtype, np.floating):
        return
    if limit is not None and values.shape == (size,) and limit.shape == ():
        values = np.where(np.arange(values.shape[0]) < limit, values, np.ones((), values.dtype))
    check_known_steps(values, dtype)


def check_known_steps(values: np.ndarray, dtype, *, where: tuple[str, ...] = ("position",)) -> None:
    """A `ValueError` naming the first step of `values` (as given) that is not positive and
    finite, or that `dtype` cannot hold: it overflows to infinity or underflows below the
    smallest normal number. `where` names the axes of `values` for the message."""
    dtype = jnp.dtype(dtype)
    info = jnp.finfo(dtype)
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        converted = values.astype(dtype).astype(np.float64)
    given = values.astype(np.float64) if values.dtype.itemsize <= 8 else values
    checks = (
        (~(np.isfinite(given) & (given > 0)),
         "`dt` must be positive and finite (a time step); got {}."),
        (~np.isfinite(converted),
         f"`dt` = {{}} overflows {dtype.name}, whose largest number is {float(info.max):.4g}: "
         "measure time in a larger unit."),
        (converted < float(info.tiny),
         f"`dt` = {{}} underflows {dtype.name}: a positive step below its smallest normal "
         f"number {float(info.tiny):.4g} is flushed to zero. Measure time in a smaller unit "
         "(larger steps), or use float64 parameters."),
    )  # fmt: skip
    for bad, message in checks:
        bad = np.broadcast_to(bad, values.shape)
        if bad.any():
            index = np.unravel_index(np.argmax(bad), values.shape)
            at = ", ".join(f"{name} {int(i)}" for name, i in zip(where, index, strict=False))
            raise ValueError(message.format(f"{values[index]}" + (f" (at {at})" if at else "")))


def reverse_steps(
    dt: Float[ArrayLike, " length"],
    *,
    axis: Hashable | None = None,
    segment_ids: Array | None = None,
    mask: Bool[Array, " length"] | None = None,
) -> Float[Array, " length"]:
    r"""The steps a reverse run takes for the forward steps `dt` (`dt[k]` $= t_k -
    t_{k-1}$): $t_{k+1} - t_k$ = `dt[k + 1]` at position $k$ when position $k + 1$ follows
    it in the same run; at the *end* of a run (the last position, the last valid position
    before the pads of `mask`, the last position of each packed segment of `segment_ids`),
    where nothing follows, the position's own forward step `dt[k]`: the gap after it is
    taken equal to the gap before it. That step is the first a reverse run processes, from
    the zero state; the LRU under `"impulse"` ignores it, the LRU under `"zoh"`, the
    RG-LRU and S5 read it (it weighs the input). Reading it from the run itself, and never
    from the pad or segment after, makes padded and packed runs equal separate ones.

    A bidirectional layer passes `dt` to its forward core and `reverse_steps(dt, ...)` to
    its reverse core, so both read the same times. `axis`: over a sequence split across
    devices (the mesh axis of `SequenceParallel`), `dt` is this device's chunk, and its last
    position's step is the next chunk's first (when that continues the run; `dt[-1]` on the
    last chunk)."""
    dt = jnp.asarray(dt)
    if dt.ndim != 1:
        raise ValueError(f"`dt` must have shape (length,) to reverse; got {dt.shape}.")
    ids = None if segment_ids is None else jnp.asarray(segment_ids)
    ends = jnp.arange(dt.shape[0]) == dt.shape[0] - 1  # the last position: nothing follows
    after, ids_after = dt[1:], None if ids is None else ids[1:]
    valid_after = None if mask is None else mask[1:]
    if axis is not None:  # the last position is followed by the next chunk's first
        n = jax.lax.axis_size(axis)
        perm = [(d, (d - 1) % n) for d in range(n)]
        ends = ends & (jax.lax.axis_index(axis) == n - 1)
        after = jnp.concatenate([after, jax.lax.ppermute(dt[:1], axis, perm)])
        if ids is not None:
            ids_after = jnp.concatenate([ids[1:], jax.lax.ppermute(ids[:1], axis, perm)])
        if mask is not None:
            valid_after = jnp.concatenate([mask[1:], jax.lax.ppermute(mask[:1], axis, perm)])
    else:
        after = jnp.concatenate([after, dt[-1:]])
        ids_after = None if ids is None else jnp.concatenate([ids[1:], ids[-1:]])
        valid_after = None if mask is None else jnp.concatenate([mask[1:], mask[-1:]])
    if ids is not None and ids_after is not None:
        ends = ends | (ids_after != ids)
    if valid_after is not None:
        ends = ends | ~valid_after
    return jnp.where(ends, dt, after)


def mask_steps(dt: ArrayLike | None, mask: Bool[Array, " length"] | None) -> ArrayLike | None:
    """`dt` with the steps at padded positions (`mask` false) set to 1, so any value there
    (`nan`, 0) is ignored, as padded inputs are; `dt` itself when it is `None`, a scalar,
    or of another shape than `mask` (which the core then refuses, naming it)."""
    if dt is None or mask is None:
        return dt
    dt = jnp.asarray(dt)
    if dt.shape != mask.shape:
        return dt
    return jnp.where(mask, dt, jnp.ones((), dt.dtype))


def scaled_polar(
    log_modulus: Float[Array, " n"], phase: Float[Array, " n"], dt: Float[Array, "*length"]
) -> tuple[Float[Array, "*length n"], Float[Array, "*length n"]]:
    r"""$(|\lambda|^{\Delta t}, \theta \Delta t) = (e^{\log|\lambda| \Delta t},
    \theta\Delta t)$ for every step: shape `(length, n)` for `dt` of shape `(length,)`,
    `(n,)` for a scalar `dt`."""
    dt = dt[..., None]
    return jnp.exp(log_modulus * dt), phase * dt


def model_dtype(model) -> jnp.dtype:
    """The real floating dtype of `model`'s parameters (its first floating array; the real
    part's for a complex one), in which its cores check `dt`; JAX's default float if it
    has none."""
    for leaf in jax.tree_util.tree_leaves(model):
        if isinstance(leaf, jax.Array) and jnp.issubdtype(leaf.dtype, jnp.inexact):
            return jnp.dtype(jnp.finfo(leaf.dtype).dtype)
    return jnp.zeros(()).dtype
