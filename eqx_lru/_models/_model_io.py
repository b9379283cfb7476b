r"""The deep model's input and output around its blocks: what its encoder takes
(`check_input`), the values checked at once when known (`check_known_values`), the
encoding with padded positions sanitised (`encode`), pooling per packed sequence
(`check_num_segments`, `pool_segments`), and the checks that run before the type checker
of the model's public methods (one line per mistake; see `_surface`)."""

from collections.abc import Callable
from typing import Literal, Protocol, runtime_checkable

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, PyTree

from .._blocks._abstract_block import AbstractBlock, AbstractStreamingBlock
from .._checks import (
    check_num_segments as check_num_packed,
)
from .._checks import (
    check_size,
    check_token_ids,
    num_segments_message,
)
from .._cores._dt import check_known_dt, model_dtype
from .._padding import check_length, segment_index, where_valid
from .._runtime_check import runtime_check
from .._surface import check_carry

#: `block(d_model, d_state, *, dtype, key)` returning an `eqx_lru.AbstractBlock`.
BlockFactory = Callable[..., AbstractBlock]
#: How a model reads its blocks' outputs out: the mean of the valid positions, the last
#: one, or every position.
Pooling = Literal["mean", "last"] | None


@runtime_checkable
class ModelParts(Protocol):
    """What the model's input, output and streaming read of their model (`LRUModel`):
    typed by its parts, so that these modules need nothing of the class that calls them."""

    @property
    def encoder(self) -> eqx.nn.Embedding | eqx.nn.Linear: ...
    @property
    def blocks(self) -> tuple[AbstractBlock, ...]: ...
    @property
    def head(self) -> eqx.nn.Linear | None: ...
    @property
    def pooling(self) -> Pooling: ...
    @property
    def check_tokens(self) -> bool: ...
    @property
    def d_model(self) -> int: ...
    def init_carry(self) -> PyTree[Array]: ...


def check_block(block: object, index: int, factory: BlockFactory) -> AbstractBlock:
    """`block` (built by `factory`), or a `TypeError` with the migration if it is not an
    `eqx_lru.AbstractBlock`."""
    if isinstance(block, AbstractBlock):
        return block
    name = type(block).__name__
    raise TypeError(
        f"`block` must build eqx_lru.AbstractBlock subclasses; block {index} from "
        f"{getattr(factory, '__name__', factory)!r} is a {name}. Subclass "
        f"eqx_lru.AbstractBlock (`class {name}(eqx_lru.AbstractBlock)`, with LRUBlock's call "
        "`__call__(x, state, *, length=None, segment_ids=None, dt=None, key=None, "
        "inference=None) -> "
        "(y, state)`), or eqx_lru.AbstractStreamingBlock to also stream."
    )


# The checks that run before the type checker of the model's public methods (one line per
# mistake; see `_surface`).


def check_call_args(
    model: ModelParts,
    x,
    state=None,
    *,
    length=None,
    segment_ids=None,
    num_segments=None,
    dt=None,
    **_,
) -> None:
    del state
    check_input(model, x)
    check_known_values(
        model, x, length=length, segment_ids=segment_ids, num_segments=num_segments, dt=dt
    )


def check_step_args(model: ModelParts, carry, x_t, state=None, *, dt=None, **_) -> None:
    del state
    streaming_blocks(model, "step")
    check_input(model, x_t, position=True)
    check_carry(carry, model.init_carry, "LRUModel")
    check_known_values(model, x_t, dt=dt, sequence=False)


def check_chunk_args(
    model: ModelParts, carry, x, state=None, *, length=None, segment_ids=None, dt=None, **_
) -> None:
    del state
    streaming_blocks(model, "chunk")
    check_input(model, x)
    check_carry(carry, model.init_carry, "LRUModel")
    check_known_values(model, x, length=length, segment_ids=segment_ids, dt=dt)


def check_input(model: ModelParts, x: ArrayLike, *, position: bool = False) -> Array:
    """`x` as an array, or a `ValueError` saying what the encoder takes: a sequence
    `x` of at least one position, or with `position=True` one position `x_t` (a
    stream's `step`)."""
    x = jnp.asarray(x)
    if isinstance(model.encoder, eqx.nn.Embedding):
        encodes, dtype, shape = "embeds tokens (`encoder='embedding'`)", jnp.integer, ()
        one, many = "one integer token id (a scalar)", "an integer array of shape (length,)"
    else:
        size = model.encoder.in_features
        encodes, dtype, shape = "encodes features (`encoder='linear'`)", jnp.floating, (size,)
        one = f"one float feature vector of shape ({size},)"
        many = f"a float array of shape (length, {size})"
    ndim, rest = (len(shape), x.shape) if position else (len(shape) + 1, x.shape[1:])
    if x.ndim != ndim or rest != shape or not jnp.issubdtype(x.dtype, dtype):
        name, expected, what = ("x_t", one, "streams ") if position else ("x", many, "")
        batched = f" Batch {what}with `jax.vmap`." if x.ndim > ndim else ""
        raise ValueError(
            f"This model {encodes}: `{name}` must be {expected}; got {x.dtype} of shape "
            f"{x.shape}.{batched}"
        )
    if not position:
        check_length(x, "x")
    return x


