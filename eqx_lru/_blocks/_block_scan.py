r"""The rematerialised scan over a stack of blocks that `LRUModel(remat=True)` runs.

Blocks of one structure (the same modules, shapes and static settings; only their
arrays' values differ) run as one `jax.lax.scan` over their stacked parameters, with the
body, one block, under `jax.checkpoint`: the backward pass recomputes one block at a time
and keeps only the blocks' inputs $h^0, \dots, h^{\text{depth}-1}$, plus the values a
body names `AbstractBlock.remat_name`. XLA cannot hoist the recomputation out of a scan
as it can for the checkpoints of an unrolled loop, so this bounds memory on every backend.
"""

import functools
from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Integer, PRNGKeyArray

from ._abstract_block import AbstractBlock, call_block


def _is_index(x) -> bool:
    return isinstance(x, eqx.nn.StateIndex)


def _state_indices(tree) -> list[eqx.nn.StateIndex]:
    return [x for x in jax.tree_util.tree_leaves(tree, is_leaf=_is_index) if _is_index(x)]


def _skeleton(block: eqx.Module):
    """Everything of `block` but its arrays' values and its state indices' identities:
    what blocks must share to run as one scan body."""
    no_index = jax.tree_util.tree_map(
        lambda x: None if _is_index(x) else x, block, is_leaf=_is_index
    )
    params, static = eqx.partition(no_index, eqx.is_array)
    shapes = [(x.shape, x.dtype) for x in jax.tree_util.tree_leaves(params)]
    return jax.tree_util.tree_structure(params), shapes, static


def stack_blocks(blocks: Sequence[AbstractBlock]) -> list[Array] | None:
    """The array leaves of `blocks`, stacked along a new leading axis; `None` if the
    blocks differ in anything but their arrays' values (so cannot be scanned over)."""
    first = _skeleton(blocks[0])
    for block in blocks[1:]:
        other = _skeleton(block)
        same = other[0] == first[0] and other[1] == first[1]
        if not (same and eqx.tree_equal(other[2], first[2]) is True):
            return None
    leaves = [jax.tree_util.tree_leaves(eqx.filter(b, eqx.is_array)) for b in blocks]
    return [jnp.stack(xs) for xs in zip(*leaves, strict=True)]


def scan_blocks(
    blocks: Sequence[AbstractBlock],
    stacked: list[Array],
    h: Array,
    state: eqx.nn.State,
    *,
    length: Integer[ArrayLike, ""] | None,
    segment_ids: Integer[ArrayLike, " length"] | None,
    dt: ArrayLike | None,
    key: PRNGKeyArray | None,
    inference: bool | None,
) -> tuple[Array, eqx.nn.State]:
    """`h` through every block in turn, as a `lax.scan` over `stacked` (from
    `stack_blocks`) whose body, one block's `scan_body`, is rematerialised with the policy
    that saves the values named `remat_name` (see `AbstractBlock`). Each block's
    batch-norm state travels through the scan beside it; `key` is split into one key per
    block; `segment_ids` and `dt` go to every block. **Returns:** `(h, state)`."""
    template = blocks[0]
    params, static = eqx.partition(template, eqx.is_array)
    treedef = jax.tree_util.tree_structure(params)
    indices = _state_indices(template)
    values = [[state.get(i) for i in _state_indices(b)] for b in blocks]
    values = jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *values)
    template_state = state.substate(template)
    keys = None if key is None else jax.random.split(key, len(blocks))
    # Whether the block handed its state back as it was given (inference mode), seen at
    # trace time: then so is the caller's, as in the unrolled loop (no `State.set`, which
    # would retire the caller's state object).
    kept = []

    policy = jax.checkpoint_policies.save_only_these_names(template.remat_name)

    @functools.partial(jax.checkpoint, policy=policy)
    def body(h, xs):
        leaves, block_values, block_key = xs
        block = eqx.combine(jax.tree_util.tree_unflatten(treedef, leaves), static)
        sub = jax.tree_util.tree_map(lambda x: x, template_state)  # a fresh State
        for index, value in zip(indices, block_values, strict=True):
            sub = sub.set(index, value)
        h, new_sub = call_block(
            block, h, sub, length=length, segment_ids=segment_ids, dt=dt, key=block_key,
            inference=inference, scan_body=True,
        )  # fmt: skip
        kept.append(new_sub is sub)
        return h, [new_sub.get(index) for index in indices]

    h, new_values = jax.lax.scan(body, h, (stacked, values, keys))
    if all(kept):
        return h, state
    for i, block in enumerate(blocks):
        for index, value in zip(_state_indices(block), new_values, strict=True):
            state = state.set(index, jax.tree_util.tree_map(lambda x, i=i: x[i], value))
    return h, state
