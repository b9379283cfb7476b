r"""Irregular time steps: the `dt=` argument of the cores that take it.

A core with `takes_dt = True` (`ComplexLRU`, `RealLRU`, `RGLRU`, `baselines.S5`) accepts
`dt=` in `run`, `__call__` and `step`: the time $\Delta t_k > 0$ elapsed between the
position processed just before position $k$ and position $k$. A mode whose one-step
transition is $\lambda = e^{\mu}$ ($\mu = \log|\lambda| + i\theta$) moves by
$\lambda^{\Delta t} = e^{\mu \Delta t} = |\lambda|^{\Delta t} e^{i\theta\Delta t}$ over
$\Delta t$: a scaling by $|\lambda|^{\Delta t}$ and a rotation by $\theta\Delta t$.
$\Delta t \equiv 1$ is the core without `dt`.

**Direction.** `dt[k]` is the gap in the order of processing: forward,
$t_k - t_{k-1}$; reverse (`reverse=True`), $t_{k+1} - t_k$. `dt` at the first position
processed is the gap since `initial_state` (it has no effect from the zero state). A
bidirectional block gives its reverse core `reverse_steps(dt)`.
"""

from collections.abc import Hashable

import jax
import jax.core
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Float

from ._checks import Dim
from ._runtime_check import runtime_check


def check_dt(dt: ArrayLike, length: Dim | None, dtype) -> Float[Array, "*length"]:
    """`dt` as an array of the parameters' real floating `dtype`: shape `(length,)` (one
    step per position) or `()` (one step for every position); `length=None` (for `step`)
    accepts `()` only. Shape and dtype errors are `ValueError`s naming `dt`; a step that is
    not positive and finite is a `ValueError` when `dt` is concrete, a run-time error
    under `jit`/`vmap` (`runtime_check`: an exported program skips it)."""
    dt = jnp.asarray(dt)
    shapes = "()" if length is None else f"({length},) (one per position) or ()"
    if dt.shape not in ((), (length,)) or (length is None and dt.shape != ()):
        raise ValueError(
            f"`dt` must have shape {shapes}: the time step of each position; got shape "
            f"{dt.shape}."
            + (" `step` takes one position: pass that position's step." if length is None else "")
        )
    if not jnp.issubdtype(dt.dtype, jnp.floating):
        raise ValueError(
            f"`dt` must be real floating time steps (e.g. float32), got dtype {dt.dtype}. "
            "Cast it with `.astype(jnp.float32)`."
        )
    dt = dt.astype(dtype)
    bad = ~(jnp.isfinite(dt) & (dt > 0))
    message = "`dt` must be positive and finite (a time step); got {}."
    if not isinstance(dt, jax.core.Tracer):
        values = np.asarray(dt).reshape(-1)[np.asarray(bad).reshape(-1)]
        if values.size:
            raise ValueError(message.format(values[0]))
        return dt
    # A run-time check that an exported program skips (`jax.export` can neither serialise
    # `eqx.error_if`'s host callback nor lower it with a symbolic length).
    return runtime_check(dt, bad, message.format("a value that is not"), check="dt")


def reverse_steps(
    dt: Float[ArrayLike, " length"], *, axis: Hashable | None = None
) -> Float[Array, " length"]:
    r"""The steps a reverse run takes for the forward steps `dt` (`dt[k]` $= t_k -
    t_{k-1}$): $t_{k+1} - t_k$ = `dt[k + 1]` at position $k$, and `dt[-1]` at the last
    position (its gap since the reverse run's initial state, which a zero state ignores).
    A bidirectional layer passes `dt` to its forward core and `reverse_steps(dt)` to its
    reverse core, so both read the same times.

    `axis`: over a sequence split across devices (the mesh axis of `SequenceParallel`),
    `dt` is this device's chunk, and its last position's step is the next chunk's first
    (`dt[-1]` on the last chunk)."""
    dt = jnp.asarray(dt)
    if dt.ndim != 1:
        raise ValueError(f"`dt` must have shape (length,) to reverse; got {dt.shape}.")
    after = dt[-1:]
    if axis is not None:
        n = jax.lax.axis_size(axis)
        perm = [(d, (d - 1) % n) for d in range(n)]
        received = jax.lax.ppermute(dt[:1], axis, perm)
        after = jnp.where(jax.lax.axis_index(axis) == n - 1, after, received)
    return jnp.concatenate([dt[1:], after])


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
