r"""Deep LRU models: encoder → depth × block → pooling → head (paper Fig. 1, §D.1)."""

from collections.abc import Callable
from typing import Literal

import equinox as eqx
import jax
import jax.core
import jax.numpy as jnp
from beartype import beartype
from jaxtyping import Array, ArrayLike, Bool, Float, Integer, PRNGKeyArray, PyTree, jaxtyped

from . import _sharding as sharding
from ._abstract_block import AbstractBlock, AbstractStreamingBlock, call_block
from ._block import LRUBlock
from ._block_scan import scan_blocks, stack_blocks
from ._checks import (
    Size,
    check_key,
    check_num_segments,
    check_size,
    check_token_ids,
    float_dtype,
    num_segments_message,
)
from ._dt import check_known_dt, model_dtype
from ._padding import check_length, segment_index, where_valid
from ._prologue import Call, start_call, start_chunk, start_step
from ._runtime_check import runtime_check
from ._streams import running_sum
from ._surface import check_carry, checks_first

Pooling = Literal["mean", "last"] | None
#: `block(d_model, d_state, *, dtype, key)` returning an `eqx_lru.AbstractBlock`.
BlockFactory = Callable[..., AbstractBlock]


def _check_block(block: object, index: int, factory: BlockFactory) -> AbstractBlock:
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


def _split(key: PRNGKeyArray | None, num: int) -> list[PRNGKeyArray | None]:
    return [None] * num if key is None else list(jax.random.split(key, num))


# The checks that run before the type checker of the model's public methods (one line per
# mistake; see `_surface`).


