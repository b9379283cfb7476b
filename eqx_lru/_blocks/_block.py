r"""The residual block of the deep LRU (paper Fig. 1, §D.1).

$$y = x + \operatorname{Dropout}\big(\operatorname{GLU}(\operatorname{GELU}(
\operatorname{Rec}(\operatorname{Norm}(x))))\big)$$

applied to one sequence `x` of shape `(length, d_model)`. Padded positions (those at or
after `length`) are masked so they never change an output at a valid position.
"""

from collections.abc import Hashable, Sequence
from typing import Literal

import equinox as eqx
import jax
from beartype import beartype
from jaxtyping import Array, ArrayLike, Bool, Float, Integer, PRNGKeyArray, PyTree, jaxtyped

from .._checks import Size, check_float, check_key, check_size, float_dtype
from .._cores._core import AbstractRecurrentCore
from .._cores._core_factory import Core, build_core, core_factory
from .._padding import where_valid
from .._surface import check_carry, check_features, checks_first
from ._abstract_block import AbstractStreamingBlock
from ._block_formula import call, normalise, residual
from ._glu import GLU
from ._norm import MaskedBatchNorm
from ._prologue import start_chunk, start_step
from ._streams import keep_when_empty

# The checks that run before the type checker of the block's public methods (one line per
# mistake; see `_surface`).


def _check_call(block: "LRUBlock", x, *args, **kwargs) -> None:
    del args, kwargs
    check_features(x, block.d_model, name="x", owner="LRUBlock")


def _check_step(block: "LRUBlock", carry, x_t, *args, **kwargs) -> None:
    del args, kwargs
    block._causal_core("step")
    check_features(x_t, block.d_model, name="x_t", owner="LRUBlock", position=True)
    check_carry(carry, block.init_carry, "LRUBlock")


def _check_chunk(block: "LRUBlock", carry, x, *args, **kwargs) -> None:
    del args, kwargs
    block._causal_core("chunk")
    check_features(x, block.d_model, name="x", owner="LRUBlock")
    check_carry(carry, block.init_carry, "LRUBlock")


