r"""The prologue that every block and model call shares before its own maths: the checks
of a sequence's arguments and its validity mask (`start_call`), of a stream's chunk
(`start_chunk`) and step (`start_step`), and the route of the time steps `dt` to a core.

**Time steps.** `dt` travels by name through every signature. A block checks once, before
any work, that its core takes time steps (`core_steps`), sets the steps at padded
positions to 1 (`_dt.mask_steps`: any value there is ignored, as padded inputs are), and
hands them to the core by name (`with_steps`), whose own check reads their values (a
model also checks the known values at once, in its public methods).
"""

from collections.abc import Callable
from typing import Any, NamedTuple

import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Bool, Integer, PyTree

from .._checks import check_segment_ids
from .._cores._core import AbstractRecurrentCore, dt_options
from .._cores._dt import mask_steps
from .._padding import check_length, where_valid
from .._scan import _sharding as sharding
from ._streams import chunk_mask, start_carry


def core_steps(core: AbstractRecurrentCore | None, dt: ArrayLike | None) -> ArrayLike | None:
    """`dt` itself, once `core` is known to take time steps (a `TypeError` naming the core
    otherwise: a time step it would ignore); `core=None`: a model, whose blocks check."""
    if core is not None:
        dt_options(core, dt)
    return dt


def with_steps(method: Callable[..., Any], *args: Any, dt: ArrayLike | None, **options) -> Any:
    """`method(*args, **options)`, with `dt=dt` when given: a core's `__call__`, `run` or
    `step` on steps that `core_steps` has admitted (a core without time steps takes no
    `dt` keyword)."""
    if dt is None:
        return method(*args, **options)
    return method(*args, dt=dt, **options)


class Call(NamedTuple):
    """One sequence's arguments, checked (`start_call`)."""

    x: Array  # zero at padded positions
    segment_ids: Array | None
    dt: ArrayLike | None  # 1 at padded positions when a core reads them
    mask: Bool[Array, " length"] | None  # valid positions; `None`: all
    axis: Any  # the mesh axis of a sequence split across devices, or `None`


def start_call(
    owner: Any,
    x: ArrayLike,
    *,
    core: AbstractRecurrentCore | None,
    length: Integer[ArrayLike, ""] | None,
    segment_ids: Integer[ArrayLike, " length"] | None,
    dt: ArrayLike | None,
) -> Call:
    """The prologue of a call on one sequence `x` (a block's or a model's): `core` takes
    `dt` (`core_steps`; `None` for a model), `x` has a position, `segment_ids` one per
    position; the validity mask of `length` (over a sequence split across devices: of
    the whole sequence), `x` zeroed and the steps set to 1 at pads."""
    dt = core_steps(core, dt)
    x = jnp.asarray(x)
    check_length(x, "x")
    segment_ids = check_segment_ids(segment_ids, x.shape[0])
    axis = sharding.sequence_axis(owner)
    mask = sharding.valid_mask(length, x.shape[0], axis)
    steps = dt if core is None else mask_steps(dt, mask)
    return Call(where_valid(mask, x), segment_ids, steps, mask, axis)


class Chunk(NamedTuple):
    """A stream's chunk, its arguments checked (`start_chunk`)."""

    carry: PyTree[Array]  # where the chunk starts (`init_carry()` on reset)
    x: Array  # zero at padded positions
    segment_ids: Array | None
    dt: ArrayLike | None  # 1 at padded positions when a core reads them
    mask: Bool[Array, " length"] | None  # new positions; `None`: all
    valid: Integer[Array, ""] | None  # how many positions are new (may be 0); `None`: all
    last: Integer[Array, ""] | None  # `valid`, at least 1: the length a core's `run` reads


def start_chunk(
    owner: Any,
    carry: PyTree[ArrayLike],
    x: ArrayLike,
    *,
    core: AbstractRecurrentCore | None,
    length: Integer[ArrayLike, ""] | None,
    segment_ids: Integer[ArrayLike, " length"] | None,
    reset: Bool[ArrayLike, ""] | None,
    carry_gradient: bool,
    dt: ArrayLike | None,
) -> Chunk:
    """The prologue of `owner.chunk` (a streaming block's or a model's): `core` takes
    `dt`, the owner is not split across devices, `x` has a position and `segment_ids` one
    per position; the carry to start from (`start_carry`, from `owner.init_carry()` on
    `reset`), the mask of the `length` new positions, `x` zeroed and the steps set to 1 at
    pads. A chunk with no new position (`valid == 0`) runs its core over one (`last`)
    and keeps its carry (`_streams.keep_when_empty`)."""
    dt = core_steps(core, dt)
    sharding.refuse(owner, f"`{type(owner).__name__}.chunk`")
    x = jnp.asarray(x)
    check_length(x, "x")
    segment_ids = check_segment_ids(segment_ids, x.shape[0])
    carry = start_carry(carry, owner.init_carry, reset=reset, carry_gradient=carry_gradient)
    mask, valid = chunk_mask(length, x.shape[0])
    last = None if valid is None else jnp.maximum(valid, 1)
    steps = dt if core is None else mask_steps(dt, mask)
    return Chunk(carry, where_valid(mask, x), segment_ids, steps, mask, valid, last)


def start_step(
    owner: Any,
    carry: PyTree[ArrayLike],
    x_t: ArrayLike,
    *,
    core: AbstractRecurrentCore | None,
    reset: Bool[ArrayLike, ""] | None,
    dt: ArrayLike | None,
) -> tuple[PyTree[Array], Array, ArrayLike | None]:
    """The prologue of `owner.step`: `(carry, x_t, dt)`, the carry to start from
    (`owner.init_carry()` on `reset`; gradients flow into it), `x_t` as an array, and
    `dt` once `core` is known to take it (`None`: a model)."""
    dt = core_steps(core, dt)
    carry = start_carry(carry, owner.init_carry, reset=reset, carry_gradient=True)
    return carry, jnp.asarray(x_t), dt