def _check_call(
    model: "LRUModel",
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
    model._check_input(x)
    model._check_known_values(
        x, length=length, segment_ids=segment_ids, num_segments=num_segments, dt=dt
    )


def _check_step(model: "LRUModel", carry, x_t, state=None, *, dt=None, **_) -> None:
    del state
    model._streaming_blocks("step")
    model._check_input(x_t, position=True)
    check_carry(carry, model.init_carry, "LRUModel")
    model._check_known_values(x_t, dt=dt, sequence=False)


def _check_chunk(
    model: "LRUModel", carry, x, state=None, *, length=None, segment_ids=None, dt=None, **_
) -> None:
    del state
    model._streaming_blocks("chunk")
    model._check_input(x)
    check_carry(carry, model.init_carry, "LRUModel")
    model._check_known_values(x, length=length, segment_ids=segment_ids, dt=dt)


class LRUModel(eqx.Module):
    r"""A deep LRU for sequence classification or regression (paper Fig. 1, §D.1).

    $$h^0_t = \operatorname{Enc}(x_t),\quad h^{i} = \operatorname{Block}_i(h^{i-1}),
    \quad \text{out} = \operatorname{Head}(\operatorname{Pool}(h^{\text{depth}})).$$

    The encoder is an `eqx.nn.Embedding` for integer tokens (`encoder="embedding"`) or an
    `eqx.nn.Linear` for real features (`encoder="linear"`); the head is an
    `eqx.nn.Linear(d_model, out_size)` (or nothing, `out_size=None`, to return features).
    The blocks are `LRUBlock`s, configured in one place by `block=`:

    ```python
    block = functools.partial(
        eqx_lru.LRUBlock,
        core=functools.partial(eqx_lru.RealLRU, r_min=0.9, r_max=0.999),
        bidirectional=True, dropout=0.1, glu="half",
    )
    model, state = eqx.nn.make_with_state(eqx_lru.LRUModel)(
        in_size, out_size, d_model, d_state, depth, block=block, key=key
    )
    ```

    **Variable lengths.** `length=ℓ` marks positions `t >= ℓ` as padding. Whatever they
    contain (any token id, `nan`, …), they never change the output at a valid position or
    the pooled output, in training or inference mode, in either direction: inputs are
    zeroed at pads before the encoder, every block masks pads out of its batch-norm
    statistics and zeroes them before its recurrence (see `LRUBlock`), and pooling reads
    valid positions only. Per-step outputs (`pooling=None`) are zero at padded positions.

    **Packed sequences.** `segment_ids=` packs several sequences into one row: each gets
    the outputs (and, with `num_segments=`, the pooled output) it would get alone, and
    batch-norm statistics are those of the sequences as separate rows.

    **Streaming.** A model of causal blocks runs as an RNN: `init_carry()`, then `step`
    per token (generation loops under `jax.lax.scan`, inference mode) or `chunk` per chunk
    (prefill in inference mode, or training by truncated backpropagation through time with
    `inference=False`), each returning the output for the stream so far — with
    `pooling="mean"` a running mean, whose sum and count travel in the carry. Under
    `jax.vmap` every stream has its own `reset` and chunk `length` (see
    `eqx_lru.StreamPool` for slots of streams that come and go).
    A carry that differs from `init_carry()` (another model's, one block short,
    `None`) is refused, naming the first path that differs.

    One example per call: batch with `jax.vmap(model, axis_name="batch", in_axes=(0, None),
    out_axes=(0, None))` (the axis name is needed by batch norm in training mode).
    """

    encoder: eqx.nn.Embedding | eqx.nn.Linear
    blocks: tuple[AbstractBlock, ...]
    head: eqx.nn.Linear | None
    pooling: Pooling = eqx.field(static=True)
    remat: bool = eqx.field(static=True)
    check_tokens: bool = eqx.field(static=True)

    def __init__(
        self,
        in_size: Size,
        out_size: Size | None,
        d_model: Size,
        d_state: Size,
        depth: Size,
        *,
        encoder: Literal["embedding", "linear"] = "linear",
        pooling: Pooling = "mean",
        block: BlockFactory = LRUBlock,
        remat: bool = False,
        check_tokens: bool = True,
        dtype=None,
        key: PRNGKeyArray,
    ):
        r"""**Arguments:**

        - `in_size`: the vocabulary size (`encoder="embedding"`) or the number of input
            features (`encoder="linear"`).
        - `out_size`: classes (or regression targets); `None` for no head (the pooled or
            per-step `d_model` features are returned).
        - `d_model`, `d_state`: $H$ and $N$ of every block.
        - `depth`: the number of blocks (the paper uses 6).
        - `encoder`: `"embedding"` — inputs are integer tokens of shape `(length,)`; or
            `"linear"` — inputs are features of shape `(length, in_size)`.
        - `pooling`: `"mean"` over valid positions, `"last"` valid position, or `None` for
            per-step outputs of shape `(length, out_size)`.
        - `block`: builds each block as `block(d_model, d_state, dtype=dtype, key=key)`:
            `LRUBlock` (default: complex core, batch norm, unidirectional, full GLU) or a
            `functools.partial` of it with the block's options (`core`, `norm`,
            `bidirectional`, `dropout`, `glu`, `remat`, `axis_name`), or your own block:
            a subclass of `eqx_lru.AbstractBlock` (`LRUBlock`'s call signature), or of
            `eqx_lru.AbstractStreamingBlock` to stream (a `TypeError` otherwise).
        - `remat`: recompute each block's forward pass in the backward pass instead of
            storing its intermediates: same values and gradients, memory for the blocks'
            inputs only (plus one block's intermediates), for one more forward pass. The
            blocks run as a `jax.lax.scan` over their stacked parameters with a
            rematerialised body, which bounds memory on every backend (a checkpoint per
            block of an unrolled loop, as `LRUBlock(remat=True)`, lets XLA schedule the
            recomputation early; on the CPU it saves nothing). Bidirectional `LRUBlock`s
            keep their recurrence output, and their backward pass recomputes and
            differentiates one direction after the other, so one direction's states are
            live at a time. Blocks of different structures fall back to one
            `eqx.filter_checkpoint` per block.
        - `check_tokens`: with `encoder="embedding"`, raise if a token id at a valid
            position is outside `[0, in_size)` (JAX would silently clamp it): a
            `ValueError` naming the id when called eagerly, an `eqx.error_if` under `jit`.
            A negligible cost next to the forward pass. `False` skips it.
        - `dtype`: parameter dtype of the encoder, head and blocks, passed on as
            `block(d_model, d_state, dtype=dtype, key=key)`; `LRUBlock` passes it on to
            its cores (whatever the core: the LRU, S4D, S5, …).
        - `key`: a `jax.random.PRNGKey`. The same key gives the same parameters for
            `core="complex"` and `core="real"`.
        """
        in_size, d_model = check_size("in_size", in_size), check_size("d_model", d_model)
        out_size = None if out_size is None else check_size("out_size", out_size)
        d_state, depth = check_size("d_state", d_state), check_size("depth", depth)
        check_key(key)
        dtype = None if dtype is None else float_dtype(dtype)  # an object or a name
        if pooling not in ("mean", "last", None):
            raise ValueError(f"`pooling` must be 'mean', 'last' or None, got {pooling!r}.")
        if not callable(block):
            raise TypeError(f"`block` must be a callable such as LRUBlock, got {block!r}.")
        enc_key, head_key, *block_keys = jax.random.split(key, depth + 2)
        if encoder == "embedding":
            self.encoder = eqx.nn.Embedding(in_size, d_model, dtype=dtype, key=enc_key)
        elif encoder == "linear":
            self.encoder = eqx.nn.Linear(in_size, d_model, dtype=dtype, key=enc_key)
        else:
            raise ValueError(f"`encoder` must be 'embedding' or 'linear', got {encoder!r}.")
        self.blocks = tuple(
            _check_block(block(d_model, d_state, dtype=dtype, key=k), i, block)
            for i, k in enumerate(block_keys)
        )
        self.head = (
            None
            if out_size is None
            else eqx.nn.Linear(d_model, out_size, dtype=dtype, key=head_key)
        )
        self.pooling = pooling
        self.remat = remat
        self.check_tokens = check_tokens

    @property
    def d_model(self) -> int:
        """The width of the residual stream (the encoder's output size)."""
        if isinstance(self.encoder, eqx.nn.Embedding):
            return self.encoder.weight.shape[-1]
        return int(self.encoder.out_features)  # an int here, never Linear's "scalar"

    def _check_input(self, x: ArrayLike, *, position: bool = False) -> Array:
        """`x` as an array, or a `ValueError` saying what the encoder takes: a sequence
        `x` of at least one position, or with `position=True` one position `x_t` (a
        stream's `step`)."""
        x = jnp.asarray(x)
        if isinstance(self.encoder, eqx.nn.Embedding):
            encodes, dtype, shape = "embeds tokens (`encoder='embedding'`)", jnp.integer, ()
            one, many = "one integer token id (a scalar)", "an integer array of shape (length,)"
        else:
            size = self.encoder.in_features
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

    def _check_known_values(
        self,
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
        if isinstance(self.encoder, eqx.nn.Embedding) and self.check_tokens:
            check_token_ids(x, self.encoder.num_embeddings, valid=length, value=x)
        size = jnp.shape(x)[0] if sequence else None
        check_known_dt(dt, length, size, model_dtype(self))
        if segment_ids is not None and isinstance(num_segments, int) and self.pooling:
            check_num_segments(segment_ids, length, num_segments)

    def _encode(self, x: Array, mask: Array | None) -> Array:
        # Sanitise pads first: an out-of-range token or a `nan` feature must not reach
        # any computation (not even through a zero-weighted gradient).
        x = where_valid(mask, x)
        if isinstance(self.encoder, eqx.nn.Embedding) and self.check_tokens:
            x = _check_token_ids(x, self.encoder.num_embeddings)
        return jax.vmap(self.encoder)(x)

    def _features(
        self, x, state, *, length, segment_ids, dt, key, inference
    ) -> tuple[Array, eqx.nn.State, Call]:
        """The last block's outputs on one sequence, the state, and the checked arguments
        (`start_call`'s prologue; the blocks check and mask `dt`)."""
        c = start_call(self, x, core=None, length=length, segment_ids=segment_ids, dt=dt)
        h = self._encode(c.x, c.mask)
        stacked = stack_blocks(self.blocks) if self.remat else None
        if stacked is not None:
            h, state = scan_blocks(
                self.blocks, stacked, h, state, length=length, segment_ids=c.segment_ids,
                dt=c.dt, key=key, inference=inference,
            )  # fmt: skip
            return h, state, c
        call = eqx.filter_checkpoint(call_block) if self.remat else call_block
        for block, block_key in zip(self.blocks, _split(key, len(self.blocks)), strict=True):
            h, state = call(
                block, h, state, length=length, segment_ids=c.segment_ids, dt=c.dt,
                key=block_key, inference=inference,
            )  # fmt: skip
        return h, state, c

    @checks_first(_check_call)
    @jaxtyped(typechecker=beartype)
    def features(
        self,
        x: Integer[ArrayLike, " length"] | Float[ArrayLike, "length in_size"],
        state: eqx.nn.State,
        *,
        length: Integer[ArrayLike, ""] | None = None,
        segment_ids: Integer[ArrayLike, " length"] | None = None,
        dt: ArrayLike | None = None,
        key: PRNGKeyArray | None = None,
        inference: bool | None = None,
    ) -> tuple[Float[Array, "length d_model"], eqx.nn.State]:
        """The last block's per-step outputs (before pooling and head); zero at pads.

        Same arguments as `__call__`.
        """
        x = self._check_input(x)
        h, state, _ = self._features(
            x, state, length=length, segment_ids=segment_ids, dt=dt, key=key, inference=inference
        )
        return h, state

    @checks_first(_check_call)
    @jaxtyped(typechecker=beartype)
    def __call__(
        self,
        x: Integer[ArrayLike, " length"] | Float[ArrayLike, "length in_size"],
        state: eqx.nn.State,
        *,
        length: Integer[ArrayLike, ""] | None = None,
        segment_ids: Integer[ArrayLike, " length"] | None = None,
        num_segments: Size | None = None,
        dt: ArrayLike | None = None,
        key: PRNGKeyArray | None = None,
        inference: bool | None = None,
    ) -> tuple[Float[Array, "..."], eqx.nn.State]:
        """Run the model on one sequence (or several packed into one row).

        **Arguments:**

        - `x`: integer tokens of shape `(length,)` or features of shape
            `(length, in_size)`, per `encoder`; `length >= 1` (a JAX or NumPy array).
        - `state`: the `eqx.nn.State` from `eqx.nn.make_with_state(LRUModel)(...)`
            (batch-norm running statistics).
        - `length`: number of valid leading positions, `1 <= length <= x.shape[0]`, a
            scalar of any integer dtype; the rest is padding. `None`: all valid.
        - `segment_ids`: packed sequences: integers of shape `(length,)`, a new sequence
            wherever the value changes (`[0, 0, 0, 1, 1, 2]`: three). No state crosses a
            boundary in any block, in either direction, and batch-norm statistics are
            those of the sequences unpacked (see `LRUBlock`): each sequence's outputs are
            those of the sequence run alone. Padding (`length`) is not a sequence.
        - `num_segments`: with `segment_ids` and pooling, the number of pooled outputs
            (a Python int, static): one per sequence in order of appearance, zero rows
            after the last sequence; more sequences than that raise an error (at run
            time under `jit`). Needed with pooling and `segment_ids`, refused otherwise.
        - `dt`: time steps, `(length,)` (the gap before each position) or a scalar, given
            to every block (see `LRUBlock`; steps at padded positions are ignored); blocks
            whose cores take no time steps refuse it (`TypeError`). Over a sequence split
            across devices, split `dt` as the input. `None`: none.
        - `key`: for dropout (split across blocks); needed in training mode when
            `dropout > 0`. Give each example its own key.
        - `inference`: overrides the `inference` flags (see `eqx.nn.inference_mode`) if
            not `None`. Inference mode: running batch-norm statistics, state unchanged, no
            dropout.

        **Returns:** `(out, new_state)`; `out` has shape `(out_size,)` with pooling,
        `(num_segments, out_size)` with pooling and `segment_ids`, `(length, out_size)`
        with `pooling=None` (zero at pads), `d_model` in place of `out_size` if
        `out_size is None`.
        """
        x = self._check_input(x)
        num_segments = self._check_num_segments(segment_ids, num_segments)
        if num_segments is not None:
            sharding.refuse(self, "Pooling per packed sequence (`segment_ids=` with pooling)")
        h, state, c = self._features(
            x, state, length=length, segment_ids=segment_ids, dt=dt, key=key, inference=inference
        )
        mask, segment_ids = c.mask, c.segment_ids
        if self.pooling is None:
            out = h if self.head is None else jax.vmap(self.head)(h)
            return where_valid(mask, out), state
        if segment_ids is not None and num_segments is not None:  # both or neither, here
            pooled, present = _pool_segments(self.pooling, h, mask, segment_ids, num_segments)
            out = pooled if self.head is None else jax.vmap(self.head)(pooled)
            return jnp.where(present[:, None], out, 0), state
        # Mean over valid positions or the last one (across devices, see `_sharding.pool`).
        pooled = sharding.pool(h, mask, length, self.pooling, sharding.sequence_axis(self))
        out = pooled if self.head is None else self.head(pooled)
        return out, state

    def _check_num_segments(self, segment_ids, num_segments) -> int | None:
        if segment_ids is None or self.pooling is None:
            if num_segments is not None:
                raise ValueError(
                    "`num_segments` is the number of pooled outputs of packed sequences: "
                    "give it with `segment_ids` to a model with pooling, or leave it None "
                    f"(got {num_segments!r} with pooling={self.pooling!r} and "
                    f"segment_ids={'None' if segment_ids is None else 'given'})."
                )
            return None
        if num_segments is None:
            raise ValueError(
                f"With `segment_ids`, a model with pooling={self.pooling!r} returns one "
                "pooled output per packed sequence: pass `num_segments=` (a Python int, "
                "the most sequences a row holds; the output has that many rows), or use "
                "`pooling=None` for per-position outputs."
            )
        return check_size("num_segments", num_segments)

    # --- streaming: a causal model as an RNN ----------------------------------------------

    def _streaming_blocks(self, method: str) -> tuple[AbstractStreamingBlock, ...]:
        """The blocks, or a `TypeError` naming the first that cannot stream."""
        streaming = []
        for i, block in enumerate(self.blocks):
            if not isinstance(block, AbstractStreamingBlock):
                raise TypeError(
                    f"`LRUModel.{method}` runs every block as an RNN, and block {i} "
                    f"({type(block).__name__}) is not an eqx_lru.AbstractStreamingBlock, "
                    "so it has no `init_carry`/`step`/`chunk`: use `LRUBlock`s, or subclass "
                    "eqx_lru.AbstractStreamingBlock and implement these methods."
                )
            streaming.append(block)
        return tuple(streaming)

    def init_carry(self) -> PyTree[Array]:
        """The recurrent state of a stream before its first position: a dict with
        `"blocks"`, the tuple of every block's `init_carry()` (its core's state), and
        with `pooling="mean"` also `"sum"` (of the last block's outputs so far, `(d_model,)`)
        and `"count"` (positions so far, an int32 scalar that saturates at 2**31 - 1).

        Causal models only: a bidirectional block raises a `ValueError` (its output at a
        position depends on later positions).
        """
        blocks = self._streaming_blocks("init_carry")
        carry: dict = {"blocks": tuple(block.init_carry() for block in blocks)}
        if self.pooling == "mean":
            dtype = _sum_dtype(self.encoder)
            carry["sum"] = jnp.zeros(self.d_model, dtype)
            carry["count"] = jnp.zeros((), jnp.int32)
        return carry

    def _readout(self, carry: dict, h: Array, mask: Array | None) -> tuple[dict, Array]:
        """The outputs of a chunk's (or a step's) last-block features `h`, `(n, d_model)`,
        and the carry's running sum for mean pooling. A chunk with no valid position
        gives zero outputs."""
        if self.pooling is None:
            out = h if self.head is None else jax.vmap(self.head)(h)
            return carry, where_valid(mask, out)
        size = h.shape[0] if mask is None else jnp.sum(mask, dtype=jnp.int32)
        if self.pooling == "mean":
            added = jnp.sum(where_valid(mask, h), axis=0).astype(carry["sum"].dtype)
            # The count saturates at 2**31 - 1, never wraps (`_streams.running_sum`).
            total, count = running_sum(carry["sum"], carry["count"], added, size)
            carry = dict(carry, sum=total, count=count)
            # `max`: no 0/0 (whose gradient would be nan) for a stream with nothing yet.
            pooled = (total / jnp.maximum(count, 1).astype(total.dtype)).astype(h.dtype)
        else:
            pooled = h[jnp.maximum(size - 1, 0)]
        out = pooled if self.head is None else self.head(pooled)
        return carry, out if mask is None else jnp.where(size > 0, out, 0)

    @checks_first(_check_step)
    @jaxtyped(typechecker=beartype)
    def step(
        self,
        carry: PyTree[ArrayLike],
        x_t: Integer[ArrayLike, ""] | Float[ArrayLike, " in_size"],
        state: eqx.nn.State,
        *,
        reset: Bool[ArrayLike, ""] | None = None,
        dt: ArrayLike | None = None,
    ) -> tuple[PyTree[Array], Float[Array, " out_size"]]:
        r"""One position of a stream in inference mode (running batch-norm statistics,
        no dropout): every block's `step`, then the head.

        **Arguments:**

        - `carry`: from `init_carry()`, `step` or `chunk`.
        - `x_t`: one token id, an integer scalar (`encoder="embedding"`), or one feature
            vector of shape `(in_size,)` (`encoder="linear"`).
        - `state`: the model's `eqx.nn.State` (read, not updated).
        - `reset`: a boolean scalar; `True` starts a new sequence at this position (from
            `init_carry()`, whatever `carry` holds: every block's state and the running
            sum and count of mean pooling). Under `jax.vmap` one per stream, so one slot
            starts a new request while the others continue. `None`: `False`.
        - `dt`: this position's time step, a positive scalar (the gap since the previous
            position), for blocks whose cores take it; `None`: none.

        **Returns:** `(carry, out_t)`: the output for the stream so far, as `__call__` in
        inference mode on the prefix $x_0, \dots, x_t$ would return it — with
        `pooling=None` the output at position $t$, with `"last"` the same (the prefix's
        last position), with `"mean"` the head of the running mean of the last block's
        outputs (the carry holds their sum and count). Shape `(out_size,)` (`(d_model,)`
        without a head).

        `jax.lax.scan(lambda c, x: model.step(c, x, state), model.init_carry(), xs)`
        streams a sequence; `jax.vmap` it over a batch of streams.
        """
        streaming = self._streaming_blocks("step")
        x_t = self._check_input(x_t, position=True)
        carry, x_t, dt = start_step(
            carry, x_t, core=None, init_carry=self.init_carry, reset=reset, dt=dt
        )
        h = self._encode(x_t[None], None)[0]
        blocks = []
        for block, block_carry in zip(streaming, carry["blocks"], strict=True):
            block_carry, h = block.step(block_carry, h, state, dt=dt)
            blocks.append(block_carry)
        carry, out = self._readout(dict(carry, blocks=tuple(blocks)), h[None], None)
        return carry, out[0] if self.pooling is None else out

    @checks_first(_check_chunk)
    @jaxtyped(typechecker=beartype)
    def chunk(
        self,
        carry: PyTree[ArrayLike],
        x: Integer[ArrayLike, " length"] | Float[ArrayLike, "length in_size"],
        state: eqx.nn.State,
        *,
        length: Integer[ArrayLike, ""] | None = None,
        segment_ids: Integer[ArrayLike, " length"] | None = None,
        reset: Bool[ArrayLike, ""] | None = None,
        inference: bool = True,
        key: PRNGKeyArray | None = None,
        carry_gradient: bool = False,
        dt: ArrayLike | None = None,
    ) -> tuple[PyTree[Array], Float[Array, "..."]]:
        r"""The next chunk of a stream, in parallel, from `carry`: every block's `chunk`.
        Chunked prefill in inference mode (the default), or a training chunk of truncated
        backpropagation through time (`inference=False`).

        **Arguments:**

        - `carry`: from `init_carry()` (first chunk), `step` or `chunk`.
        - `x`: the chunk, tokens `(length,)` or features `(length, in_size)`.
        - `state`: the model's `eqx.nn.State` (read, not updated).
        - `length`: the number of valid leading positions of the chunk, the rest being
            padding with any content; `None`: all valid. Pad chunks of different lengths
            to one shape to compile once. 0 is allowed (a stream with nothing new in a
            call over many streams): the carry is kept and the output is zero.
        - `segment_ids`: packed sequences in the chunk (see `LRUBlock.chunk`): the first
            continues the stream, each later one starts from the zero state, and the
            returned carry is the last one's. Only with `pooling=None` (a pooled output
            would have to end every sequence but the last).
        - `reset`: a boolean scalar; `True` starts a new sequence at the chunk's first
            position (from `init_carry()`, the running sum and count of mean pooling
            included). Under `jax.vmap` one per stream. `None`: `False`.
        - `inference`: `True` (default, as this method always was): running batch-norm
            statistics, no dropout. `False`: training mode (dropout with `key`, split
            across the blocks as the call does); batch norm refuses (its statistics span
            whole sequences): build the blocks with `norm="layer"` or `norm=None`. The
            modules' own inference flags are not read.
        - `key`: for dropout in training mode; a chunk from `init_carry()` with key `k`
            gives the call's outputs with key `k`.
        - `carry_gradient`: `False` (default): the incoming carry is a constant of the
            gradient (`jax.lax.stop_gradient`): exact gradients within the chunk, none
            into earlier chunks (truncated backpropagation through time). `True`:
            gradients flow into the carry, so a `jax.lax.scan` of chunks has the
            gradient of the whole sequence.
        - `dt`: the chunk's time steps, `(length,)` or a scalar, as in the call (the first
            is the gap since the previous chunk's last position).

        **Returns:** `(carry, out)`: the carry after the chunk's last valid position, and
        what `__call__` returns for the stream so far (all chunks since `init_carry()` or
        the last reset): with `pooling=None` this chunk's outputs, `(length, out_size)`,
        zero at pads; with pooling the pooled output `(out_size,)` of the whole stream so
        far (`"last"`: at the chunk's last valid position; `"mean"`: over every valid
        position of every chunk). Chunks of any lengths give the outputs and final carry
        of `step` position by position.
        """
        streaming = self._streaming_blocks("chunk")
        x = self._check_input(x)
        if segment_ids is not None and self.pooling is not None:
            raise ValueError(
                "`LRUModel.chunk` takes `segment_ids` only with `pooling=None`: with "
                f"pooling={self.pooling!r} the stream has one pooled output, and packed "
                "sequences would each need their own. Stream each sequence from "
                "`init_carry()`, or pool packed sequences with the model's call "
                "(`segment_ids=`, `num_segments=`)."
            )
        c = start_chunk(
            self, "LRUModel.chunk", carry, x, core=None, init_carry=self.init_carry,
            length=length, segment_ids=segment_ids, reset=reset,
            carry_gradient=carry_gradient, dt=dt,
        )  # fmt: skip
        h = self._encode(c.x, c.mask)
        blocks = []
        keys = _split(key, len(streaming))
        for block, block_carry, block_key in zip(streaming, c.carry["blocks"], keys, strict=True):
            block_carry, h = block.chunk(
                block_carry, h, state, length=c.valid, segment_ids=c.segment_ids,
                inference=inference, key=block_key, carry_gradient=carry_gradient, dt=c.dt,
            )  # fmt: skip
            blocks.append(block_carry)
        return self._readout(dict(c.carry, blocks=tuple(blocks)), h, c.mask)


def _sum_dtype(encoder) -> jnp.dtype:
    """The dtype of mean pooling's running sum: the parameters', at least float32."""
    dtype = encoder.weight.dtype
    return dtype if jnp.finfo(dtype).bits >= 32 else jnp.dtype(jnp.float32)


def _pool_segments(
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


def _check_token_ids(x: Array, vocab_size: int) -> Array:
    """`x`, with an error if an id is outside `[0, vocab_size)` (`_checks.check_token_ids`:
    a `ValueError` when `x` is known, else a run-time error)."""
    return check_token_ids(x, vocab_size)