class LRUBlock(AbstractStreamingBlock):
    r"""The pre-norm residual block of the deep LRU (paper Fig. 1, §D.1):

    $$y = x + \operatorname{Dropout}\big(\operatorname{GLU}(\operatorname{GELU}(
    \operatorname{Rec}(\operatorname{Norm}(x))))\big).$$

    `Rec` is one recurrent core, or with `bidirectional=True` a forward and a reverse
    core whose outputs are **summed**,
    $\operatorname{Rec}(z) = \overrightarrow{\text{core}}(z) + \overleftarrow{\text{core}}(z)$.
    For the LRU this is $C_f x^{\rightarrow} + C_b x^{\leftarrow} + (D_f + D_b) u$: the
    same function class as S5's bidirectional layer (one output map on the concatenated
    states), and S4's summed kernels, with no extra parameters or width; it keeps the
    core contract one call per direction, so any core works bidirectionally.

    **Padding.** With `length=ℓ`, positions `t >= ℓ` are padding and never change the
    output at a valid position: the input is zeroed there, batch-norm statistics skip them
    (`MaskedBatchNorm`), and the recurrence input is zeroed there, so a reverse scan that
    starts at the padded end carries an exactly-zero state until it reaches `ℓ - 1`. The
    output is zero at padded positions.

    **Packed sequences.** `segment_ids=` runs several sequences packed into one row as if
    they were separate: the cores reset their state at every boundary (both directions),
    everything else acts per position or on valid-position statistics.

    **Streaming.** A causal (unidirectional) block is also an RNN: `init_carry()`, then
    `step` position by position or `chunk` over chunks in parallel, carrying the core's
    state, equal to the call on the whole sequence. `step` is inference mode; `chunk`
    also trains (`inference=False`: truncated backpropagation through time, with layer
    norm or no norm; batch norm's statistics span whole sequences, so it refuses). Under
    `jax.vmap` each stream has its own `reset` and chunk `length`. A bidirectional block
    refuses (its output depends on later positions). A carry that differs from
    `init_carry()` in structure, shapes or dtypes is refused, naming the first difference.

    **Recurrent cores.** `core=` is the one knob of the recurrence: `"complex"`,
    `"real"`, or a callable `make_core(d_model, d_state, *, key)` returning an
    `eqx_lru.AbstractRecurrentCore` (the LRU forms, `eqx_lru.ablation`'s and
    `eqx_lru.baselines`' cores, or your own subclass) — e.g.
    `functools.partial(eqx_lru.RealLRU, r_min=0.9, method="associative")`: the ring,
    scan method, precision and storage dtype are options of the core. The block relies on
    the contract only: it calls `core(u)` and `core(u, reverse=True)`; for the padding
    guarantee the core must be `causal` (see `AbstractRecurrentCore`), and its
    `recurrent_fields` give the optimiser's recurrent group (see `lru_param_labels`).
    `eqx_lru.to_real` / `eqx_lru.to_complex` convert the cores of a block (or any pytree)
    between forms.

    **Remat.** `remat=True` checkpoints the whole block (`__call__`). An enclosing
    rematerialised scan over blocks (`LRUModel(remat=True)`) calls `scan_body` instead.
    """

    norm: MaskedBatchNorm | eqx.nn.LayerNorm | None
    core: AbstractRecurrentCore
    reverse_core: AbstractRecurrentCore | None
    glu: GLU
    dropout: eqx.nn.Dropout
    remat: bool = eqx.field(static=True)

    def __init__(
        self,
        d_model: Size,
        d_state: Size,
        *,
        core: Core = "complex",
        norm: Literal["batch", "layer"] | None = "batch",
        bidirectional: bool = False,
        dropout: float = 0.0,
        glu: Literal["full", "half"] = "full",
        remat: bool = False,
        axis_name: Hashable | Sequence[Hashable] = "batch",
        dtype=None,
        key: PRNGKeyArray,
    ):
        r"""**Arguments:**

        - `d_model`: $H$, the features of the residual stream.
        - `d_state`: $N$, the state size passed to the core (LRU: complex modes).
        - `core`: `"complex"` (`ComplexLRU`), `"real"` (`RealLRU`; same parameters, same
            function, real arithmetic only) — both with their default options — or a
            callable `make_core(d_model, d_state, *, key)` returning an
            `eqx_lru.AbstractRecurrentCore` (see above).
        - `norm`: `"batch"` (`MaskedBatchNorm`, what the paper used) or `"layer"`
            (`eqx.nn.LayerNorm`, per position; no batch axis needed). With layer norm the
            block still takes and returns a state, unchanged, so model code is uniform.
            `None`: no norm (the recurrence reads the residual stream itself); what
            training by chunks needs besides layer norm.
        - `bidirectional`: add a reverse core (own parameters) and sum the two outputs.
        - `dropout`: dropout rate after the GLU (active in training mode only).
        - `glu`: `"full"` or `"half"` (see `GLU`).
        - `remat`: recompute the block's forward pass in the backward pass
            (`eqx.filter_checkpoint`) instead of storing its intermediates: the same values
            and gradients (bidirectional: the backward pass recomputes and differentiates
            one direction after the other). XLA may schedule the recomputation early, so
            for one block it may save little; for a stack of blocks use
            `LRUModel(remat=True)`, which scans over the blocks and does bound the memory
            (measured on the documentation's performance page).
        - `axis_name`: the `jax.vmap` axis name batch norm reduces over in training.
        - `dtype`: parameter dtype of the norm, the GLU and the cores (default: JAX's
            default float). When not `None` it is passed to the core factory as
            `make_core(d_model, d_state, dtype=dtype, key=key)` (a `TypeError` if the
            factory takes no `dtype`), so `LRUModel(dtype=...)` reaches every core:
            the LRU's, S4D's, S5's, the ablation cores'.
        - `key`: a `jax.random.PRNGKey`. The same key gives the same parameters for
            `core="complex"` and `core="real"`.
        """
        d_model = check_size("d_model", d_model)
        d_state = check_size(
            "d_state", d_state, "LRUBlock: its core's state size, the LRU's complex modes N"
        )
        check_key(key)
        dtype = None if dtype is None else float_dtype(dtype)  # an object or a name
        check_float("dropout", dropout, low=0, high=1, high_open=True, owner="LRUBlock")
        core_factory(core)  # check `core` before building anything
        core_key, reverse_key, glu_key = jax.random.split(key, 3)
        if norm == "batch":
            self.norm = MaskedBatchNorm(d_model, axis_name, dtype=dtype)
        elif norm == "layer":
            self.norm = eqx.nn.LayerNorm(d_model, dtype=dtype)
        elif norm is None:
            self.norm = None
        else:
            raise ValueError(f"`norm` must be 'batch', 'layer' or None, got {norm!r}.")
        self.core = build_core(core, d_model, d_state, dtype=dtype, key=core_key)
        self.reverse_core = (
            build_core(core, d_model, d_state, dtype=dtype, key=reverse_key)
            if bidirectional
            else None
        )
        self.glu = GLU(d_model, glu, dtype, key=glu_key)
        self.dropout = eqx.nn.Dropout(dropout)
        self.remat = remat

    @property
    def d_model(self) -> int:
        """The width of the residual stream."""
        return int(self.glu.linear.in_features)  # an int here, never Linear's "scalar"

    @property
    def bidirectional(self) -> bool:
        return self.reverse_core is not None

    @checks_first(_check_call)
    @jaxtyped(typechecker=beartype)
    def __call__(
        self,
        x: Float[ArrayLike, "length d_model"],
        state: eqx.nn.State,
        *,
        length: Integer[ArrayLike, ""] | None = None,
        segment_ids: Integer[ArrayLike, " length"] | None = None,
        dt: ArrayLike | None = None,
        key: PRNGKeyArray | None = None,
        inference: bool | None = None,
    ) -> tuple[Float[Array, "length d_model"], eqx.nn.State]:
        """Run the block on one sequence; batch with `jax.vmap(..., axis_name=...)`.

        **Arguments:**

        - `x`: shape `(length, d_model)`, `length >= 1` (a JAX or NumPy array).
        - `state`: the `eqx.nn.State` from `eqx.nn.make_with_state(LRUBlock)(...)`.
        - `length`: number of valid leading positions, a scalar of any integer dtype, (the
            rest is padding, with any content); `None` means all valid.
        - `segment_ids`: packed sequences: integers of shape `(length,)`, a new sequence
            wherever the value changes (`[0, 0, 0, 1, 1, 2]`: three). No state crosses a
            boundary, in either direction, and the rest of the block acts per position,
            so every segment's outputs are those of the segment run alone; batch-norm
            statistics (over valid positions) are those of the segments as separate
            sequences. `None`: one sequence.
        - `dt`: time steps for a core that takes them (`core.takes_dt`; see the concepts
            page on time steps): `(length,)`, the gap before each position, or a scalar;
            a bidirectional block gives its reverse core the gaps after each position
            (`dt[k + 1]`; at the end of each run, the last valid position or a segment's
            last, its own `dt[k]`). Steps at padded positions are ignored (any value).
            A core without time steps refuses `dt` (`TypeError`). `None`: none.
        - `key`: for dropout; needed in training mode when `dropout > 0`.
        - `inference`: overrides the `inference` flags of the norm and dropout (as set by
            `eqx.nn.inference_mode`) if not `None`. Inference mode: batch norm uses running
            statistics and leaves the state unchanged; no dropout.

        **Returns:** `(y, new_state)`, `y` of shape `(length, d_model)`, zero at padded
        positions.
        """
        return call(
            self, x, state, length=length, segment_ids=segment_ids, dt=dt, key=key,
            inference=inference, checkpoint=self.remat, sequential=self.remat,
        )  # fmt: skip

    @checks_first(_check_call)
    @jaxtyped(typechecker=beartype)
    def scan_body(
        self,
        x: Float[ArrayLike, "length d_model"],
        state: eqx.nn.State,
        *,
        length: Integer[ArrayLike, ""] | None = None,
        segment_ids: Integer[ArrayLike, " length"] | None = None,
        dt: ArrayLike | None = None,
        key: PRNGKeyArray | None = None,
        inference: bool | None = None,
    ) -> tuple[Float[Array, "length d_model"], eqx.nn.State]:
        """The block as the body of an enclosing rematerialised scan over blocks — what
        `LRUModel(remat=True)` runs. The same values and gradients as `__call__`, for
        a caller that checkpoints the body itself (with
        `jax.checkpoint_policies.save_only_these_names(self.remat_name)`):

        - no checkpoint of the block's own, whatever its `remat` (a nested one would hide
            the saved output from the enclosing policy);
        - a bidirectional block's summed recurrence output is named `self.remat_name`
            (`jax.ad_checkpoint.checkpoint_name`; see `eqx_lru.AbstractBlock`), so the
            enclosing policy can keep it and the recomputation reruns no scan;
        - a bidirectional block's backward pass recomputes and differentiates one
            direction after the other, so one direction's states are live at a time.

        Same arguments and returns as `__call__`.
        """
        return call(
            self, x, state, length=length, segment_ids=segment_ids, dt=dt, key=key,
            inference=inference, checkpoint=False, sequential=True,
        )  # fmt: skip

    # --- streaming: a causal block as an RNN ----------------------------------------------

    def _causal_core(self, method: str) -> AbstractRecurrentCore:
        """The block's core, or an error saying why this block cannot stream."""
        if self.reverse_core is not None:
            raise ValueError(
                f"`LRUBlock.{method}` needs a causal block, and this one is bidirectional "
                "(`bidirectional=True`): its reverse core reads the sequence from the end, "
                "so the output at a position depends on later positions, which no state "
                "carried from earlier ones can provide. Stream with `bidirectional=False`, "
                "or run whole sequences with the block's call."
            )
        if not self.core.causal:
            raise ValueError(
                f"`LRUBlock.{method}` needs a causal core; {type(self.core).__name__} "
                "declares `causal = False` (its output at a position depends on later "
                "positions), so it cannot run as an RNN."
            )
        return self.core

    def init_carry(self) -> PyTree[Array]:
        """The recurrent state before the first position: the core's `init_state()`.

        Causal (unidirectional) blocks only: a bidirectional block raises a `ValueError`
        (its output at a position depends on later positions).
        """
        return self._causal_core("init_carry").init_state()

    @checks_first(_check_step)
    @jaxtyped(typechecker=beartype)
    def step(
        self,
        carry: PyTree[ArrayLike],
        x_t: Float[ArrayLike, " d_model"],
        state: eqx.nn.State,
        *,
        reset: Bool[ArrayLike, ""] | None = None,
        dt: ArrayLike | None = None,
    ) -> tuple[PyTree[Array], Float[Array, " d_model"]]:
        r"""One position in inference mode (running batch-norm statistics, no dropout),
        the recurrence by the core's `step`: $(c_{t-1}, x_t) \mapsto (c_t, y_t)$.

        **Arguments:**

        - `carry`: the recurrent state, from `init_carry()`, `step` or `chunk`.
        - `x_t`: one position, shape `(d_model,)`.
        - `state`: the block's `eqx.nn.State` (read, not updated).
        - `reset`: a boolean scalar; `True` starts a new sequence at this position (from
            `init_carry()`, whatever `carry` holds). Under `jax.vmap` one per stream, so
            one slot restarts while the others continue. `None`: `False`.
        - `dt`: this position's time step, a positive scalar (a core that takes it).

        **Returns:** `(carry, y_t)`. Repeated from `init_carry()` over a sequence (e.g. by
        `jax.lax.scan`): the block's call in inference mode, position by position.
        """
        core = self._causal_core("step")
        carry, x_t, dt = start_step(self, carry, x_t, core=core, reset=reset, dt=dt)
        z = normalise(self, x_t[None], state, None, inference=True)[0][0]
        carry, h = core.step(carry, z, dt=dt)
        return carry, x_t + self.glu(jax.nn.gelu(h))

    @checks_first(_check_chunk)
    @jaxtyped(typechecker=beartype)
    def chunk(
        self,
        carry: PyTree[ArrayLike],
        x: Float[ArrayLike, "length d_model"],
        state: eqx.nn.State,
        *,
        length: Integer[ArrayLike, ""] | None = None,
        segment_ids: Integer[ArrayLike, " length"] | None = None,
        reset: Bool[ArrayLike, ""] | None = None,
        inference: bool = True,
        key: PRNGKeyArray | None = None,
        carry_gradient: bool = False,
        dt: ArrayLike | None = None,
    ) -> tuple[PyTree[Array], Float[Array, "length d_model"]]:
        r"""The next chunk of a stream in parallel, starting from `carry`: chunked
        prefill (inference mode, the default) or a training chunk of truncated
        backpropagation through time (`inference=False`).

        **Arguments:**

        - `carry`: the recurrent state after the previous chunk (`init_carry()` before
            the first).
        - `x`: the chunk, shape `(length, d_model)`, `length >= 1`.
        - `state`: the block's `eqx.nn.State` (read, not updated).
        - `length`: the number of valid leading positions of the chunk, the rest being
            padding with any content (so chunks of different lengths share one padded
            shape and one compilation); 0 is allowed (a stream with nothing new in a call
            over many streams: the carry is kept, the outputs are zero). `None`: all valid.
        - `segment_ids`: packed sequences in the chunk, as in the call (a new sequence
            wherever the value changes): the first continues the stream from `carry`, each
            later one starts from the zero state, so a chunk may end one sequence and start
            the next. `None`: one sequence.
        - `reset`: a boolean scalar; `True` starts a new sequence at the chunk's first
            position (from `init_carry()`, whatever `carry` holds). Under `jax.vmap` one per
            stream. `None`: `False`.
        - `inference`: `True` (default, as this method always was): running batch-norm
            statistics, no dropout. `False`: training mode, dropout with `key`; a block
            with batch norm refuses (its statistics span whole sequences of the batch,
            which a chunk does not have): use `norm="layer"` or `norm=None`. Unlike the
            call, the block's own inference flags (`eqx.nn.inference_mode`) are not read.
        - `key`: for dropout in training mode (needed when `dropout > 0`); the same key
            gives the call's dropout masks on a chunk of the same shape.
        - `carry_gradient`: `False` (default): the incoming carry is a constant of the
            gradient (`jax.lax.stop_gradient`), so gradients are exact within the chunk and
            stop at its start (truncated backpropagation through time). `True`: gradients
            flow into the carry (e.g. through a `jax.lax.scan` over chunks: the gradient of
            the whole sequence).
        - `dt`: the chunk's time steps, `(length,)` or a scalar, as in the call (the first
            is the gap since the previous chunk's last position).

        **Returns:** `(carry, y)`: the state after the chunk's last valid position (with
        `segment_ids`: that of the last sequence), and the outputs, zero at padded
        positions. Chunks one after another give the outputs and final state of one call
        over their concatenation, and of `step` position by position.
        """
        core = self._causal_core("chunk")
        if not inference and isinstance(self.norm, MaskedBatchNorm):
            raise ValueError(
                "`LRUBlock.chunk(..., inference=False)` cannot train a block with batch norm "
                "(`norm='batch'`): its statistics are over whole sequences of the batch, and "
                "a chunk holds a part of each, so chunked training would not be the "
                "training of the whole sequences. Use `norm='layer'` or `norm=None` to "
                "train by chunks, or train with the block's call on whole sequences."
            )
        c = start_chunk(
            self, carry, x, core=core, length=length, segment_ids=segment_ids, reset=reset,
            carry_gradient=carry_gradient, dt=dt,
        )  # fmt: skip
        z, _ = normalise(self, c.x, state, c.mask, inference=True)  # batch norm: running stats
        z = where_valid(c.mask, z)
        h, new = core.run(
            z, initial_state=c.carry, length=c.last, segment_ids=c.segment_ids, dt=c.dt
        )
        y = residual(self, c.x, h, c.mask, key, inference)
        return keep_when_empty(c.valid, new, c.carry), y
