r"""The recurrence of a bidirectional block: a forward and a reverse core, summed,

$$h = \overrightarrow{\text{core}}(z) + \overleftarrow{\text{core}}(z),$$

with the reverse core reading the time steps in its own order (`reverse_steps`), and a
backward pass that can run one direction after the other.
"""

from collections.abc import Hashable

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array

from .._cores._core import AbstractRecurrentCore
from .._cores._dt import reverse_steps

Cores = tuple[AbstractRecurrentCore, AbstractRecurrentCore]


def sum_of_directions(
    cores: Cores,
    z: Array,
    segment_ids: Array | None,
    dt: Array | None,
    *,
    axis: Hashable | None = None,
    sequential: bool = False,
    mask: Array | None = None,
) -> Array:
    r"""$\overrightarrow{\text{core}}(z) + \overleftarrow{\text{core}}(z)$ with packed
    `segment_ids` and time steps `dt` (`None`, a scalar or one per position, in the
    forward order; `axis`: the mesh axis of a sequence split across devices, whose
    reverse steps read the next chunk's first step; `mask`: the valid positions, where
    the reverse steps end as they do at segment ends, see `reverse_steps`). With
    `sequential`, the backward pass keeps only the cores, $z$ and `dt`, and recomputes
    each direction's forward pass just before that direction's backward pass, so one
    direction's states (and their adjoints) are live at a time."""
    where = (segment_ids, mask)
    if sequential:
        return _both_directions((cores, z, dt), where, axis)
    return _sum((cores, z, dt), where, axis)


def _forward(core, z, dt, segment_ids):
    return core(z, segment_ids=segment_ids, dt=dt)


def _reverse(core, z, dt, where, axis):
    segment_ids, mask = where
    steps = dt
    if dt is not None and jnp.ndim(dt) == 1:
        steps = reverse_steps(dt, axis=axis, segment_ids=segment_ids, mask=mask)
    return core(z, reverse=True, segment_ids=segment_ids, dt=steps)


def _sum(inputs, where, axis):
    (core, reverse_core), z, dt = inputs
    return _forward(core, z, dt, where[0]) + _reverse(reverse_core, z, dt, where, axis)


@eqx.filter_custom_vjp
def _both_directions(inputs, where, axis):
    return _sum(inputs, where, axis)


@_both_directions.def_fwd
def _both_directions_fwd(perturbed, inputs, where, axis):
    del perturbed
    # No residuals but the inputs.
    return _sum(inputs, where, axis), None


@_both_directions.def_bwd
def _both_directions_bwd(residuals, grad, perturbed, inputs, where, axis):
    del residuals, perturbed
    segment_ids = where[0]
    (core, reverse_core), z, dt = inputs
    _, vjp = eqx.filter_vjp(lambda c, z, dt: _forward(c, z, dt, segment_ids), core, z, dt)
    d_core, dz, d_dt = vjp(grad)
    # The reverse direction may start only once the forward direction's gradients exist:
    # a data dependency (`+ 0 * dz[0, 0]`, exact for finite gradients) that XLA keeps on
    # every backend, where the CPU compiler drops `lax.optimization_barrier`. Both the
    # reverse core's input and its cotangent depend on it, or XLA computes the reverse
    # output projection's transpose (a state-sized buffer) early.
    zero = jnp.zeros((), z.dtype) * dz[0, 0]
    z, grad = z + zero, grad + zero.astype(grad.dtype)
    _, vjp = eqx.filter_vjp(lambda c, z, dt: _reverse(c, z, dt, where, axis), reverse_core, z, dt)
    d_reverse, dz_reverse, d_dt_reverse = vjp(grad)
    d_dt = None if dt is None else d_dt + d_dt_reverse
    return (d_core, d_reverse), dz + dz_reverse, d_dt