def check_known_values(
    model: ModelParts,
    x,
    *,
    length=None,
    segment_ids=None,
    num_segments=None,
    dt: ArrayLike | None = None,
    sequence: bool = True,
) -> None:
    """The checks of the values as given that are known now (also when closed over
    inside `jit`, where the values derived from them are traced): the token ids and
    time steps `dt` at valid positions, and the number of packed sequences (`_checks`,
    `_dt`), of a call's sequence `x` (`sequence=False`: of a step's position)."""
    if isinstance(model.encoder, eqx.nn.Embedding) and model.check_tokens:
        check_token_ids(x, model.encoder.num_embeddings, valid=length, value=x)
    size = jnp.shape(x)[0] if sequence else None
    check_known_dt(dt, length, size, model_dtype(model))
    if segment_ids is not None and isinstance(num_segments, int) and model.pooling:
        check_num_packed(segment_ids, length, num_segments)


def encode(model: ModelParts, x: Array, mask: Array | None) -> Array:
    # Sanitise pads first: an out-of-range token or a `nan` feature must not reach
    # any computation (not even through a zero-weighted gradient).
    x = where_valid(mask, x)
    if isinstance(model.encoder, eqx.nn.Embedding) and model.check_tokens:
        x = check_token_ids(x, model.encoder.num_embeddings)
    return jax.vmap(model.encoder)(x)


def check_num_segments(model: ModelParts, segment_ids, num_segments) -> int | None:
    if segment_ids is None or model.pooling is None:
        if num_segments is not None:
            raise ValueError(
                "`num_segments` is the number of pooled outputs of packed sequences: "
                "give it with `segment_ids` to a model with pooling, or leave it None "
                f"(got {num_segments!r} with pooling={model.pooling!r} and "
                f"segment_ids={'None' if segment_ids is None else 'given'})."
            )
        return None
    if num_segments is None:
        raise ValueError(
            f"With `segment_ids`, a model with pooling={model.pooling!r} returns one "
            "pooled output per packed sequence: pass `num_segments=` (a Python int, "
            "the most sequences a row holds; the output has that many rows), or use "
            "`pooling=None` for per-position outputs."
        )
    return check_size("num_segments", num_segments)


def pool_segments(
    pooling: str, h: Array, mask: Array | None, segment_ids: Array, num_segments: int
) -> tuple[Array, Array]:
    """Per packed sequence, in order: the mean over its valid positions or its last valid
    position, `(num_segments, d_model)`, and which rows hold a sequence."""
    size = h.shape[0]
    valid = jnp.ones(size, bool) if mask is None else mask
    index = segment_index(segment_ids)
    found = jnp.max(jnp.where(valid, index, -1)) + 1
    index = runtime_check(
        index, found > num_segments, num_segments_message(num_segments), check="num_segments"
    )
    target = jnp.where(valid, index, num_segments)  # padding goes out of range: dropped
    counts = jax.ops.segment_sum(valid.astype(jnp.int32), target, num_segments)
    present = counts > 0
    if pooling == "mean":
        sums = jax.ops.segment_sum(where_valid(mask, h), target, num_segments)
        pooled = sums / jnp.maximum(counts, 1).astype(h.dtype)[:, None]
    else:
        last = jax.ops.segment_max(jnp.arange(size, dtype=jnp.int32), target, num_segments)
        pooled = h[jnp.clip(last, 0, size - 1)]
    return pooled, present


def streaming_blocks(model: ModelParts, method: str) -> tuple[AbstractStreamingBlock, ...]:
    """The blocks, or a `TypeError` naming the first that cannot stream."""
    streaming = []
    for i, block in enumerate(model.blocks):
        if not isinstance(block, AbstractStreamingBlock):
            raise TypeError(
                f"`LRUModel.{method}` runs every block as an RNN, and block {i} "
                f"({type(block).__name__}) is not an eqx_lru.AbstractStreamingBlock, "
                "so it has no `init_carry`/`step`/`chunk`: use `LRUBlock`s, or subclass "
                "eqx_lru.AbstractStreamingBlock and implement these methods."
            )
        streaming.append(block)
    return tuple(streaming)
