r"""Deep LRU models: encoder → depth × block → pooling → head (paper Fig. 1, §D.1)."""

from typing import Literal

import equinox as eqx
import jax
import jax.core
import jax.numpy as jnp
from beartype import beartype
from jaxtyping import Array, ArrayLike, Bool, Float, Integer, PRNGKeyArray, PyTree, jaxtyped

from .._blocks._abstract_block import AbstractBlock, call_block
from .._blocks._block import LRUBlock
from .._blocks._block_scan import scan_blocks, stack_blocks
from .._blocks._prologue import Call, start_call
from .._checks import (
    Size,
    check_key,
    check_size,
    float_dtype,
)
from .._padding import where_valid
from .._scan import _sharding as sharding
from .._surface import checks_first
from ._model_io import (
    BlockFactory,
    Pooling,
    check_block,
    check_call_args,
    check_chunk_args,
    check_input,
    check_known_values,
    check_num_segments,
    check_step_args,
    encode,
    pool_segments,
)
from ._model_stream import init_carry, split_keys, stream_chunk, stream_step


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
        d_state = check_size("d_state", d_state, "LRUModel: every block's d_state")
        depth = check_size("depth", depth)
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
            check_block(block(d_model, d_state, dtype=dtype, key=k), i, block)
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

    def _check_known_values(self, x, **values) -> None:
        """`_model_io.check_known_values` (what `eqx_lru.LRURetrievalModel` checks per document)."""
        check_known_values(self, x, **values)

    def _features(
        self, x, state, *, length, segment_ids, dt, key, inference
    ) -> tuple[Array, eqx.nn.State, Call]:
        """The last block's outputs on one sequence, the state, and the checked arguments
        (`start_call`'s prologue; the blocks check and mask `dt`)."""
        c = start_call(self, x, core=None, length=length, segment_ids=segment_ids, dt=dt)
        h = encode(self, c.x, c.mask)
        stacked = stack_blocks(self.blocks) if self.remat else None
        if stacked is not None:
            h, state = scan_blocks(
                self.blocks, stacked, h, state, length=length, segment_ids=c.segment_ids,
                dt=c.dt, key=key, inference=inference,
            )  # fmt: skip
            return h, state, c
        call = eqx.filter_checkpoint(call_block) if self.remat else call_block
        for block, block_key in zip(self.blocks, split_keys(key, len(self.blocks)), strict=True):
            h, state = call(
                block, h, state, length=length, segment_ids=c.segment_ids, dt=c.dt,
                key=block_key, inference=inference,
            )  # fmt: skip
        return h, state, c

    @checks_first(check_call_args)
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
        x = check_input(self, x)
        h, state, _ = self._features(
            x, state, length=length, segment_ids=segment_ids, dt=dt, key=key, inference=inference
        )
        return h, state

    @checks_first(check_call_args)
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
        x = check_input(self, x)
        num_segments = check_num_segments(self, segment_ids, num_segments)
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
            pooled, present = pool_segments(self.pooling, h, mask, segment_ids, num_segments)
            out = pooled if self.head is None else jax.vmap(self.head)(pooled)
            return jnp.where(present[:, None], out, 0), state
        # Mean over valid positions or the last one (across devices, see `_sharding.pool`).
        pooled = sharding.pool(h, mask, length, self.pooling, sharding.sequence_axis(self))
        out = pooled if self.head is None else self.head(pooled)
        return out, state

    # --- streaming: a causal model as an RNN ----------------------------------------------

    def init_carry(self) -> PyTree[Array]:
        """The recurrent state of a stream before its first position: a dict with
        `"blocks"`, the tuple of every block's `init_carry()` (its core's state), and
        with `pooling="mean"` also `"sum"` (of the last block's outputs so far, `(d_model,)`)
        and `"count"` (positions so far, an int32 scalar that saturates at 2**31 - 1).

        Causal models only: a bidirectional block raises a `ValueError` (its output at a
        position depends on later positions).
        """
        return init_carry(self)

    @checks_first(check_step_args)
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
        return stream_step(self, carry, x_t, state, reset=reset, dt=dt)

    @checks_first(check_chunk_args)
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
        return stream_chunk(
            self, carry, x, state, length=length, segment_ids=segment_ids, reset=reset,
            inference=inference, key=key, carry_gradient=carry_gradient, dt=dt,
        )  # fmt: skip
