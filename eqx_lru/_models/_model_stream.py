r"""The deep model's streaming: a model of causal blocks as an RNN. Its carry is every
block's carry and, for mean pooling, the running sum and count of the last block's
outputs; `step` and `chunk` run every block's, then read the outputs out
(`readout`)."""

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, PRNGKeyArray, PyTree

from .._blocks._prologue import start_chunk, start_step
from .._blocks._streams import running_sum
from .._padding import where_valid
from ._model_io import ModelParts, check_input, encode, streaming_blocks


def split_keys(key: PRNGKeyArray | None, num: int) -> list[PRNGKeyArray | None]:
    return [None] * num if key is None else list(jax.random.split(key, num))


def readout(model: ModelParts, carry: dict, h: Array, mask: Array | None) -> tuple[dict, Array]:
    """The outputs of a chunk's (or a step's) last-block features `h`, `(n, d_model)`,
    and the carry's running sum for mean pooling. A chunk with no valid position
    gives zero outputs."""
    if model.pooling is None:
        out = h if model.head is None else jax.vmap(model.head)(h)
        return carry, where_valid(mask, out)
    size = h.shape[0] if mask is None else jnp.sum(mask, dtype=jnp.int32)
    if model.pooling == "mean":
        added = jnp.sum(where_valid(mask, h), axis=0).astype(carry["sum"].dtype)
        # The count saturates at 2**31 - 1, never wraps (`_streams.running_sum`).
        total, count = running_sum(carry["sum"], carry["count"], added, size)
        carry = dict(carry, sum=total, count=count)
        # `max`: no 0/0 (whose gradient would be nan) for a stream with nothing yet.
        pooled = (total / jnp.maximum(count, 1).astype(total.dtype)).astype(h.dtype)
    else:
        pooled = h[jnp.maximum(size - 1, 0)]
    out = pooled if model.head is None else model.head(pooled)
    return carry, out if mask is None else jnp.where(size > 0, out, 0)


def _sum_dtype(encoder) -> jnp.dtype:
    """The dtype of mean pooling's running sum: the parameters', at least float32."""
    dtype = encoder.weight.dtype
    return dtype if jnp.finfo(dtype).bits >= 32 else jnp.dtype(jnp.float32)


def init_carry(model: ModelParts) -> PyTree[Array]:
    """`LRUModel.init_carry`: every block's carry, and the running sum and count of mean
    pooling."""
    blocks = streaming_blocks(model, "init_carry")
    carry: dict = {"blocks": tuple(block.init_carry() for block in blocks)}
    if model.pooling == "mean":
        dtype = _sum_dtype(model.encoder)
        carry["sum"] = jnp.zeros(model.d_model, dtype)
        carry["count"] = jnp.zeros((), jnp.int32)
    return carry


def stream_step(
    model: ModelParts, carry, x_t, state: eqx.nn.State, *, reset, dt
) -> tuple[PyTree[Array], Array]:
    """`LRUModel.step`: the step prologue (`start_step`), every block's `step` (`dt` by
    name), then `readout`."""
    streaming = streaming_blocks(model, "step")
    x_t = check_input(model, x_t, position=True)
    carry, x_t, dt = start_step(model, carry, x_t, core=None, reset=reset, dt=dt)
    h = encode(model, x_t[None], None)[0]
    blocks = []
    for block, block_carry in zip(streaming, carry["blocks"], strict=True):
        block_carry, h = block.step(block_carry, h, state, dt=dt)
        blocks.append(block_carry)
    carry, out = readout(model, dict(carry, blocks=tuple(blocks)), h[None], None)
    return carry, out[0] if model.pooling is None else out


def stream_chunk(
    model: ModelParts,
    carry,
    x,
    state: eqx.nn.State,
    *,
    length,
    segment_ids,
    reset,
    inference: bool,
    key: PRNGKeyArray | None,
    carry_gradient: bool,
    dt,
) -> tuple[PyTree[Array], Array]:
    """`LRUModel.chunk`: the chunk prologue (`start_chunk`; the blocks check and mask
    `dt`), every block's `chunk` with every option by name, then `readout`."""
    streaming = streaming_blocks(model, "chunk")
    x = check_input(model, x)
    if segment_ids is not None and model.pooling is not None:
        raise ValueError(
            "`LRUModel.chunk` takes `segment_ids` only with `pooling=None`: with "
            f"pooling={model.pooling!r} the stream has one pooled output, and packed "
            "sequences would each need their own. Stream each sequence from "
            "`init_carry()`, or pool packed sequences with the model's call "
            "(`segment_ids=`, `num_segments=`)."
        )
    c = start_chunk(
        model, carry, x, core=None, length=length, segment_ids=segment_ids, reset=reset,
        carry_gradient=carry_gradient, dt=dt,
    )  # fmt: skip
    h = encode(model, c.x, c.mask)
    blocks = []
    keys = split_keys(key, len(streaming))
    for block, block_carry, block_key in zip(streaming, c.carry["blocks"], keys, strict=True):
        block_carry, h = block.chunk(
            block_carry, h, state, length=c.valid, segment_ids=c.segment_ids,
            inference=inference, key=block_key, carry_gradient=carry_gradient, dt=c.dt,
        )  # fmt: skip
        blocks.append(block_carry)
    return readout(model, dict(c.carry, blocks=tuple(blocks)), h, c.mask)
