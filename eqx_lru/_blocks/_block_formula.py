r"""The formula of `LRUBlock` (paper Fig. 1, §D.1) on one sequence, as functions of the
block:

$$y = x + \operatorname{Dropout}\big(\operatorname{GLU}(\operatorname{GELU}(
\operatorname{Rec}(\operatorname{Norm}(x))))\big),$$

zero at padded positions; `call` is what `LRUBlock.__call__` and `LRUBlock.scan_body`
run, `normalise` and `residual` are shared with its streaming methods.
"""

from typing import ClassVar, Protocol, runtime_checkable

import equinox as eqx
import jax
from jax.ad_checkpoint import checkpoint_name

from .._cores._core import AbstractRecurrentCore
from .._padding import where_valid
from .._scan import _sharding as sharding
from ._bidirectional import sum_of_directions
from ._glu import GLU
from ._norm import MaskedBatchNorm, with_sequence_axis
from ._prologue import start_call, with_steps


@runtime_checkable
class FormulaBlock(Protocol):
    """What the formula reads of its block (`LRUBlock`): typed by its parts, so that
    this module needs nothing of the class that calls it."""

    @property
    def norm(self) -> MaskedBatchNorm | eqx.nn.LayerNorm | None: ...
    @property
    def core(self) -> AbstractRecurrentCore: ...
    @property
    def reverse_core(self) -> AbstractRecurrentCore | None: ...
    @property
    def glu(self) -> GLU: ...
    @property
    def dropout(self) -> eqx.nn.Dropout: ...
    remat_name: ClassVar[str]


def normalise(block: FormulaBlock, x, state, mask, inference):
    """The block's norm on one sequence: `(z, state)`."""
    if isinstance(block.norm, MaskedBatchNorm):
        # Over a sequence split across devices, the statistics span the chunks too.
        norm = with_sequence_axis(block.norm, sharding.sequence_axis(block))
        return norm(x, state, mask=mask, inference=inference)
    if block.norm is None:
        return x, state
    return jax.vmap(block.norm)(x), state


def call(
    block: FormulaBlock,
    x,
    state,
    *,
    length,
    segment_ids,
    dt,
    key,
    inference,
    checkpoint: bool,
    sequential: bool,
):
    """`LRUBlock.__call__` and `LRUBlock.scan_body` (their signatures check the types):
    the prologue (`start_call`: the checks of `x`, `length`, `segment_ids` and whether the
    cores take `dt`, before any work), then `_forward`, inside one `eqx.filter_checkpoint`
    when `checkpoint`."""
    c = start_call(block, x, core=block.core, length=length, segment_ids=segment_ids, dt=dt)
    forward = eqx.filter_checkpoint(_forward) if checkpoint else _forward
    return forward(
        block, c.x, state, c.mask, key, inference, c.segment_ids, c.dt, sequential=sequential
    )


def _forward(
    block: FormulaBlock,
    x,
    state,
    mask,
    key,
    inference,
    segment_ids=None,
    dt=None,
    *,
    sequential: bool = False,
):
    """The block's formula (Fig. 1) on one sequence `x`, zero at pads, with a validity
    `mask`, `segment_ids` and time steps `dt` (each `None` or an array; `start_call`)."""
    z, state = normalise(block, x, state, mask, inference)
    # Zero pads before the recurrence: the norm's shift makes them non-zero, and a
    # reverse scan starting at the padded end would carry them into valid positions.
    z = where_valid(mask, z)
    if block.reverse_core is None:
        h = with_steps(block.core, z, segment_ids=segment_ids, dt=dt)
    else:
        cores = (block.core, block.reverse_core)
        axis = sharding.sequence_axis(block)
        h = sum_of_directions(
            cores, z, segment_ids, dt, axis=axis, sequential=sequential, mask=mask
        )
        if sequential:
            h = checkpoint_name(h, block.remat_name)
    return residual(block, x, h, mask, key, inference), state


def residual(block: FormulaBlock, x, h, mask, key, inference):
    r"""The block after its recurrence $h$: $x + \operatorname{Dropout}(\operatorname{GLU}(
    \operatorname{GELU}(h)))$, zero at padded positions."""
    h = jax.vmap(block.glu)(jax.nn.gelu(h))
    key = sharding.chunk_key(key, sharding.sequence_axis(block))  # a chunk's own masks
    h = block.dropout(h, key=key, inference=inference)
    return where_valid(mask, x + h)
