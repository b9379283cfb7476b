r"""The recurrence of a bidirectional block: a forward and a reverse core, summed,

$$h = \overrightarrow{\text{core}}(z) + \overleftarrow{\text{core}}(z),$$

with the reverse core reading the time steps in its own order (`reverse_steps`), and a
backward pass that can run one direction after the other.
"""

from collections.abc import Hashable

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array

from ._core import AbstractRecurrentCore
from ._dt import reverse_steps
from ._prologue import with_steps

Cores = tuple[AbstractRecurrentCore, AbstractRecurrentCore]


def sum_of_directions(
    cores: Cores,
    z: Array,
    segment_ids: Array | None,
    dt: Array | None,
    *,
    axis: Hashable | None = None,
    sequential: bool = False,
) -> Array:
    r"""$\overrightarrow{\text{core}}(z) + \overleftarrow{\text{core}}(z)$ with packed
    `segment_ids` and time steps `dt` (`None`, a scalar or one per position, in the
    forward order; `axis`: the mesh axis of a sequence split across devices, whose
    reverse steps read the next chunk's first step). With `sequential`, the backward pass
    keeps only the cores, $z$ and `dt`, and recomputes each direction's forward pass just
    before that direction's backward pass, so one direction's states (and their adjoints)
    are live at a time."""
    if sequential:
        return _both_directions((cores, z, dt), segment_ids, axis)
    return _sum((cores, z, dt), segment_ids, axis)


def _forward(core, z, dt, segment_ids):
    return with_steps(core, z, segment_ids=segment_ids, dt=dt)


def _reverse(core, z, dt, segment_ids, axis):
    steps = None if dt is None or jnp.ndim(dt) == 0 else reverse_steps(dt, axis=axis)
    steps = dt if steps is None else steps
    return with_steps(core, z, reverse=True, segment_ids=segment_ids, dt=steps)


def _sum(inputs, segment_ids, axis):
    (core, reverse_core), z, dt = inputs
    return _forward(core, z, dt, segment_ids) + _reverse(reverse_core, z, dt, segment_ids, axis)


@eqx.filter_custom_vjp
def _both_directions(inputs, segment_ids, axis):
    return _sum(inputs, segment_ids, axis)


@_both_directions.def_fwd
def _both_directions_fwd(perturbed, inputs, segment_ids, axis):
    del perturbed
    # No residuals but the inputs.
    return _sum(inputs, segment_ids, axis), None


@_both_directions.def_bwd
def _both_directions_bwd(residuals, grad, perturbed, inputs, segment_ids, axis):
    del residuals, perturbed
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
    _, vjp = eqx.filter_vjp(
        lambda c, z, dt: _reverse(c, z, dt, segment_ids, axis), reverse_core, z, dt
    )
    d_reverse, dz_reverse, d_dt_reverse = vjp(grad)
    d_dt = None if dt is None else d_dt + d_dt_reverse
    return (d_core, d_reverse), dz + dz_reverse, d_dt
